"""Checkpointer()'s start-up communicators made in one round (``_mpi.internal_comms``), and recovery's merged
last agreement, on real MPI jobs."""

from __future__ import annotations

from ..conftest import run_python

PROGRAM = """
import sys
from mpi4py import MPI
from ftkit.checkpoint import _mpi
from ftkit.errors import TimeoutFailure
from ftkit.failure import exit_without_finalize

world = MPI.COMM_WORLD
if sys.argv[1] == "all":
    made = _mpi.internal_comms(world, 2, 1, 120.0, "test start-up")
    assert len(made) == 3 and len({id(c) for c in made}) == 3
    for c in made:
        assert MPI.Comm.Compare(c, world) == MPI.CONGRUENT   # a duplicate: same ranks, same order
        assert c.Get_errhandler() == MPI.ERRORS_RETURN       # errors raise, never abort the job
    # Each is usable at once and apart from the others: one exchange on each, different values.
    sums = [c.allreduce(world.rank * (i + 1)) for i, c in enumerate(made)]
    print("MADE", world.rank, sums, flush=True)
else:
    # Rank 1 never takes part: rank 0 is told so within the deadline instead of waiting forever.
    if world.rank == 0:
        try:
            _mpi.internal_comms(world, 1, 1, 3.0, "test start-up")
        except TimeoutFailure as exc:
            print("TIMEOUT", exc, flush=True)
    exit_without_finalize(0)   # a request left pending: no MPI_Finalize
"""


def test_internal_comms_are_usable_duplicates(tmp_path):
    """Every duplicate is a separate communicator of the same ranks, raising its errors, usable at once."""
    prog = tmp_path / "comms.py"
    prog.write_text(PROGRAM)
    r = run_python(3, prog, "all", cwd=tmp_path).check()
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("MADE"))
    assert lines == [f"MADE {rank} [3, 6, 9]" for rank in range(3)], r.stdout + r.stderr


def test_internal_comms_report_a_missing_rank_within_the_deadline(tmp_path):
    """A rank that never takes part is a TimeoutFailure naming the step on the ranks that wait, not a hang."""
    prog = tmp_path / "comms.py"
    prog.write_text(PROGRAM)
    r = run_python(2, prog, "missing", cwd=tmp_path)
    assert "TIMEOUT test start-up: no answer before the deadline" in r.stdout, r.stdout + r.stderr


def test_a_read_failing_on_one_rank_is_raised_on_every_rank(tmp_path):
    """Recovery's last agreement (read, state records and level in one round): a file changed between its
    verification and its read on rank 1 makes every rank raise the same RecoveryError naming rank 1."""
    from ..conftest import REPO
    from ._util import write_config

    cfg = write_config(tmp_path)
    prog = REPO / "tests" / "programs" / "read_changed.py"
    run_python(2, prog, str(cfg), "ckpt", cwd=tmp_path).check()
    r = run_python(2, prog, str(cfg), "recover", cwd=tmp_path).check()
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("READ"))
    assert len(lines) == 2, r.stdout + r.stderr
    for rank, line in enumerate(lines):
        assert line.startswith(f"READ {rank} refused: checkpoint 1 verified but could not be read"), line
        assert "rank 1:" in line and "rank 0:" not in line, line
