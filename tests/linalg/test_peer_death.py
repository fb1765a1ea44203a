"""A process of the grid dies during a linalg routine: every survivor leaves it with ftkit's ProcessFailure
(or finishes it, where its part did not need the dead), never a raw MPI error, never a wait for the dead;
the job ends non-zero (``linalg._grid_failure``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAM = Path(__file__).resolve().parent / "programs" / "peer_death.py"

#: The routine, the rank killed just before it, and whether every survivor needs the dead (the Cholesky
#: factorizations do: panel 0 reaches every rank; a rank of a multiplication needs only its process row and
#: column, so rank 0 finishes pdgemm without rank 3 on 2 x 2).
CASES = [("pdpotrf", 0, True), ("ft_pdpotrf", 3, True), ("pdgemm", 3, False), ("ft_pdgemm", 1, False),
         ("pdtrsm", 3, False), ("ft_pdtrsm", 2, False), ("pdtran", 1, False)]

#: What the first survivor's message says the output holds.
LEFT = {"ft_pdpotrf": "FT_PDPOTRF: a process of the grid failed in panel 0 of 12; nothing was checkpointed",
        "pdpotrf": "PDPOTRF: a process of the grid failed; A may be partly written: compute it again",
        "pdtrsm": "PDTRSM: a process of the grid failed; B may be partly written: compute it again from B's "
                  "original values (resilient_pdtrsm survives this)"}


@pytest.mark.mpi
@pytest.mark.parametrize("routine,victim,all_need_it", CASES)
def test_every_survivor_leaves_with_a_process_failure(tmp_path, routine, victim, all_need_it):
    res = run_python(4, PROGRAM, "--routine", routine, "--victim", str(victim), "--dir", str(tmp_path),
                     timeout=300)
    out = res.stdout + res.stderr
    assert not res.timed_out and res.returncode != 0, out
    assert "mpi4py.MPI.Exception" not in out, out
    left = {int(m.group(1)): m.group(2) for m in re.finditer(r"^rank (\d+) left: (.*)$", res.stdout, re.M)}
    finished = {int(m.group(1)) for m in re.finditer(r"^rank (\d+) finished$", res.stdout, re.M)}
    survivors = set(range(4)) - {victim}
    assert set(left) | finished == survivors and not set(left) & finished, out
    assert left and (not all_need_it or not finished), out
    what = LEFT.get(routine, f"{routine.upper()}: a process of the grid failed; ")
    assert all(line.startswith(f"ProcessFailure: {what}") for line in left.values()), out
    # the first to learn of the death learns it from MPI (the others may be told by the revocation first)
    assert any(f"failed ranks: [{victim}])" in line for line in left.values()), out
