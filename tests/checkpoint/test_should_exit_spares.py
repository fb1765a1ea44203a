"""Issue 32 with online recovery: ``should_exit()`` in a job with spare ranks -- real MPI jobs (ULFM), real
signals, real files.

A job of 4 application ranks and 2 spares is paused at a known step by a gate (``tests/programs/
exit_spares.py --gate-at``), optionally after rank 1 was SIGKILLed and a spare promoted into its place; the
test then asks it to stop (``ftkit halt``, or SIGUSR1) and releases it. The job must take an exit checkpoint,
end with exit code 0 with no process left (the idle spares leave too), and the next job -- without spares --
must continue from that checkpoint to the failure-free result bit for bit.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ftkit.cli import main as ftkit_main
from ftkit.inject import kill_pid
from ftkit.launch import MPIResult, run_mpi
from ftkit.storage.halt import read_halt
from ftkit.storage.manifest import read_manifest

from ..conftest import REPO, run_python
from ._util import heat, write_config

pytestmark = pytest.mark.mpi

APP = REPO / "tests" / "programs" / "exit_spares.py"
NAPP, SPARES = 4, 2
SIZE = 16
STEPS = 2000     # the exit is seen within two checks of at most 256 calls each: long before the end
JOB_TIMEOUT = 150.0
WAIT = 90.0      # s: bound on every wait for a condition of the running job


def _wait_for(test, what: str, job: Job) -> None:
    deadline = time.monotonic() + WAIT
    while not test():
        assert job.thread.is_alive(), f"the job ended before {what}: {job.result}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return -1


class Job:
    """The program with spares under ``run_mpi`` in a thread, paused at its gate until :meth:`release`."""

    def __init__(self, d: Path, *args: str) -> None:
        self.d = d
        self.result: MPIResult | None = None
        cmd = [sys.executable, str(APP), "--steps", str(STEPS), "--size", str(SIZE), *args]
        self.thread = threading.Thread(target=self._run, args=(cmd,), daemon=True)
        self.thread.start()

    def _run(self, cmd: list[str]) -> None:
        self.result = run_mpi(NAPP, cmd, timeout=JOB_TIMEOUT, node_size=2, cwd=self.d, spares=SPARES)

    def pid(self, name: str) -> int:
        """The pid in file ``name`` (asserted written: a pid <= 0 would signal every process)."""
        _wait_for(lambda: _read_int(self.d / name) > 0, name, self)
        return _read_int(self.d / name)

    def wait_gate(self) -> None:
        _wait_for(lambda: (self.d / "gate").exists(), "the gate", self)

    def release(self) -> MPIResult:
        (self.d / "release").write_text("1")
        self.thread.join(JOB_TIMEOUT + 60)
        assert self.result is not None, "the job did not end"
        assert not self.result.timed_out, "the job hung:\n" + self.result.stdout + self.result.stderr
        return self.result


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _stopped(r: MPIResult, recoveries: int) -> int:
    """Check that every application rank stopped at the same step with should_exit() true; return it."""
    assert r.returncode == 0, r.stdout + r.stderr
    ends = {m.groups() for m in re.finditer(r"^R\d+ end (\d+) (exit=\d)$", r.stdout, re.M)}
    assert len(re.findall(r"^R\d+ end", r.stdout, re.M)) == NAPP, r.stdout
    ((done, flag),) = ends  # the same on every rank
    assert flag == "exit=1" and int(done) < STEPS, r.stdout
    assert f"stopped {done}" in r.stdout and f"recoveries {recoveries}" in r.stdout, r.stdout
    return int(done)


def _exit_checkpoint(d: Path, done: int) -> int:
    m = read_manifest(d / "run" / "meta")
    assert m is not None
    entry = m.newest_first()[0]
    assert entry.level == 4 and entry.extra.get("next_step") == done
    return entry.id


def _continues(d: Path) -> None:
    """The next job (no spares) recovers the exit checkpoint and ends with the failure-free plate."""
    r = run_python(NAPP, APP, "--steps", str(STEPS), "--size", str(SIZE), node_size=2, cwd=d, timeout=240.0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"digest {heat.digest(heat.reference(SIZE, STEPS))}" in r.stdout, r.stdout


@pytest.mark.parametrize("failure", [False, True], ids=["no-failure", "after-promotion"])
@pytest.mark.parametrize("how", ["halt", "USR1"])
def test_job_with_spares_stops_cleanly_and_the_next_job_continues(tmp_path, how, failure):
    write_config(tmp_path, group_size=2, ckpt_l2=50)
    args = ["--gate-at", "60", "--pause", "0.02"] + (["--gate-after-recovery"] if failure else [])
    job = Job(tmp_path, *args)
    world = NAPP + SPARES
    spares = [job.pid(f"wpid.{w}") for w in range(NAPP, world)]
    if failure:  # rank 1 killed after the L2 checkpoint of step 50: a spare takes its place
        victim = job.pid("pid.1")
        _wait_for(lambda: _read_int(tmp_path / "progress") >= 55, "step 55", job)
        kill_pid(victim)
        _wait_for(lambda: _read_int(tmp_path / "pid.1") not in (victim, -1), "the spare's promotion", job)
        assert job.pid("pid.1") == spares[0]  # the first idle spare, in world order
    job.wait_gate()
    if how == "halt":
        assert ftkit_main(["halt", str(tmp_path / "run" / "meta")]) == 0
    elif failure:  # the signal reaches only the promoted spare: its vote counts
        os.kill(job.pid("pid.1"), signal.SIGUSR1)
    else:  # as `scancel -s USR1`: every process, the idle spares too (they must not die of it)
        for w in range(world):
            os.kill(job.pid(f"wpid.{w}"), signal.SIGUSR1)
    r = job.release()
    done = _stopped(r, recoveries=int(failure))
    reason = "halt request" if how == "halt" else "signal SIGUSR1"
    ckpt_id = _exit_checkpoint(tmp_path, done)
    assert r.stderr.count(f"should_exit(): {reason}: checkpoint {ckpt_id} at L4") == 1, r.stderr
    if how == "halt":
        record = read_halt(tmp_path / "run" / "meta")
        assert record is not None and record.state == "done" and record.done_checkpoint == ckpt_id
    idle = spares[1:] if failure else spares  # the first spare took rank 1's place
    assert all(_gone(pid) for pid in idle), "an idle spare outlived the job"
    _continues(tmp_path)
