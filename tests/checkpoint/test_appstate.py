"""Application state round trips with real MPI runs: resizable arrays (one grows, one shrinks, one 2-D), every
generator family (the next 1000 draws equal the failure-free run's) and a dict of plain values (big ints,
nested lists, unicode, bytes, NumPy arrays and scalars), at L1, after node loss at L2 and L3, and at L4 with
dCP; unsupported values refused before anything is written; forged state records (deep nesting, a huge
length, a truncated value, a generator state of wrong types) treated as damaged copies.

Every run is ``tests/programs/appstate_app.py`` (see its docstring); a recovery prints one line per rank.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

from ftkit.inject import delete_node_dir
from ftkit.storage.format.compressed import CompressedSource
from ftkit.storage.format.container import read_header
from ftkit.storage.format.staterecord import KIND_DICT, KIND_GENERATOR, MAGIC, encode_record

from ..conftest import REPO, run_python
from ._util import node_dirs, rank_lines, write_config

pytestmark = pytest.mark.mpi

PROGRAM = REPO / "tests" / "programs" / "appstate_app.py"
N = 4
TIMEOUT = 240.0
PREAMBLE = struct.Struct("<8sHHIQQ")


def _run(d: Path, mode: str, *args: str, node_size: int = 2):
    return run_python(N, PROGRAM, "--config", "ftkit.ini", "--mode", mode, *args, node_size=node_size, cwd=d,
                      timeout=TIMEOUT)


def _write(d: Path, levels: str, node_size: int = 2, *args: str, **keys: object) -> None:
    write_config(d, **keys)
    r = _run(d, "write", "--levels", levels, *args, node_size=node_size)
    assert r.stdout.count("wrote id=") == N * len(levels.split(",")), r.stdout + r.stderr


def _recovered(d: Path, *args: str, node_size: int = 2) -> tuple[dict[int, dict[str, str]], str]:
    r = _run(d, "recover", *args, node_size=node_size)
    assert not r.timed_out, r.stdout + r.stderr
    out = {}
    for rank, line in rank_lines(r.stdout, N).items():
        assert line.startswith("recovered"), f"rank {rank}: {line}\n{r.stderr}"
        out[rank] = dict(re.findall(r"(\w+)=(\S*)", line))
    return out, r.stdout


def _all_ok(got: dict[int, dict[str, str]], ckpt_id: int, level: int, step: int) -> None:
    for rank, v in got.items():
        assert (v["id"], v["level"], v["step"]) == (str(ckpt_id), str(level), str(step)), (rank, v)
        for what in ("shapes", "arrays", "rng", "state", "inplace"):
            assert v[what] == "ok", (rank, what, v)
        assert v["resized"] == "m,p,q", (rank, v)


@pytest.mark.parametrize("case", ["L1", "L2-node-lost", "L3-node-lost", "L4-dcp-local-lost",
                                  "L4-zstd-local-lost"])
def test_state_round_trip(tmp_path, case):
    d = tmp_path / "run"
    if case == "L1":
        _write(d, "1,1")
        got, _ = _recovered(d)
        _all_ok(got, 2, 1, 1)
    elif case == "L2-node-lost":
        _write(d, "1,2", group_size=2)
        delete_node_dir(node_dirs(d)[1])
        got, _ = _recovered(d)
        _all_ok(got, 2, 1, 1)  # stored_shape() rebuilt node 1's L1 files from L2: recover() reads L1
    elif case == "L3-node-lost":
        _write(d, "1,3", node_size=1, group_size=4)
        delete_node_dir(node_dirs(d)[2])
        got, _ = _recovered(d, "--no-probe", node_size=1)
        _all_ok(got, 2, 3, 1)
    else:
        zstd = case == "L4-zstd-local-lost"
        if zstd:  # 'q' (a constant: it would compress) is protected with compression="none"
            _write(d, "4,4", 2, "--q-compression", "none", compression="zstd")
        else:
            _write(d, "4,4", enable_dcp=1, inline_l4=0)
        for node in node_dirs(d):
            delete_node_dir(node)
        if zstd:  # the L4 copies are compressed, and ftkit ls says by how much
            (l4,) = (d / "run" / "global").glob("*/l4/ckpt2/rank0.ftk")
            assert l4.read_bytes()[:8] == b"FTKITCZ1"
            header = read_header(l4)
            with CompressedSource(l4) as src:
                for s in header.sections:  # (an incompressible generator state is stored raw too)
                    codecs = {c[4] for c in src.chunks if s.offset <= c[0] < s.offset + s.nbytes}
                    want = {"p": {2}, "m": {2}, "q": {0}}.get(s.name, codecs)
                    assert codecs == want, (s.name, codecs)
            ls = subprocess.run([sys.executable, "-m", "ftkit", "ls", str(d / "run" / "meta"), "--json"],
                                capture_output=True, text=True, timeout=60)
            rows = json.loads(ls.stdout)["checkpoints"]
            assert rows[-1]["l4_ratio"] > 1.5 and rows[-1]["l4_stored_bytes"] < rows[-1]["bytes"], ls.stdout
        got, _ = _recovered(d)
        _all_ok(got, 2, 4, 1)


def test_elastic_restart_of_a_resizable_array_with_a_layout(tmp_path):
    # 4 ranks checkpoint boxes of sizes that change between checkpoints (global length 478, then 678);
    # the local directories are lost; 2 ranks ask the stored global shape, split it evenly and reshard.
    d = tmp_path / "run"
    write_config(d)
    r = _run(d, "gwrite", "--levels", "4,4")
    assert r.stdout.count("wrote id=") == 2 * N, r.stdout + r.stderr
    for node in node_dirs(d):
        delete_node_dir(node)
    r = run_python(2, PROGRAM, "--config", "ftkit.ini", "--mode", "grecover", node_size=2, cwd=d,
                   timeout=TIMEOUT)
    lines = rank_lines(r.stdout, 2)
    assert all(line == "grecovered n=678 step=1 data=ok" for line in lines.values()), r.stdout + r.stderr


def test_unsupported_values_are_refused_before_anything_is_written(tmp_path):
    d = tmp_path / "run"
    write_config(d)
    r = _run(d, "bad")
    protect = re.findall(r"^R(\d) protect (\w+): (.*)$", r.stdout, re.M)
    assert sorted(int(x[0]) for x in protect) == list(range(N)), r.stdout + r.stderr
    want = ("UnsupportedStateError", "state['history'][3]: set is not supported")
    assert all(x[1:] == want for x in protect), r.stdout
    ckpt = re.findall(r"^R(\d) checkpoint (\w+): (.*)$", r.stdout, re.M)
    assert sorted(int(x[0]) for x in ckpt) == list(range(N)), r.stdout + r.stderr
    for _rank, kind, message in ckpt:
        assert kind == "CheckpointError" and message.endswith("ckpts=0"), message
        assert "rank 1: UnsupportedStateError: state['history'][2]['k']: set is not supported" in message
    assert not list((d / "run").rglob("*.ftk")), "no checkpoint file may remain"


# -- forged state records: self-consistent files (digests and manifest re-signed) holding hostile records --

def _deep(n: int) -> bytes:
    return (MAGIC + b"\x01d" + (b"l" + (1).to_bytes(8, "little")) * n)[:n]


def _huge(n: int) -> bytes:
    return (MAGIC + b"\x01d" + b"d" + (1).to_bytes(8, "little") + b"s" + (2**62).to_bytes(8, "little")).ljust(
        n, b"x")


def _sized(kind: bytes, make, n: int) -> bytes:
    rec = encode_record(kind, make(0))
    rec = encode_record(kind, make(n - len(rec)))
    assert len(rec) == n
    return rec


def _truncated(n: int) -> bytes:
    rec = bytearray(_sized(KIND_DICT, lambda k: {"s": "x" * k}, n))
    at = len(MAGIC) + 2 + 9 + 10  # the value's tag: after magic, version, kind, dict tag and count, the key
    assert rec[at:at + 1] == b"s"
    length = int.from_bytes(rec[at + 1:at + 9], "little")
    rec[at + 1:at + 9] = (length + 5).to_bytes(8, "little")
    return bytes(rec)


def _wrong_types(n: int) -> bytes:
    return _sized(KIND_GENERATOR, lambda k: {"bit_generator": "PCG64", "state": "no", "pad": b"x" * k}, n)


def _forge_section(d: Path, ckpt_id: int, rank: int, name: str, make) -> None:
    """Replace section ``name`` of the rank's L1 file by ``make(nbytes)``; re-sign the file and manifest."""
    (path,) = (d / "run" / "local").glob(f"node*/*/l1/ckpt{ckpt_id}/rank{rank}.ftk")
    raw = bytearray(path.read_bytes())
    magic, version, flags, res, hlen, _ = PREAMBLE.unpack_from(raw)
    header = json.loads(bytes(raw[32:32 + hlen]))
    (s,) = [s for s in header["sections"] if s["name"] == name]
    off, nbytes = s["offset"], s["nbytes"]
    raw[off:off + nbytes] = make(nbytes)
    s["xxh3"] = f"{xxhash.xxh3_64_intdigest(bytes(raw[off:off + nbytes])):016x}"
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= hlen
    text = text.ljust(hlen, b" ")
    raw[32:32 + hlen] = text
    raw[:32] = PREAMBLE.pack(magic, version, flags, res, hlen, xxhash.xxh3_64_intdigest(text))
    path.write_bytes(bytes(raw))
    manifest = d / "run" / "meta" / "manifest.json"
    doc = json.loads(manifest.read_text())
    (entry,) = [e for e in doc["checkpoints"] if e["id"] == ckpt_id]
    entry["files"][rank]["digest"] = f"{xxhash.xxh3_64_intdigest(text):016x}"
    manifest.write_text(json.dumps(doc))


def test_forged_state_records_are_damaged_copies(tmp_path):
    d = tmp_path / "run"
    _write(d, "4,1", inline_l4=0)
    _forge_section(d, 2, 0, "rng_MT19937", _deep)  # the largest record: room for 64 levels
    _forge_section(d, 2, 1, "rng_PCG64", _wrong_types)
    _forge_section(d, 2, 2, "state", _huge)
    _forge_section(d, 2, 3, "state", _truncated)
    got, out = _recovered(d)
    # Checkpoint 2's records are damaged on every rank: the older checkpoint 1 (at L4) is recovered.
    skipped = re.findall(r"^S0 skipped (.*)$", out, re.M)
    assert len(skipped) == 1 and skipped[0].startswith("checkpoint 2 "), out
    for rank, why in ((0, "nested more than 64 levels deep"), (1, "not a valid PCG64 state"),
                      (2, "a length of 4611686018427387904")):
        assert f"rank {rank} (node {rank // 2}): state record" in skipped[0], skipped[0]
        assert why in skipped[0], (why, skipped[0])
    assert "4 rank(s) have no usable copy" in skipped[0] and "and 1 more rank(s)" in skipped[0]  # rank 3 too
    for rank, v in got.items():
        assert (v["id"], v["step"]) == ("1", "0"), (rank, out)
        # (stored_shape() answered for checkpoint 2: its files verify; only decoding finds the forgery.)
        assert all(v[w] == "ok" for w in ("arrays", "rng", "state")), (rank, out)
