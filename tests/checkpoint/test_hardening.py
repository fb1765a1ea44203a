"""Issue 13, checkpoint side: argument checks, a transactional manifest on a full disk, no raw MPI errors
when a rank or a head dies mid-encoding, no partial files after a failed background flush, path safety."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ..conftest import REPO, run_python
from ._util import TIMEOUT, write_config

pytestmark = pytest.mark.mpi

CASES = REPO / "tests" / "programs" / "ckpt_cases.py"


def run_cases(d: Path, nranks: int, *args: str, node_size: int = 2):
    return run_python(nranks, CASES, *args, node_size=node_size, cwd=d, timeout=TIMEOUT)


def lines_of(stdout: str, prefix: str = "") -> dict[int, list[str]]:
    """The ``R<rank> ...`` lines, by rank (only those starting with ``prefix``)."""
    found: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"^R(\d+) (.*)$", line)
        if m and m.group(2).startswith(prefix):
            found.setdefault(int(m.group(1)), []).append(m.group(2))
    return found


def manifest_ids(d: Path) -> dict[int, list[int]]:
    """Checkpoint id -> complete levels, from the committed manifest of ``d``'s run."""
    m = json.loads((d / "run" / "meta" / "manifest.json").read_text())
    return {int(e["id"]): sorted(int(k) for k, v in e["levels"].items() if v) for e in m["checkpoints"]}


def test_bad_levels_and_ids_are_refused_naming_what_is_allowed(tmp_path):
    write_config(tmp_path)
    r = run_cases(tmp_path, 2, "args").check()
    got = lines_of(r.stdout)
    assert sorted(got) == [0, 1], r.stdout + r.stderr
    for lines in got.values():
        text = "\n".join(lines)
        for bad in ("1.9", "'2'", "True", "0", "5", "None"):
            assert f"level {bad} -> CheckpointError" in text, text
        assert re.search(r"level 1\.9 CheckpointError: .*1 \(local\).*4 \(parallel file system\)", text), text
        for bad in ("1000000000000000000000000000000", "-1", "0", "2.0"):
            assert f"id {bad} -> CheckpointError" in text, text
        assert "must be an integer from 1 to 9223372036854775807" in text
        assert "good -> ok" in text and 'status [[1, 1]]' in text, text
        assert "RAW" not in text


def test_failed_manifest_commit_leaves_the_manifest_as_it_was(tmp_path, small_disk):
    """ENOSPC on rank 0 committing checkpoint 2: the next commit still lists the good L4 checkpoint 1."""
    meta = small_disk(256 * 1024)
    write_config(tmp_path, meta_dir=meta)
    r = run_cases(tmp_path, 4, "txn")
    got = lines_of(r.stdout)
    assert sorted(got) == [0, 1, 2, 3], r.stdout + r.stderr
    for lines in got.values():
        text = "\n".join(lines)
        assert "ckpt1 1" in text, text
        assert re.search(r"ckpt2 CheckpointError: .*manifest commit failed on rank 0", text), text
        # The failed checkpoint's id is free again: the next checkpoint (at L1) takes it.
        assert "ckpt3 ok" in text and "memory [1, 2]" in text, text
    m = json.loads((meta / "manifest.json").read_text())
    levels = {int(e["id"]): sorted(int(k) for k, v in e["levels"].items() if v) for e in m["checkpoints"]}
    assert levels == {1: [4], 2: [1]}, levels
    assert not list((tmp_path / "run" / "global").glob("*/l4/ckpt2")), \
        "the failed checkpoint's files are left"
    # Node-local loss: only the L4 copy of checkpoint 1 is left, and it is recovered bit for bit.
    for node in (tmp_path / "run" / "local").glob("node*"):
        shutil.rmtree(node)
    r = run_cases(tmp_path, 4, "recover").check()
    rec = lines_of(r.stdout, "recover")
    assert sorted(rec) == [0, 1, 2, 3] and all(v == ["recovered id=1 data=ok"] for v in rec.values()), \
        r.stdout + r.stderr


def _outcomes(stdout: str) -> dict[int, str]:
    return {r: v[-1].split()[1] for r, v in lines_of(stdout, "outcome").items()}


def test_rank_killed_in_inline_encoding_gives_process_failure_and_cleanup(tmp_path):
    """4 ranks on 4 nodes, groups of 2: rank 2 dies entering the L3 encoding of checkpoint 2."""
    write_config(tmp_path, group_size=2, failure_timeout=60)
    r = run_cases(tmp_path, 4, "encode-kill", "--victim", "2", node_size=1)
    assert not r.timed_out
    assert _outcomes(r.stdout) == {0: "ProcessFailure", 1: "ProcessFailure", 3: "ProcessFailure"}, \
        r.stdout + r.stderr
    assert "RAW" not in r.stdout and "MPI.Exception" not in r.stderr, r.stdout + r.stderr
    assert manifest_ids(tmp_path) == {1: [1]}
    left = sorted(p.name for p in (tmp_path / "run").rglob("rank*") if "ckpt2" in str(p))
    assert left in ([], ["rank2.ftk"]), f"survivors' files of the failed checkpoint were left: {left}"
    r = run_cases(tmp_path, 4, "recover", node_size=1).check()
    rec = lines_of(r.stdout, "recover")
    assert sorted(rec) == [0, 1, 2, 3] and all(v == ["recovered id=1 data=ok"] for v in rec.values()), \
        r.stdout + r.stderr


def test_head_killed_mid_encoding_gives_process_failure(tmp_path):
    """head = 1, 3 nodes of 2 processes: the head of node 1 (world rank 2) dies entering the L3 encoding."""
    write_config(tmp_path, head=1, group_size=3, inline_l3=0, failure_timeout=60)
    r = run_cases(tmp_path, 6, "encode-kill", "--victim", "2", node_size=2)
    assert not r.timed_out
    assert _outcomes(r.stdout) == {0: "ProcessFailure", 1: "ProcessFailure", 2: "ProcessFailure"}, \
        r.stdout + r.stderr
    assert "CheckpointError" not in r.stdout and "RAW" not in r.stdout, r.stdout
    # Checkpoint 2 is committed at L1 only: its L3 level never completed.
    assert manifest_ids(tmp_path)[2] == [1]


def test_failed_background_flush_leaves_no_partial_files(tmp_path, small_disk):
    glbl = small_disk(64 * 1024)
    write_config(tmp_path, glbl_dir=glbl, inline_l4=0)
    r = run_cases(tmp_path, 2, "l4-fail")
    got = lines_of(r.stdout)
    assert sorted(got) == [0, 1], r.stdout + r.stderr
    for lines in got.values():
        text = "\n".join(lines)
        assert "outcome CheckpointError" in text and "levels [[1]]" in text, text
    assert re.search(r"No space left|ENOSPC|Errno 28", r.stdout), r.stdout
    assert [p for p in glbl.rglob("*") if p.is_file()] == [], "a failed L4 flush left files behind"


@pytest.mark.parametrize("exec_id", ["..", "/ABSOLUTE"])
def test_manifest_exec_id_outside_glbl_dir_is_refused(tmp_path, exec_id):
    """A manifest whose exec_id leaves glbl_dir: an ftkit error, nothing created or removed outside."""
    d = tmp_path / "job"
    write_config(d)
    run_cases(d, 2, "args").check()          # a fresh run that finalized: no manifest left
    bait = tmp_path / "outside"
    bait.mkdir()
    (bait / "precious.txt").write_text("keep me")
    target = str(bait) if exec_id == "/ABSOLUTE" else exec_id
    m = {"format": "ftkit-manifest", "version": 1, "exec_id": target, "nranks": 2, "created": 1.0,
         "updated": 1.0, "status": "running", "dirs": {}, "checkpoints": []}
    (d / "run" / "meta" / "manifest.json").write_text(json.dumps(m))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    r = run_cases(d, 2, "recover")
    assert not r.timed_out
    got = lines_of(r.stdout)
    assert sorted(got) == [0, 1], r.stdout + r.stderr
    for lines in got.values():
        assert any(re.search(r"(Error|Failure): .*exec_id", x) for x in lines), lines
    # A run that checkpoints and finalizes (keep_last_ckpt = 0) on that manifest: refused, nothing removed.
    r = run_cases(d, 2, "args")
    assert not r.timed_out
    refused = lines_of(r.stdout, "good -> CheckpointError")
    assert sorted(refused) == [0, 1], r.stdout + r.stderr
    assert (bait / "precious.txt").read_text() == "keep me"
    assert (d / "run" / "meta" / "manifest.json").exists()
    after = sorted(str(p) for p in tmp_path.rglob("*") if "run/meta" not in str(p))
    assert set(after) <= set(before), sorted(set(after) - set(before))


@pytest.mark.parametrize("first", [2, 1])
def test_l2_copy_with_a_stuck_partner_ends_within_failure_timeout(tmp_path, first):
    # Rank 1 is alive but stopped (SIGSTOP) when the L2 post-processing starts. first=2: the L2 level did
    # not pass failure_timeout to the partner copy, so the others waited for the storage default (600 s) or
    # the failure detector (~2 min, then a ProcessFailure naming a live rank). first=1: the job's first L2
    # checkpoint splits the group communicator, a collective without deadline (the same detector wait).
    # Now every other rank raises a ftkit TimeoutFailure within a few failure_timeouts.
    write_config(tmp_path, group_size=2, failure_timeout=3)
    program = REPO / "tests" / "programs" / "l2_stuck_partner.py"
    res = run_python(4, program, "--config", "ftkit.ini", "--stuck", "1", "--first", str(first), node_size=1,
                     cwd=tmp_path, timeout=150)
    assert not res.timed_out, res.stdout + res.stderr
    lines = dict(re.findall(r"^R(\d) (.*)$", res.stdout, re.M))
    for r in "023":
        assert lines.get(r, "").startswith("error TimeoutFailure "), f"rank {r}: {lines[r]}\n{res.stderr}"
