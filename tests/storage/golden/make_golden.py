"""Regenerate the golden files (only when a format version changes: the committed files are a promise).

* ``golden_v1.ftk`` -- a checkpoint file (container format 1);
* ``parity_<code>/`` -- an encoded (L3) group of three data files and their parity files (parity format 1),
  for ``rs`` and ``xor``;
* ``golden_manifest_v1.json`` -- a manifest (version 1);
* ``golden_state_v1.json`` -- a process-state table (version 1);
* ``golden_appstate_v1.ftk`` -- a checkpoint file holding an array and two state records (state record
  format 1, see :mod:`ftkit.storage.format.staterecord`): a PCG64 generator and a dict of every supported
  type;
* ``golden_compressed_v1.ftk`` -- a compressed L4 copy (container format 1, see
  :mod:`ftkit.storage.format.compressed`) of a file of three arrays, one per codec (zstd, lz4, blosc). Its
  bytes depend on the codec libraries' versions: later versions must *read* it bit-exactly;
* ``dcp_zstd_v2/`` -- a differential L4 block store compressed with zstd (dCP map format 2, see
  :mod:`ftkit.storage.format.dcpstore`) of rank 0: checkpoint 1 (a full write of the plain file of
  :func:`golden_compressed_arrays`) and checkpoint 2 (a differential write over it, :func:`dcp_golden_files`).

Run: python tests/storage/golden/make_golden.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ftkit.storage.format.container import write_file
from ftkit.storage.groupcode.offline import assess_group_files, rebuild_group_files
from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile

HERE = Path(__file__).parent
GROUP_TAG = "golden/ckpt5"


def golden_arrays() -> list[tuple[str, np.ndarray]]:
    return [
        ("u", np.linspace(-1.0, 1.0, 24, dtype="<f8").reshape(4, 6)),
        ("step", np.array([42], dtype="<i8")),
        ("mask", np.array([True, False, True], dtype="|b1")),
        ("z", np.array([1 + 2j, -3.5j], dtype="<c16")),
        ("big_endian", np.arange(5, dtype=">i4")),
        ("scalar", np.array(2.5, dtype="<f4")),
        ("empty", np.zeros((0, 3), dtype="<u2")),
    ]


def group_data() -> list[bytes]:
    """The three data files of the golden group (uneven sizes, one empty)."""
    rng = np.random.default_rng(20261203)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (301, 177, 0)]


def group_paths(root: Path) -> tuple[list[Path], list[Path]]:
    """Data and parity file paths of the golden group under ``root``."""
    return ([root / f"data{m}.bin" for m in range(3)], [root / f"rank{m}.parity" for m in range(3)])


def write_group(root: Path, code: str) -> None:
    """Write the golden group's data files under ``root`` and encode them with ``code``."""
    root.mkdir(parents=True, exist_ok=True)
    data, parity = group_paths(root)
    for p, blob in zip(data, group_data(), strict=True):
        p.write_bytes(blob)
    plan = assess_group_files(data, parity, code=code, tag=GROUP_TAG)
    rebuild_group_files(plan, data, parity, tag=GROUP_TAG)


def golden_manifest() -> Manifest:
    entries = [
        CheckpointEntry(id=1, seq=1, level=4, time=1764770000.25, levels={1: True, 4: True}, nodes=[0, 0, 1],
                        files=[RankFile(1024, "0123456789abcdef"), RankFile(2048, "fedcba9876543210"),
                               RankFile(4096, "00000000000000ff")], extra={"group_size": 3}),
        CheckpointEntry(id=2, seq=2, level=3, time=1764770060.5, levels={1: True, 3: False}, nodes=[0, 0, 1],
                        files=[RankFile(1024, "1111111111111111"), RankFile(2048, "2222222222222222"),
                               RankFile(4096, "3333333333333333")], extra={"l3_code": "rs"}),
    ]
    return Manifest(exec_id="golden-run", nranks=3, created=1764769990.0, updated=1764770061.0,
                    status="running", checkpoints=entries,
                    dirs={"ckpt_dir": "/ckpt/local", "glbl_dir": "/ckpt/global", "meta_dir": "/ckpt/meta"})


def golden_app_state() -> tuple[dict, dict]:
    """The dict and the PCG64 generator state stored in ``golden_appstate_v1.ftk``."""
    rng = np.random.Generator(np.random.PCG64(20261205))
    rng.random(3)
    state = {"step": 42, "t": 0.125, "neg0": -0.0, "big": -(2**130) + 7, "none": None, "yes": True,
             "no": False,
             "history": [1.0, 0.5, [0.25, ("deep", b"\x00\xffbytes")]], "unicode": "héllo ✓ 東京",
             "mask": np.array([[True, False], [False, True]]), "be": np.arange(3, dtype=">i4"),
             "scalar": np.float32(1.5), "c": np.complex128(1 - 2j), 3: {"int key": {(1, "t"): b""}}}
    return state, rng.bit_generator.state


def golden_app_arrays() -> list[tuple[str, np.ndarray]]:
    """The sections of ``golden_appstate_v1.ftk``: a resizable array and the two encoded records."""
    from ftkit.storage.format.staterecord import KIND_DICT, KIND_GENERATOR, encode_record

    state, rng_state = golden_app_state()
    return [("p", np.arange(7, dtype="<f8") * 0.5),
            ("rng", np.frombuffer(encode_record(KIND_GENERATOR, rng_state, "rng"), np.uint8)),
            ("state", np.frombuffer(encode_record(KIND_DICT, state, "state"), np.uint8))]


def write_app_state(path: Path) -> None:
    write_file(path, golden_app_arrays(), rank=1, level=1, ckpt_id=3, exec_id="golden", nranks=2,
               meta={"note": "ftkit state records v1 golden file"}, fsync=False)


def golden_compressed_arrays() -> list[tuple[str, np.ndarray]]:
    x = np.linspace(0.0, 4.0, 1024)
    return [("zs", np.round(np.sin(x), 3)), ("lz", (np.arange(2048) // 7).astype("<i4")),
            ("bl", np.round(np.cos(x), 2).astype("<f4")),
            ("raw", np.frombuffer(np.random.default_rng(3).bytes(512), dtype="|u1"))]


def write_compressed(plain: Path, out: Path) -> None:
    """The plain file of :func:`golden_compressed_arrays`, and its compressed copy (a codec per array)."""
    from ftkit.checkpoint.levels.pfs import compress_copy

    write_file(plain, golden_compressed_arrays(), rank=0, level=4, ckpt_id=9, exec_id="golden", nranks=1,
               fsync=False)
    compress_copy(plain, out, "zstd", 3, {"lz": "lz4", "bl": "blosc"})


DCP_BLOCK = 256


def dcp_golden_files(plain: Path) -> list[bytes]:
    """The two checkpoint files of ``dcp_zstd_v2/``: the plain compressed-arrays file, then a copy with a few
    bytes changed (so checkpoint 2 references most blocks of checkpoint 1)."""
    write_file(plain, golden_compressed_arrays(), rank=0, level=4, ckpt_id=9, exec_id="golden", nranks=1,
               fsync=False)
    first = plain.read_bytes()
    second = bytearray(first)
    for at in (len(first) // 3, len(first) // 2, len(first) - 1):
        second[at] ^= 0x5A
    return [first, bytes(second)]


def write_dcp(tmp: Path, out: Path) -> None:
    """Write ``dcp_zstd_v2/`` (see the module docstring)."""
    from ftkit.checkpoint.dcp import DcpWriter

    w = DcpWriter(out, 0, DCP_BLOCK, codec="zstd", level=3)
    for cid, content in enumerate(dcp_golden_files(tmp / "plain.ftk"), 1):
        (tmp / "c").write_bytes(content)
        w.write(tmp / "c", cid, keep_ids=(1, 2))


def golden_state_table() -> np.ndarray:
    return np.array([[1, 1, 0], [1, 0, 1]], dtype=np.int8)


if __name__ == "__main__":
    from ftkit.failure.state import save_state_table

    out = HERE / "golden_v1.ftk"
    info = write_file(out, golden_arrays(), rank=3, level=4, ckpt_id=17, exec_id="golden", nranks=8,
                      meta={"note": "ftkit format v1 golden file"}, fsync=False)
    print(out, info.size, info.digest)
    for code in ("rs", "xor"):
        write_group(HERE / f"parity_{code}", code)
    (HERE / "golden_manifest_v1.json").write_text(golden_manifest().dumps())
    save_state_table(HERE / "golden_state_v1.json", golden_state_table())
    write_app_state(HERE / "golden_appstate_v1.ftk")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_compressed(Path(tmp) / "plain.ftk", HERE / "golden_compressed_v1.ftk")
    with tempfile.TemporaryDirectory() as tmp:
        write_dcp(Path(tmp), HERE / "dcp_zstd_v2")
