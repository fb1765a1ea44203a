"""Inline L2 partner copies and L3 parity files fsynced in the background (``redundancy_sync = background``,
the default): the checkpoint is recoverable at once, the previous one is kept until the copies are durable,
and a copy left damaged (as by a power loss before its fsync) falls back to that kept checkpoint."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

from ftkit.inject import kill_together

from ._util import APP, TIMEOUT, rank_lines, ranks_running_in, run_app, write_config

pytestmark = pytest.mark.mpi

N = 4  # ranks


def _manifest(d):
    return {e["id"]: e for e in json.loads((d / "run" / "meta" / "manifest.json").read_text())["checkpoints"]}


def _committed(d) -> bool:
    """True once the manifest on disk lists a checkpoint."""
    try:
        return bool(_manifest(d))
    except (OSError, ValueError):  # not written yet (it is replaced whole, never seen half written)
        return False


def _killed_after_first_commit(d, delay: float, run) -> None:
    """Run the job ``run()`` (returns its MPIResult) in a thread, SIGKILL every rank of it from outside
    ``delay`` s after the manifest on disk first lists a checkpoint, and check it ended as killed."""
    box: list = []
    job = threading.Thread(target=lambda: box.append(run()))
    job.start()
    deadline = time.monotonic() + TIMEOUT
    while not _committed(d) and job.is_alive():  # the job writes an empty manifest when it starts
        assert time.monotonic() < deadline, "the job never committed a checkpoint"
        time.sleep(0.005)
    time.sleep(delay)
    assert job.is_alive(), f"the job ended before the kill ({delay:.2f} s after its first commit)"
    kill_together(ranks_running_in(d.resolve(), APP))
    job.join(TIMEOUT + 60)
    assert box and not box[0].timed_out and box[0].returncode != 0, "the killed job did not end as killed"


def _ckpt_dirs(d, ckpt_id: int, level: int) -> list:
    return sorted((d / "run" / "local").glob(f"node*/*/l{level}/ckpt{ckpt_id}"))


def run_ftkit(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "ftkit", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _recovered(stdout: str) -> dict[int, dict[str, str]]:
    out = {}
    for r, line in rank_lines(stdout, N).items():
        assert line.startswith("recovered"), f"rank {r}: {line}"
        out[r] = dict(re.findall(r"(\w+)=(\S+)", line.split(" | ")[0]))
        assert out[r]["data"] == "ok", f"rank {r} recovered wrong data: {line}"
    return out


@pytest.mark.parametrize("level,nodes,group_size", [(2, 2, 2), (3, 4, 4)])
def test_the_previous_checkpoint_is_kept_until_the_next_call_has_seen_the_copies_durable(
        tmp_path, level, nodes, group_size):
    d = tmp_path / "bg"
    write_config(d, group_size=group_size)
    lv = str(level)
    run_app(d, N, "--mode", "write", "--levels", f"{lv},{lv}", node_size=N // nodes).check()
    m = _manifest(d)
    assert sorted(m) == [1, 2], m
    assert m[2]["extra"]["unsynced"] == [level] and "unsynced" not in m[1]["extra"], m
    assert m[2]["levels"] == {"1": True, lv: True} and m[1]["levels"] == {"1": True, lv: True}
    assert len(_ckpt_dirs(d, 1, level)) == nodes and len(_ckpt_dirs(d, 1, 1)) == nodes   # kept, with files
    ls = run_ftkit("ls", str(d / "run" / "meta"))
    assert re.search(rf"^\s+2 .* yes \(fsync in the background: L{level}\)$", ls, re.M), ls

    d3 = tmp_path / "bg3"
    write_config(d3, group_size=group_size)
    run_app(d3, N, "--mode", "write", "--levels", f"{lv},{lv},{lv}", node_size=N // nodes).check()
    m = _manifest(d3)
    assert sorted(m) == [2, 3], m                     # the third call settled 2 (durable) and pruned 1
    assert "unsynced" not in m[2]["extra"] and m[2]["levels"][lv] is True
    assert m[3]["extra"]["unsynced"] == [level]
    assert _ckpt_dirs(d3, 1, level) == [] and _ckpt_dirs(d3, 1, 1) == []

    dc = tmp_path / "commit"
    write_config(dc, group_size=group_size, redundancy_sync="commit")
    run_app(dc, N, "--mode", "write", "--levels", f"{lv},{lv}", node_size=N // nodes).check()
    m = _manifest(dc)
    assert sorted(m) == [2] and "unsynced" not in m[2]["extra"], m   # durable at the commit: 1 pruned at once


def test_a_node_lost_right_after_the_call_recovers_the_newest_checkpoint(tmp_path):
    d = tmp_path / "run"
    write_config(d, group_size=2)
    run_app(d, N, "--mode", "write", "--levels", "2,2").check()
    shutil.rmtree(d / "run" / "local" / "node1")
    got = _recovered(run_app(d, N, "--mode", "recover").check().stdout)
    assert all(v["id"] == "2" and v["step"] == "1" for v in got.values()), got
    assert got[2]["source"] == "2" and got[0]["source"] == "1", got


def test_copies_damaged_as_by_a_power_loss_before_their_fsync_fall_back_to_the_kept_checkpoint(tmp_path):
    # Node 1 lost for good, and node 0 power-cycled before the background fsync of checkpoint 2's partner
    # copies: those copies come back empty. Checkpoint 2 cannot be rebuilt; checkpoint 1, kept because 2 was
    # not yet durable at L2, is recovered from its own (durable) partner copies, bit for bit.
    d = tmp_path / "run"
    write_config(d, group_size=2)
    run_app(d, N, "--mode", "write", "--levels", "2,2").check()
    copies = sorted(p for p in (d / "run" / "local" / "node0").glob("*/l2/ckpt2/*") if p.is_file())
    assert len(copies) == 2, copies
    for p in copies:
        p.write_bytes(b"")
    shutil.rmtree(d / "run" / "local" / "node1")
    r = run_app(d, N, "--mode", "recover").check()
    got = _recovered(r.stdout)
    assert all(v["id"] == "1" and v["step"] == "0" for v in got.values()), r.stdout
    assert got[2]["source"] == "2" and got[3]["source"] == "2", got
    assert all(v["skipped"] == "1" for v in got.values()) and "checkpoint 2" in r.stdout, r.stdout


def test_a_restarted_run_does_not_vouch_for_copies_it_did_not_sync(tmp_path):
    # The relaunch recovers checkpoint 2 (L2 unsynced when the first job ended). It cannot know whether 2's
    # copies reached the disk, so its first checkpoint marks 2 incomplete at L2 and keeps 1 (durable at L2);
    # its own checkpoint 3 then covers L1 and, once settled, L2.
    d = tmp_path / "run"
    write_config(d, group_size=2)
    run_app(d, N, "--mode", "write", "--levels", "2,2").check()
    r = run_app(d, N, "--mode", "recover", "--then-levels", "2").check()
    assert "R0 wrote id=3 level=2" in r.stdout, r.stdout
    m = _manifest(d)
    assert sorted(m) == [1, 3], m
    assert m[1]["levels"] == {"1": True, "2": True} and "unsynced" not in m[1]["extra"], m
    assert m[3]["extra"]["unsynced"] == [2], m
    r = run_app(d, N, "--mode", "recover", "--then-levels", "2").check()
    got = _recovered("\n".join(x for x in r.stdout.splitlines() if "wrote" not in x))
    assert all(v["id"] == "3" for v in got.values()), r.stdout
    assert sorted(_manifest(d)) == [1, 4], _manifest(d)


@pytest.mark.parametrize("stage,newest", [("after_write", 2), ("before_commit", 3), ("after_commit", 3)])
def test_a_rank_killed_in_the_call_whose_commit_settles_the_copies_leaves_the_newest_recoverable(
        tmp_path, stage, newest):
    # The third call's commit settles checkpoint 2 (its copies durable: 1 pruned) in the same manifest write
    # that adds checkpoint 3. Rank 1 is SIGKILLed once its file of 3 is written (no commit: the manifest
    # still names 1, kept, and 2, unsynced), or just before or after its part of the commit (every rank
    # passed the commit gate: rank 0 writes it). Either manifest on disk leads to its newest checkpoint.
    d = tmp_path / "run"
    write_config(d, group_size=2, failure_timeout=60)
    r = run_app(d, N, "--mode", "write", "--levels", "2,2,2", "--kill-rank", "1", "--kill-stage", stage,
                "--kill-index", "2")
    assert "R1 wrote id=2" in r.stdout and "R1 wrote id=3" not in r.stdout, r.stdout + r.stderr
    m = _manifest(d)
    if newest == 2:
        assert sorted(m) == [1, 2] and m[2]["extra"]["unsynced"] == [2], m
    else:
        assert sorted(m) == [2, 3] and "unsynced" not in m[2]["extra"] and m[2]["levels"]["2"] is True, m
        assert m[3]["extra"]["unsynced"] == [2], m
    got = _recovered(run_app(d, N, "--mode", "recover").check().stdout)
    assert all(v["id"] == str(newest) and v["step"] == str(newest - 1) for v in got.values()), got


@pytest.mark.parametrize("seed", range(4))
def test_every_rank_killed_from_outside_at_a_random_moment_loses_nothing(tmp_path, seed):
    # Twelve L2 checkpoints of 8 MB per rank, 0.2 s of "computation" between them: the job is in a call
    # (writing, exchanging, settling the previous copies, committing) or computing while the copies of the
    # last checkpoint are fsynced in the background and the manifest lists them unsynced (tried here: the
    # kills landed in both). Every rank is SIGKILLed from outside 0-2 s after the first commit. The relaunch
    # recovers the newest checkpoint the manifest on disk names, bit for bit; with node 1 then deleted, it
    # rebuilds that same checkpoint from L2 (the copies the killed job left, read back and verified).
    d = tmp_path / "run"
    write_config(d, group_size=2, failure_timeout=60)
    n = 1 << 20
    delay = 2.0 * random.Random(1700 + seed).random()
    args = ("--mode", "write", "--levels", ",".join(["2"] * 12), "--n", str(n), "--pause", "0.2")
    _killed_after_first_commit(d, delay, lambda: run_app(d, N, *args))
    newest = max(_manifest(d))
    got = _recovered(run_app(d, N, "--mode", "recover", "--n", str(n)).check().stdout)
    assert all(v["id"] == str(newest) and v["step"] == str(newest - 1) for v in got.values()), (delay, got)
    shutil.rmtree(d / "run" / "local" / "node1")
    got = _recovered(run_app(d, N, "--mode", "recover", "--n", str(n)).check().stdout)
    assert all(v["id"] == str(newest) for v in got.values()), (delay, newest, got)
    assert got[2]["source"] == "2" and got[3]["source"] == "2", (delay, got)
