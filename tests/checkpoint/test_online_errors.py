"""Issue 17: a rank whose application raises, and a job that cannot go on online.

An uncaught exception on a rank with spare ranks ends that process as a process failure
(:mod:`ftkit.checkpoint.online.exithook`): a transient fault is repaired by a spare, bit for bit; a bug that
repeats on the replacement uses up the spares, and then every survivor raises the same
OnlineRecoveryError and a relaunch recovers. Never a hang until the launcher's timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._util import write_config
from .test_online import Job, _bit_identical_recoveries, _digests

pytestmark = pytest.mark.mpi


def _errors(d: Path) -> dict[str, str]:
    """The OnlineRecoveryError message of each process that raised one, by ``rank<r>``/``spare<pid>``."""
    return {p.name.split(".", 1)[1]: p.read_text() for p in d.glob("online-error.*")}


def _same_error(d: Path, processes: list[str], output: str = "") -> str:
    """Assert that exactly ``processes`` raised an OnlineRecoveryError, all the same one; return it
    (``output``: the job's stdout and stderr, shown if not)."""
    errors = _errors(d)
    assert sorted(errors) == processes, f"{errors}\n{output}"
    assert len(set(errors.values())) == 1, errors
    return next(iter(errors.values()))


def _relaunch_is_exact(d: Path) -> None:
    """Relaunch the job without spares: it recovers and ends with the failure-free field."""
    again = Job(d, 4, 0, "--steps", "30").done()
    assert again.returncode == 0, again.stdout + again.stderr
    got, ref = _digests(again.stdout)
    assert got == ref, again.stdout


def test_rank_raising_an_exception_is_replaced_by_a_spare(tmp_path):
    # rank 1's application raises a RuntimeError in step 12 (once: a transient fault): the process ends as
    # a failed one, the spare takes its place from the L2 partner copy, the job finishes bit for bit.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    r = Job(tmp_path, 4, 1, "--steps", "30", "--raise-at", "12", "--raise-rank", "1").done()
    rec = _bit_identical_recoveries(r)
    assert [(d, lv) for d, _, lv in rec] == [("1", "2")], r.stdout
    assert "RuntimeError: application bug on rank 1 at step 12" in r.stderr, r.stderr


def test_a_bug_that_repeats_uses_up_the_spares_then_every_survivor_raises_the_same_error(tmp_path):
    # every process holding rank 1 raises in step 12: the spare replaces the first, raises in turn after
    # the restore; no spare is left, ranks 0, 2 and 3 raise the same OnlineRecoveryError. A relaunch with
    # the bug fixed recovers from the checkpoint on disk.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    r = Job(tmp_path, 4, 1, "--steps", "30", "--raise-at", "12", "--raise-rank", "1", "--raise-always").done()
    assert r.stderr.count("RuntimeError: application bug on rank 1 at step 12") == 2, r.stderr
    # the replacement, with no spare left, ends by SIGKILL too: an exit without MPI_Finalize reached the
    # survivors only after 60 s (the runtime's), which made this job look hung on a busy machine
    assert "the process ends as a failed process (SIGKILL" in r.stderr, r.stderr
    msg = _same_error(tmp_path, ["rank0", "rank2", "rank3"], r.stdout + r.stderr)
    assert "no spare left" in msg and "[1]" in msg and "relaunch" in msg, msg
    assert "digest" not in r.stdout
    _relaunch_is_exact(tmp_path)


def test_without_spares_every_survivor_raises_the_same_error_and_a_relaunch_recovers(tmp_path):
    # spare_ranks = 0: rank 2 is SIGKILLed in step 12; its neighbours see it in their halo exchange, the
    # others in their next checkpoint: all of them raise the same OnlineRecoveryError (not each the error of
    # its own call), at once. Its L2 partner (rank 0) is alive: the message promises the relaunch, which
    # then recovers bit for bit.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = Job(tmp_path, 4, 0, "--steps", "30", "--pause", "0.02")
    job.kill_at(12, [2])
    assert "digest" not in job.done().stdout
    msg = _same_error(tmp_path, ["rank0", "rank1", "rank3"])
    assert "the job has no spare ranks" in msg and "[2]" in msg, msg
    assert "at level 2" in msg and "relaunch the job" in msg and "recovers from it" in msg, msg
    _relaunch_is_exact(tmp_path)


def test_rank_0_and_its_partner_lost_before_any_l4_the_message_promises_no_relaunch(tmp_path):
    # 4 single-rank nodes in groups (0, 1) and (2, 3), L2 only; nodes 0 and 1 (rank 0 and its partner) are
    # lost with their directories: 2 spares replace them, but no copy of their L2 checkpoint survives. Every
    # survivor says so instead of promising that a relaunch recovers.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = Job(tmp_path, 4, 2, "--steps", "30", "--pause", "0.02", node_size=1)
    job.kill_at(12, [0, 1], node_dirs=(0, 1))
    assert "digest" not in job.done().stdout
    msg = _same_error(tmp_path, ["rank0", "rank1", "rank2", "rank3"])
    assert "No checkpoint survives the loss of the dead ranks' node-local files" in msg, msg
    assert "relaunch the job" not in msg, msg
    again = Job(tmp_path, 4, 0, "--steps", "30", node_size=1).done()  # and indeed a relaunch cannot
    relaunch_errors = {p.read_text() for p in tmp_path.glob("error.rank*")}
    assert again.returncode != 0 and relaunch_errors, again.stdout + again.stderr
    assert all(e.startswith("RecoveryError: no checkpoint of run") for e in relaunch_errors), relaunch_errors
