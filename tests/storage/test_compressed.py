"""Compressed L4 copies (issue 35): every codec round-trips checkpoint files of several dtypes bit for bit;
the copy is read through the ordinary readers (header, verify, read_arrays: digests over the uncompressed
bytes); range reads equal the plain file's and touch only their chunks; incompressible data is stored raw;
damaged or forged copies are ftkit format errors."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.checkpoint.levels.pfs import compress_copy
from ftkit.errors import CorruptionError, FormatError
from ftkit.storage.format.compressed import MAX_CHUNK, CompressedSource, open_source, stored_size
from ftkit.storage.format.container import read_arrays, read_header, verify_file, write_file
from ftkit.storage.format.source import FileSource

CODECS = ["lz4", "zstd", "blosc"]
PRE = struct.Struct("<8sHHIQQ")
REC = struct.Struct("<QQIIBBHQ")


def _arrays() -> list[tuple[str, np.ndarray]]:
    x = np.linspace(0.0, 1.0, 400_000)
    return [("heat", np.sin(x * 7.0) * np.cos(x * 3.0)),                       # smooth f8, > MAX_CHUNK
            ("mask", (np.arange(300_000) % 97 < 40).astype(np.int32)),         # integer mask
            ("noise", np.random.default_rng(5).integers(0, 256, 2_000_000, dtype=np.uint8)),  # random
            ("z", (x[:5000] + 1j * x[:5000]).astype(np.complex64)),
            ("empty", np.zeros((0, 3))),
            ("flag", np.array([True, False, True]))]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "rank0.ftk"
    write_file(path, _arrays(), rank=0, level=4, ckpt_id=1, exec_id="z", nranks=1, fsync=False)
    return path


@pytest.fixture(scope="module", params=CODECS)
def copy(request, plain, tmp_path_factory):
    dst = tmp_path_factory.mktemp("copy") / f"{request.param}.ftk"
    compress_copy(plain, dst, request.param, 3)
    return dst


def test_a_compressed_copy_reads_as_the_plain_file(plain, copy):
    assert read_header(copy) == read_header(plain)
    assert verify_file(copy, expect_digest=read_header(plain).digest) == read_header(plain)
    got, want = read_arrays(copy), read_arrays(plain)
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype and got[name].tobytes() == arr.tobytes(), name
    with open_source(copy) as src:
        out = bytearray(src.size)
        src.read_into(0, memoryview(out))
    assert bytes(out) == plain.read_bytes()


def test_compression_pays_on_smooth_data_and_random_data_is_stored_raw(plain, copy, tmp_path):
    logical, stored = stored_size(copy)
    assert logical == plain.stat().st_size and stored < logical  # the heat field and the mask compress
    noise = tmp_path / "noise.ftk"
    write_file(noise, [("noise", np.random.default_rng(1).integers(0, 2**63, 1_000_000))], rank=0, level=4,
               ckpt_id=1, exec_id="z", nranks=1, fsync=False)
    codec = copy.stem
    compress_copy(noise, tmp_path / "noisez.ftk", codec, 3)
    with CompressedSource(tmp_path / "noisez.ftk") as src:
        assert {c[4] for c in src.chunks[1:]} == {0}  # every data chunk raw
    assert stored_size(tmp_path / "noisez.ftk")[1] <= 1.01 * noise.stat().st_size


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.integers(0, 3 * MAX_CHUNK))
def test_range_reads_equal_the_plain_files(plain, copy, start, n):
    size = plain.stat().st_size
    start %= size
    n = min(n, size - start)
    with open_source(copy) as src, FileSource(plain) as ref:
        a, b = bytearray(n), bytearray(n)
        src.read_into(start, memoryview(a))
        ref.read_into(start, memoryview(b))
    assert a == b


def test_per_array_codecs(plain, tmp_path):
    dst = tmp_path / "mixed.ftk"
    compress_copy(plain, dst, "none", 3, {"heat": "zstd", "mask": "lz4"})
    header = read_header(dst)
    with CompressedSource(dst) as src:
        for s in header.sections:
            got = {c[4] for c in src.chunks if s.offset <= c[0] < s.offset + s.nbytes}
            assert got == {"heat": {2}, "mask": {1}}.get(s.name, {0} if s.nbytes else set()), s.name
    assert read_arrays(dst)["heat"].tobytes() == read_arrays(plain)["heat"].tobytes()


def _damage_chunk(path, index: int) -> None:
    raw = bytearray(path.read_bytes())
    _, so, _, sn, *_ = REC.unpack_from(raw, PRE.size + index * REC.size)
    raw[so + sn // 2] ^= 0x40
    path.write_bytes(bytes(raw))


def test_a_range_read_decompresses_only_its_chunks_and_damage_is_detected(copy, tmp_path):
    bad = tmp_path / "bad.ftk"
    bad.write_bytes(copy.read_bytes())
    with CompressedSource(bad) as src:
        last = max(range(2, len(src.chunks)), key=lambda i: src.chunks[i][3])  # a big chunk, not chunk 1
        first_len = src.chunks[1][2]
    _damage_chunk(bad, last)
    with open_source(bad) as src:
        out = bytearray(first_len)
        src.read_into(src.chunks[1][0], memoryview(out))  # far from the damage: read fine
        with pytest.raises(CorruptionError, match="checksum mismatch in the chunk"):
            src.read_into(src.chunks[last][0], memoryview(bytearray(1)))
    with pytest.raises(CorruptionError):
        verify_file(bad)


@pytest.mark.parametrize("how", ["truncate", "index", "forged-lengths", "trailing"])
def test_damaged_or_forged_copies_are_format_errors(copy, tmp_path, how):
    raw = bytearray(copy.read_bytes())
    magic, version, flags, res, logical, n = PRE.unpack_from(raw)
    if how == "truncate":
        raw = raw[: len(raw) - 100]
    elif how == "index":
        raw[PRE.size + 3] ^= 1
    elif how == "trailing":
        raw += b"\x00"
    else:  # a re-signed index whose first chunk claims 2**32 - 1 bytes
        rec = list(REC.unpack_from(raw, PRE.size))
        rec[2] = 2**32 - 1
        REC.pack_into(raw, PRE.size, *rec)
        end = PRE.size + REC.size * n
        raw[end:end + 8] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(raw[:end])))
    bad = tmp_path / "bad.ftk"
    bad.write_bytes(bytes(raw))
    with pytest.raises(FormatError):
        read_header(bad)


def test_a_head_writes_the_compressed_copy_its_rank_asked_for(plain, tmp_path):
    from ftkit.checkpoint.levels.pfs import pfs_work

    dst = tmp_path / "l4" / "rank0.ftk"
    pfs_work({"src": str(plain), "dst": str(dst), "chunk": 1 << 20, "rank": 0, "id": 1,
              "compression": ["lz4", 3, {"noise": "none"}]}, None)
    assert dst.read_bytes()[:8] == b"FTKITCZ1"
    assert verify_file(dst) == read_header(plain)


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_a_forged_frame_claiming_a_huge_size_is_damage_not_an_allocation(plain, tmp_path, codec):
    # A chunk re-signed (stored digest and index digest valid) whose frame claims 2**31 - 1 bytes.
    dst = tmp_path / "forged.ftk"
    compress_copy(plain, dst, {1: "lz4", 2: "zstd", 3: "blosc"}[codec], 3)
    raw = bytearray(dst.read_bytes())
    _, _, _, _, _, n = PRE.unpack_from(raw)
    with CompressedSource(dst) as src:
        i = next(k for k, c in enumerate(src.chunks) if c[4] == codec)
    lo, so, ln, sn, cid, item, pad, _ = REC.unpack_from(raw, PRE.size + i * REC.size)
    frame = bytearray(raw[so:so + sn])
    if codec == 1:
        frame[0:4] = (2**31 - 1).to_bytes(4, "little")   # numcodecs' LZ4 size prefix
    elif codec == 2:
        frame = bytearray(__import__("numcodecs").Zstd(3).encode(b"\0" * (2**27)))  # 128 MiB of zeros
    else:
        frame[4:8] = (2**31 - 1).to_bytes(4, "little")   # blosc's nbytes
    stored = bytes(raw[:so]) + bytes(frame) + bytes(raw[so + sn:])
    raw = bytearray(stored)
    shift = len(frame) - sn
    for k in range(i, n):
        rec = list(REC.unpack_from(raw, PRE.size + k * REC.size))
        if k == i:
            rec[3], rec[7] = len(frame), xxhash.xxh3_64_intdigest(bytes(frame))
        else:
            rec[1] += shift
        REC.pack_into(raw, PRE.size + k * REC.size, *rec)
    end = PRE.size + REC.size * n
    raw[end:end + 8] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(raw[:end])))
    dst.write_bytes(bytes(raw))
    with open_source(dst) as src, pytest.raises(CorruptionError, match="does not decode"):
        src.read_into(lo, memoryview(bytearray(1)))


def test_golden_compressed_copy_reads_bit_exactly(tmp_path):
    import importlib.util
    from pathlib import Path

    golden = Path(__file__).parent / "golden"
    spec = importlib.util.spec_from_file_location("make_golden", golden / "make_golden.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    path = golden / "golden_compressed_v1.ftk"
    with CompressedSource(path) as src:
        assert {c[4] for c in src.chunks} == {0, 1, 2, 3}  # raw header and random bytes, lz4, zstd, blosc
    plain = tmp_path / "plain.ftk"
    gen.write_compressed(plain, tmp_path / "again.ftk")
    assert verify_file(path, expect_digest=read_header(plain).digest) == read_header(plain)
    got = read_arrays(path)
    for name, arr in gen.golden_compressed_arrays():
        assert got[name].dtype == arr.dtype and got[name].tobytes() == arr.tobytes(), name


@pytest.mark.parametrize("codec", ["lz4", "zstd", "blosc"])
def test_written_straight_from_the_arrays_holds_the_plain_file(tmp_path, codec):
    """write_compressed (no plain file first) holds byte for byte the file write_file writes, with the same
    digests; incompressible and compressible sections, per-array codecs, a layout and an empty array."""
    from ftkit.storage.format.container import write_compressed
    from ftkit.storage.format.global_layout import Layout

    rng = np.random.default_rng(5)
    smooth = np.round(np.sin(np.linspace(0, 9, 300_001)), 4)           # > 1 MiB: several chunks, a ragged one
    arrays = [("smooth", smooth), ("noise", rng.integers(0, 2**62, 400_000, dtype=np.int64)),
              ("mask", (np.arange(70_000) % 3 == 0).astype(np.int32)), ("empty", np.zeros(0, np.float32)),
              ("c", (smooth[:5000] * (1 + 2j)).astype(np.complex128))]
    layouts = {"mask": Layout.of_box((140_000,), (70_000,), (70_000,))}
    kw = dict(rank=2, level=4, ckpt_id=7, exec_id="run", nranks=4, meta={"k": 1}, layouts=layouts)
    plain = write_file(tmp_path / "plain.ftk", arrays, **kw)
    packed = write_compressed(tmp_path / "packed.ftk", arrays, codec=codec, codec_level=3,
                              codecs={"mask": "lz4"}, **kw)
    assert (packed.size, packed.digest) == (plain.size, plain.digest)
    raw = (tmp_path / "plain.ftk").read_bytes()
    with CompressedSource(tmp_path / "packed.ftk") as src:
        out = bytearray(src.size)
        src.read_into(0, memoryview(out))
        codecs_used = {c[4] for c in src.chunks}
    assert bytes(out) == raw
    assert codecs_used >= {0, {"lz4": 1, "zstd": 2, "blosc": 3}[codec]}  # header and noise raw, the rest not
    assert (tmp_path / "packed.ftk").stat().st_size < 0.8 * len(raw)
    assert verify_file(tmp_path / "packed.ftk", expect_digest=plain.digest).digest == plain.digest
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no temporary left


def test_incompressible_sections_are_mostly_not_tried(tmp_path, monkeypatch):
    """After four chunks in a row of a section stored raw, only every eighth chunk of it is compressed."""
    import ftkit.storage.format.compressed as comp
    from ftkit.storage.format.container import write_compressed

    tried = []
    real = comp._encode
    monkeypatch.setattr(comp, "_encode", lambda nc, cid, lvl, data, ts: tried.append(len(data))
                        or real(nc, cid, lvl, data, ts))
    noise = np.random.default_rng(6).integers(0, 256, 40 * comp.MAX_CHUNK, dtype=np.uint8)
    write_compressed(tmp_path / "n.ftk", [("noise", noise)], rank=0, level=4, ckpt_id=1, exec_id="r",
                     nranks=1, codec="zstd", codec_level=3)
    assert len(tried) == 4 + 36 // 8                                     # 4 tries, then 1 probe in 8
    assert read_arrays(tmp_path / "n.ftk")["noise"].tobytes() == noise.tobytes()


@pytest.mark.parametrize("what", ["write_compressed", "dcp"])
def test_full_disk_is_a_storage_error_and_the_previous_file_stays(tmp_path, small_disk, what):
    """A compressed L4 file, or a compressed dCP write, that fills the disk raises StorageError naming the
    cause, leaves no temporary file, and the previous good checkpoint still reads bit for bit."""
    from ftkit.checkpoint.dcp import DcpWriter, restore_dcp
    from ftkit.errors import StorageError
    from ftkit.storage.format.container import write_compressed

    disk = small_disk(3 * 2**20)
    small = [("x", np.zeros(1000))]
    noise = [("x", np.random.default_rng(8).integers(0, 2**62, 2**19, dtype=np.int64))]   # 4 MiB, raw
    kw = dict(rank=0, level=4, nranks=1, exec_id="run", codec="zstd", codec_level=3)
    if what == "write_compressed":
        good = write_compressed(disk / "rank0.ftk", small, ckpt_id=1, **kw)
        with pytest.raises(StorageError, match="No space|ENOSPC|space"):
            write_compressed(disk / "rank0.ftk", noise, ckpt_id=2, **kw)
        assert verify_file(disk / "rank0.ftk", expect_digest=good.digest).digest == good.digest
        assert read_arrays(disk / "rank0.ftk")["x"].tobytes() == small[0][1].tobytes()
        assert sorted(p.name for p in disk.iterdir()) == ["rank0.ftk"]
    else:
        src = tmp_path / "c"
        src.write_bytes(small[0][1].tobytes())
        w = DcpWriter(disk / "l4", 0, 4096, codec="zstd")
        w.write(src, 1)
        src.write_bytes(noise[0][1].tobytes())
        with pytest.raises(StorageError, match="No space|ENOSPC|space"):
            w.write(src, 2)
        restore_dcp(disk / "l4", 0, 1, tmp_path / "o")
        assert (tmp_path / "o").read_bytes() == small[0][1].tobytes()
