"""The job's life on a cluster (issue 32): ``should_exit()`` on a halt request, a signal to one rank, the end
of the allocation; ``ftkit halt`` and ``ftkit flush`` -- real MPI jobs, real signals, real files.

A job is paused at a known step by a gate (``tests/programs/exit_app.py --gate-at``): the test acts on it
while every rank waits, then releases it. Every continuation is compared bit for bit with the heat example's
one-process reference.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from ftkit.cli import main as ftkit_main
from ftkit.inject import kill_together
from ftkit.storage.halt import read_halt
from ftkit.storage.manifest import read_manifest

from ..conftest import REPO, run_python
from ._util import heat, write_config

pytestmark = pytest.mark.mpi

APP = REPO / "tests" / "programs" / "exit_app.py"
SIZE = 16
STEPS = 3000   # the exit is seen within two checks of at most 256 calls each: long before the end
WAIT = 120.0   # s: bound on waiting for a job to reach its gate


def _reference(steps: int = STEPS) -> str:
    return heat.digest(heat.reference(SIZE, steps))


def _run(d: Path, nranks: int, *args: str, node_size: int = 1):
    return run_python(nranks, APP, "--steps", str(STEPS), "--size", str(SIZE), *args, node_size=node_size,
                      cwd=d, timeout=240.0)


class Job:
    """A job run in a thread, paused at its gate until :meth:`release`."""

    def __init__(self, d: Path, nranks: int, *args: str, node_size: int = 1) -> None:
        self.d, self.result = d, None
        self.thread = threading.Thread(target=self._go, args=(nranks, args, node_size))
        self.thread.start()

    def _go(self, nranks: int, args: tuple[str, ...], node_size: int) -> None:
        self.result = _run(self.d, nranks, *args, node_size=node_size)

    def wait_gate(self) -> None:
        deadline = time.monotonic() + WAIT
        while not (self.d / "gate").exists():
            assert self.thread.is_alive(), f"the job ended before its gate: {self.result}"
            assert time.monotonic() < deadline, "the job did not reach its gate"
            time.sleep(0.02)

    def release(self):
        (self.d / "release").write_text("1")
        self.thread.join(300.0)
        assert not self.thread.is_alive()
        return self.result

    def pid(self, rank: int) -> int:
        return int((self.d / f"pid{rank}").read_text())

    def kill_all(self, nranks: int) -> None:
        """SIGKILL every rank at its gate as one event (no rank runs on after the first death)."""
        kill_together([self.pid(rank) for rank in range(nranks)])


def _ends(out: str, nranks: int) -> set[tuple[int, str]]:
    """The ``(steps done, exit=...)`` of every rank (one line each)."""
    found = [m.groups() for m in re.finditer(r"^R(\d+) end (\d+) (exit=\d)$", out, re.M)]
    assert sorted(int(r) for r, _, _ in found) == list(range(nranks)), out
    return {(int(done), flag) for _, done, flag in found}


def _stopped(r, nranks: int) -> int:
    """Check that every rank stopped at the same step with should_exit() true; return that step."""
    assert r.returncode == 0, r.stdout + r.stderr
    ((done, flag),) = _ends(r.stdout, nranks)  # the same on every rank
    assert flag == "exit=1", r.stdout
    assert f"stopped {done}" in r.stdout and done < STEPS, r.stdout
    return done


def _continues(d: Path, nranks: int) -> None:
    r = _run(d, nranks)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"digest {_reference()}" in r.stdout, r.stdout


def _newest(d: Path):
    m = read_manifest(d / "run" / "meta")
    assert m is not None
    return m.newest_first()[0]


@pytest.mark.parametrize("ask", [False, True], ids=["snapshot", "should_exit"])
def test_halt_stops_a_running_job_which_the_next_job_continues(tmp_path, ask, capsys):
    write_config(tmp_path, ckpt_l1=50)
    job = Job(tmp_path, 2, "--gate-at", "3", *(["--ask"] if ask else []))
    job.wait_gate()
    assert ftkit_main(["halt", str(tmp_path / "run" / "meta")]) == 0
    r = job.release()
    done = _stopped(r, 2)
    entry = _newest(tmp_path)
    assert entry.level == 4 and entry.extra.get("next_step") == done
    # the event log says it once, on rank 0, with the checkpoint taken
    assert r.stderr.count(f"should_exit(): halt request: checkpoint {entry.id} at L4") == 1, r.stderr
    record = read_halt(tmp_path / "run" / "meta")
    assert record is not None and record.state == "done" and record.done_checkpoint == entry.id
    _continues(tmp_path, 2)  # the done record does not stop the next job


def test_cancelled_halt_lets_the_job_run_to_completion(tmp_path):
    write_config(tmp_path, ckpt_l1=50)
    job = Job(tmp_path, 2, "--gate-at", "3")
    job.wait_gate()
    meta = str(tmp_path / "run" / "meta")
    assert ftkit_main(["halt", meta]) == 0
    assert ftkit_main(["halt", meta, "--cancel"]) == 0
    r = job.release()
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"digest {_reference()}" in r.stdout
    assert read_halt(meta) is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["TERM", "USR1"])
def test_signal_to_one_rank_stops_every_rank(tmp_path, sig):
    write_config(tmp_path, ckpt_l1=50)
    job = Job(tmp_path, 3, "--gate-at", "3", "--ask")
    job.wait_gate()
    os.kill(job.pid(1), sig)
    r = job.release()
    _stopped(r, 3)
    assert f"signal {signal.Signals(sig).name}" in r.stderr
    assert _newest(tmp_path).level == 4
    _continues(tmp_path, 3)


def test_end_of_allocation_near_takes_a_final_checkpoint(tmp_path):
    write_config(tmp_path, ckpt_l1=50, end_time=f"{time.time() + 30:.0f}")  # within the 60 s margin
    r = _run(tmp_path, 2)
    _stopped(r, 2)
    assert "the allocation ends in" in r.stderr
    assert _newest(tmp_path).level == 4
    meta = tmp_path / "run" / "meta"
    assert ftkit_main(["halt", str(meta), "--at", "2020-01-01T00:00:00Z"]) == 2  # in the past
    assert read_halt(meta) is None
    write_config(tmp_path, ckpt_l1=50)  # the next allocation
    _continues(tmp_path, 2)


def test_no_checkpoint_is_started_past_the_end_and_flush_refuses_nothing_complete(tmp_path):
    write_config(tmp_path, ckpt_l1=1, end_time=f"{time.time() - 5:.0f}")
    r = _run(tmp_path, 2)
    _stopped(r, 2)
    assert "no checkpoint" in r.stderr
    meta = tmp_path / "run" / "meta"
    m = read_manifest(meta)
    assert m is not None and {e.level for e in m.checkpoints} == {1}  # no exit checkpoint at L4
    # flush with nothing complete left: a clear error, nothing changed
    shutil.rmtree(tmp_path / "run" / "local")
    before = (meta / "manifest.json").read_bytes()
    assert ftkit_main(["flush", str(meta)]) == 2
    assert (meta / "manifest.json").read_bytes() == before
    assert not list((tmp_path / "run" / "global").rglob("*.ftk"))


@pytest.mark.parametrize("level", [2, 3])
def test_flush_after_a_killed_job_rebuilds_and_the_next_job_reads_l4(tmp_path, level, capsys):
    # 4 emulated nodes of 1 rank; checkpoints at `level` only, every 5 steps; killed at the gate.
    write_config(tmp_path, group_size=2 if level == 2 else 4, **{f"ckpt_l{level}": 5})
    job = Job(tmp_path, 4, "--gate-at", "11")
    job.wait_gate()
    job.kill_all(4)
    r = job.release()
    assert "stopped" not in r.stdout and "digest" not in r.stdout, r.stdout
    entry = _newest(tmp_path)
    assert entry.complete_levels == [1, level]
    shutil.rmtree(tmp_path / "run" / "local" / "node1")  # one node's disk lost with the job
    meta = str(tmp_path / "run" / "meta")
    assert ftkit_main(["flush", meta, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["result"] == "flushed" and doc["checkpoint"] == entry.id and doc["missing"] == []
    assert len(doc["copied"]) == 4
    if level == 2:
        assert {"rank": 1, "from_level": 2} in doc["copied"]  # its partner copy, held by rank 0's node
    else:
        assert doc["rebuilt"], doc  # rank 1's file decoded from its group by the repair engine
    assert _newest(tmp_path).complete(4)
    assert ftkit_main(["flush", meta, "--json"]) == 0  # idempotent
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["result"] == "already"
    shutil.rmtree(tmp_path / "run" / "local")  # the allocation ends: node-local disks purged
    _continues(tmp_path, 4)


def test_flush_node_by_node_commits_when_the_last_node_has_added_its_files(tmp_path, capsys):
    # What `srun --ntasks-per-node=1 ftkit flush` does on a cluster: each node sees only its own directory.
    write_config(tmp_path, ckpt_l1=5)
    job = Job(tmp_path, 4, "--gate-at", "6")
    job.wait_gate()
    job.kill_all(4)
    job.release()
    local = tmp_path / "run" / "local"
    views = []
    for nodes in ((0, 1), (2, 3)):  # what two hosts of two nodes each see
        view = tmp_path / f"host{nodes[0]}"
        for i in nodes:
            shutil.copytree(local / f"node{i}", view / f"node{i}")
        views.append(view)
    shutil.rmtree(local)
    meta = str(tmp_path / "run" / "meta")
    assert ftkit_main(["flush", meta, "--ckpt-dir", str(views[0]), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["result"] == "incomplete" and doc["missing"] == [2, 3]
    assert not _newest(tmp_path).complete(4)  # nothing committed yet
    assert ftkit_main(["flush", meta, "--ckpt-dir", str(views[1]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["result"] == "flushed" and sorted(c["rank"] for c in doc["copied"]) == [2, 3]
    assert _newest(tmp_path).complete(4)
    for view in views:
        shutil.rmtree(view)
    _continues(tmp_path, 4)


def test_bad_halt_requests_change_nothing(tmp_path, capsys):
    empty = tmp_path / "meta"
    empty.mkdir()
    assert ftkit_main(["halt", str(empty)]) == 2
    assert ftkit_main(["flush", str(empty)]) == 2
    assert list(empty.iterdir()) == []
    assert "no ftkit run" in capsys.readouterr().err
