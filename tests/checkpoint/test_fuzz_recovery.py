"""Recovery under hostile files (issue 13's fuzzer, recovery side).

A real 4-rank run on 2 emulated nodes takes checkpoint 1 at L4 (through L1 and a flush: L1 + L4 copies) and
checkpoint 2 at L2 (L1 + partner copies). Each case copies that run and damages its files for real: flipped
bytes, truncation, files swapped between ranks, between checkpoints and between runs, symbolic links in
place of files, headers forged so that they still pass their own checksum, hostile manifests. One MPI run
then recovers every case in turn. Every case must end, on every rank, in data bit-identical to what was
checkpointed (from another copy, level or the older checkpoint) or in a specific ftkit error; and the whole
run must end well inside the launcher's timeout (no hang).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import pytest
import xxhash

from ftkit.inject import corrupt_file, truncate_file

from ..conftest import REPO, run_python
from ._util import write_config

pytestmark = pytest.mark.mpi

CASES = REPO / "tests" / "programs" / "ckpt_cases.py"
N = 4
TIMEOUT = 300.0
PREAMBLE = struct.Struct("<8sHHIQQ")


def _write_run(d: Path) -> Path:
    write_config(d, inline_l4=0, group_size=2)
    r = run_python(N, CASES, "fuzz-write", node_size=2, cwd=d, timeout=TIMEOUT)
    assert r.stdout.count("WRITTEN") == N, r.stdout + r.stderr
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two independent runs with the same layout (the second one for swaps between runs)."""
    base = tmp_path_factory.mktemp("fuzz")
    return _write_run(base / "a"), _write_run(base / "b")


def l1(d: Path, ckpt: int, rank: int) -> Path:
    (found,) = (d / "run" / "local").glob(f"node*/*/l1/ckpt{ckpt}/rank{rank}.ftk")
    return found


def l4(d: Path, ckpt: int, rank: int) -> Path:
    (found,) = (d / "run" / "global").glob(f"*/l4/ckpt{ckpt}/rank{rank}.ftk")
    return found


def _forge(path: Path, edit) -> None:
    """Rewrite ``path``'s header with ``edit(header_dict, file_bytes)`` and re-sign it (a valid checksum)."""
    raw = bytearray(path.read_bytes())
    magic, version, flags, res, hlen, _ = PREAMBLE.unpack_from(raw)
    header = json.loads(bytes(raw[32:32 + hlen]))
    edit(header, raw)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    assert len(text) <= hlen, "forged header must fit"
    text = text.ljust(hlen, b" ")
    raw[32:32 + hlen] = text
    raw[:32] = PREAMBLE.pack(magic, version, flags, res, hlen, xxhash.xxh3_64_intdigest(text))
    path.write_bytes(bytes(raw))


def _forge_dtype(header, raw) -> None:
    header["sections"][0]["dtype"] = "<f3"


def _forge_data(header, raw) -> None:
    """Change data bytes and give the section the digest of the new bytes: self-consistent, but not ours."""
    s = header["sections"][0]
    off, n = s["offset"], s["nbytes"]
    raw[off:off + 8] = struct.pack("<d", 1e300)
    s["xxh3"] = f"{xxhash.xxh3_64_intdigest(bytes(raw[off:off + n])):016x}"


def _nested_manifest(d: Path) -> None:
    (d / "run" / "meta" / "manifest.json").write_text("[" * 200000 + "]" * 200000)


def _huge_manifest(d: Path) -> None:
    p = d / "run" / "meta" / "manifest.json"
    m = json.loads(p.read_text())
    p.write_text(json.dumps(m).replace('"nranks": 4', '"nranks": 1' + "0" * 5000))


def _lose_rank1_ckpt2(d: Path) -> None:
    l1(d, 2, 1).unlink()
    for p in (d / "run" / "local").glob("node1/*/l2/ckpt2/*"):   # rank 1 (node 0)'s partner copy
        p.unlink()


def _damage(d: Path, other: Path, case: str) -> None:
    if case == "flip_data":
        corrupt_file(l1(d, 2, 1), offset=-100)
    elif case == "flip_header":
        corrupt_file(l1(d, 2, 2), offset=40)
    elif case == "truncate":
        f = l1(d, 2, 3)
        truncate_file(f, f.stat().st_size // 2)
    elif case == "swap_ranks":
        a, b = l1(d, 2, 0), l1(d, 2, 1)
        tmp = a.with_name("x")
        a.rename(tmp)
        b.rename(a)
        tmp.rename(b)
    elif case == "swap_ckpts":
        shutil.copyfile(l1(d, 1, 2), l1(d, 2, 2))
    elif case == "swap_runs":
        shutil.copyfile(l1(other, 2, 1), l1(d, 2, 1))
        shutil.copyfile(l4(other, 1, 1), l4(d, 1, 1))
    elif case == "symlink_other_rank":
        f = l1(d, 2, 0)
        f.unlink()
        f.symlink_to(l1(d, 2, 3))
    elif case == "symlink_outside":
        f = l1(d, 2, 3)
        f.unlink()
        f.symlink_to("/etc/hostname")
    elif case == "forged_dtype":
        _forge(l1(d, 2, 1), _forge_dtype)
    elif case == "forged_data":
        _forge(l1(d, 2, 2), _forge_data)
    elif case == "lost_everywhere_ckpt2":
        _lose_rank1_ckpt2(d)
        _forge(l1(d, 2, 0), _forge_data)
    elif case == "l4_fallback":
        shutil.rmtree(d / "run" / "local")
    elif case == "l4_damaged_too":
        shutil.rmtree(d / "run" / "local")
        _forge(l4(d, 1, 2), _forge_dtype)
        corrupt_file(l4(d, 1, 3), offset=-1)
    elif case == "nested_manifest":
        _nested_manifest(d)
    elif case == "huge_number_manifest":
        _huge_manifest(d)
    elif case == "manifest_of_other_run":
        shutil.copyfile(other / "run" / "meta" / "manifest.json", d / "run" / "meta" / "manifest.json")
    else:
        raise AssertionError(case)


#: What each case must end in: the checkpoint recovered bit for bit, or the ftkit error on every rank.
EXPECT = {
    "flip_data": "id=2", "flip_header": "id=2", "truncate": "id=2", "swap_ranks": "id=2",
    "swap_ckpts": "id=2", "swap_runs": "id=2", "symlink_other_rank": "id=2", "symlink_outside": "id=2",
    "forged_dtype": "id=2", "forged_data": "id=2", "lost_everywhere_ckpt2": "id=1",
    "l4_fallback": "id=1", "l4_damaged_too": "RecoveryError", "nested_manifest": "RecoveryError",
    "huge_number_manifest": "RecoveryError", "manifest_of_other_run": "RecoveryError",
}


def test_damaged_files_end_in_correct_data_or_an_ftkit_error(runs, tmp_path):
    a, b = runs
    dirs = []
    for case in EXPECT:
        d = tmp_path / case
        shutil.copytree(a, d, symlinks=True)
        _damage(d, b, case)
        dirs.append(str(d))
    r = run_python(N, CASES, "recover-cases", *dirs, node_size=2, cwd=tmp_path, timeout=TIMEOUT)
    assert not r.timed_out, "a damaged file made recovery hang:\n" + r.stdout + r.stderr
    got: dict[str, dict[int, str]] = {}
    for m in re.finditer(r"^R(\d+) case=(\S+) (.*)$", r.stdout, re.M):
        got.setdefault(m.group(2), {})[int(m.group(1))] = m.group(3)
    problems = []
    for case, want in EXPECT.items():
        lines = got.get(case, {})
        if sorted(lines) != list(range(N)):
            problems.append(f"{case}: ranks {sorted(lines)} answered")
            continue
        for rank, line in lines.items():
            if want.startswith("id="):
                ok = line.startswith(f"recovered {want} data=ok")
            else:
                ok = line.startswith(f"error {want}:")
            if not ok or "RAW" in line:
                problems.append(f"{case} rank {rank}: {line}")
    assert not problems, "\n".join(problems) + "\n--- stderr ---\n" + r.stderr[-3000:]
    assert os.path.exists("/etc/hostname"), "recovery must never remove a file a link points to"
