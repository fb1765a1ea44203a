"""A rank of the grid dies just before a Cholesky factorization: every survivor must leave it with ftkit's
``ProcessFailure`` (the factorization revokes the grid's communicators, so a rank that never talks to the
dead one is told too), not a raw MPI error and not a wait for the dead.

usage: potrf_peer_death.py --routine pdpotrf|ft_pdpotrf --victim R [--grid PxQ]

Every rank builds the matrix (order 96, ``nb = 8``: 12 panels), then rank ``R`` SIGKILLs itself after a
barrier and the others call the routine (without a checkpointer). A survivor prints ``rank r left:
<ProcessFailure's class>: <message>`` and exits with code 3 (a raw MPI error would end it with a traceback).
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import ProcessFailure
from ftkit.failure import exit_without_finalize
from ftkit.inject import kill_self

N, NB = 96, 8


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--routine", choices=("pdpotrf", "ft_pdpotrf"), required=True)
    p.add_argument("--victim", type=int, required=True)
    p.add_argument("--grid", default="2x2")
    a = p.parse_args()
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, *(int(x) for x in a.grid.split("x")))
    r = np.random.default_rng(3).standard_normal((N, N))
    A = linalg.DistributedMatrix.from_global(grid, r @ r.T / N + np.eye(N), mb=NB, nb=NB)
    grid.comm.Barrier()
    if grid.rank == a.victim:
        kill_self()
    try:
        getattr(linalg, a.routine)("L", N, A, 0, 0)
    except ProcessFailure as exc:
        print(f"rank {grid.rank} left: {type(exc).__name__}: {exc}", flush=True)
        exit_without_finalize(None, 3)
    print(f"rank {grid.rank} finished", flush=True)


if __name__ == "__main__":
    main()
