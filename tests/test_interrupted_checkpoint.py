"""Issue 30, the campaign's one wrong trial (seed 48 trial 1 on 84094da): SIGINT to ``ftkit launch`` while
the ranks are inside an L4 checkpoint must never cost the newest committed checkpoint.

``ftkit launch`` passes SIGINT on to every rank, where it is a ``KeyboardInterrupt`` in the main thread,
wherever that thread is. A rank interrupted in the commit gate after it had told the gate "yes" took the
checkpoint for uncommitted and deleted its files, while rank 0, whose agreement had completed, committed it
and pruned the previous one: the manifest named a checkpoint a rank's file of which was gone, and the
relaunch raised ``RecoveryError`` on every rank. Here a real job stops one rank at each point of the L4
checkpoint (``tests/programs/sigint_in_checkpoint.py``), the test sends SIGINT to ``ftkit launch`` from
outside, and the relaunch must recover the checkpoint the manifest names, bit for bit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftkit._wait import deadline_after, poll_until
from ftkit.storage.manifest import read_manifest

from .checkpoint._util import rank_lines, write_config
from .conftest import REPO, run_python
from .test_jobexit import BOUND, _end, _nothing_left

pytestmark = pytest.mark.mpi

PROGRAM = REPO / "tests" / "programs" / "sigint_in_checkpoint.py"
NRANKS = 4


def _committed(meta: Path) -> list[int]:
    """The ids of the checkpoints the manifest in ``meta`` names complete (newest first)."""
    manifest = read_manifest(meta)
    return [e.id for e in manifest.newest_first() if e.complete_levels] if manifest is not None else []


def _wait(test, proc: subprocess.Popen[str], what: str) -> None:  # noqa: ANN001 - a condition
    """Wait (bounded) until ``test()`` holds; fail with the job's output if the job ends first."""
    try:
        poll_until(lambda: test() or proc.poll() is not None, deadline_after(BOUND), what, max_sleep=0.05)
    finally:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the job ended (rc {proc.returncode}) before {what}:\n{out}\n{err[-3000:]}")


@pytest.mark.parametrize("point,victim,committed", [
    # The campaign's wrong trial: rank 1 interrupted after the gate's agreement, rank 0 commits 2.
    ("gate_agreed", 1, 2),
    ("gate_agreed", 0, 1),   # rank 0 interrupted there: nothing is written, 1 stays
    ("after_write", 1, 1),   # before the gate: 2 is committed nowhere
    ("after_post", 2, 1),
    ("before_commit", 3, 2),  # rank 0 writes the manifest while rank 3 waits
    ("after_commit", 1, 2),
])
def test_sigint_inside_an_l4_checkpoint_leaves_the_named_checkpoint_recoverable(point, victim, committed,
                                                                                 tmp_path):
    write_config(tmp_path, node_size=2, head=0, failure_timeout=60)
    program = tmp_path / f"sigint_{os.getpid()}_{time.monotonic_ns()}.py"  # a marker no other job has
    program.write_text(PROGRAM.read_text())
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftkit", "launch", "-n", str(NRANKS), "--node-size", "2", "--grace", "5", "--",
         sys.executable, str(program), str(tmp_path), "--config", "ftkit.ini", "--mode", "write", "--point",
         point, "--victim", str(victim)],
        cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait(lambda: (tmp_path / "reached").exists(), proc, f"rank {victim} reached {point}")
        if committed == 2:
            # The order of the wrong trial: the others have committed 2 (and pruned 1) before the SIGINT.
            others = [r for r in range(NRANKS) if r != victim]
            _wait(lambda: all((tmp_path / f"waiting.{r}").exists() for r in others), proc,
                  "the other ranks returned from checkpoint 2")
        proc.send_signal(signal.SIGINT)
        rc, out, err = _end(proc, program.name)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 128 + signal.SIGINT, (rc, out, err[-3000:])
    assert _nothing_left(program.name)
    assert _committed(tmp_path / "run" / "meta")[:1] == [committed], err[-3000:]
    again = run_python(NRANKS, program, str(tmp_path), "--config", "ftkit.ini", "--mode", "recover",
                       node_size=2, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = rank_lines(again.stdout, NRANKS)
    assert all(line == f"recovered id={committed} step={committed} data=ok" for line in lines.values()), lines
