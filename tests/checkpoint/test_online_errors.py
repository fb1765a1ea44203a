"""Issue 17: a rank whose application raises, and a job that cannot go on online.

An uncaught exception on a rank with spare ranks ends that process as a process failure
(:mod:`ftkit.checkpoint.online_exit`): a transient fault is repaired by a spare, bit for bit; a bug that
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
    errors = _errors(tmp_path)
    assert sorted(errors) == ["rank0", "rank2", "rank3"], (errors, r.stdout, r.stderr)
    assert len(set(errors.values())) == 1, errors
    msg = next(iter(errors.values()))
    assert "no spare left" in msg and "[1]" in msg and "relaunch" in msg, msg
    assert "digest" not in r.stdout
    again = Job(tmp_path, 4, 0, "--steps", "30").done()
    assert again.returncode == 0, again.stdout + again.stderr
    got, ref = _digests(again.stdout)
    assert got == ref, again.stdout
