"""A rank of the grid dies just before a linalg routine: every survivor must leave it with ftkit's
``ProcessFailure`` (the routine revokes the grid's communicators, so a rank that never talks to the dead one
is told too) or finish it (its part did not need the dead), never raise a raw MPI error or wait for the dead.

usage: peer_death.py --routine NAME --victim R --dir D [--grid PxQ]

Every rank builds the operands (order 96, ``nb = 8``: 12 block columns), then rank ``R`` SIGKILLs itself
after a barrier and the others call the routine (``ft_pdpotrf`` without a checkpointer). A survivor prints
``rank r left: <ProcessFailure's class>: <message>`` or ``rank r finished`` (a raw MPI error would end it
with a traceback), writes ``D/done.r`` and waits (at most 120 s) until every survivor has, so that none is
ended by the launcher for another's non-zero exit before it could tell; then it exits, with code 3 if it
left.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import ProcessFailure
from ftkit.failure import exit_without_finalize
from ftkit.inject import kill_self

N, NB = 96, 8


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--routine", required=True)
    p.add_argument("--victim", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--grid", default="2x2")
    a = p.parse_args()
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, *(int(x) for x in a.grid.split("x")))
    r = np.random.default_rng(3).standard_normal((N, N))
    A = linalg.DistributedMatrix.from_global(grid, r @ r.T / N + np.eye(N), mb=NB, nb=NB)
    grid.comm.Barrier()
    if grid.rank == a.victim:
        kill_self()
    B = linalg.DistributedMatrix.from_global(grid, r, mb=NB, nb=NB)
    C = linalg.DistributedMatrix.from_global(grid, r.T.copy(), mb=NB, nb=NB)
    calls = {"pdpotrf": lambda: linalg.pdpotrf("L", N, A, 0, 0),
             "ft_pdpotrf": lambda: linalg.ft_pdpotrf("L", N, A, 0, 0),
             "pdgemm": lambda: linalg.pdgemm("N", "N", N, N, N, 1.0, A, 0, 0, B, 0, 0, 1.0, C, 0, 0),
             "ft_pdgemm": lambda: linalg.ft_pdgemm("N", "N", N, N, N, 1.0, A, 0, 0, B, 0, 0, 1.0, C, 0, 0),
             "pdtrsm": lambda: linalg.pdtrsm("L", "L", "N", "N", N, N, 1.0, A, 0, 0, B, 0, 0),
             "ft_pdtrsm": lambda: linalg.ft_pdtrsm("L", "L", "N", "N", N, N, 1.0, A, 0, 0, B, 0, 0),
             "pdsyrk": lambda: linalg.pdsyrk("L", "N", N, N, 1.0, B, 0, 0, 1.0, A, 0, 0),
             "pdtran": lambda: linalg.pdtran(N, N, 1.0, B, 0, 0, 1.0, C, 0, 0)}
    code = 0
    try:
        calls[a.routine]()
        print(f"rank {grid.rank} finished", flush=True)
    except ProcessFailure as exc:
        print(f"rank {grid.rank} left: {type(exc).__name__}: {exc}", flush=True)
        code = 3
    Path(a.dir, f"done.{grid.rank}").write_text("")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(Path(a.dir, f"done.{r}").exists()
                                                  for r in range(grid.size) if r != a.victim):
        time.sleep(0.05)
    exit_without_finalize(None, code)


if __name__ == "__main__":
    main()
