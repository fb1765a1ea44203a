"""Rank 1 computes in pure Python, with no MPI call, for SECONDS; then every rank meets in a barrier.

usage: busy_rank.py SECONDS

Prints ``rank R barrier ok`` or ``rank R barrier failed: ...`` (test_jobexit: a busy rank is not declared
dead by the ULFM detector).
"""

import sys
import time

from mpi4py import MPI


def main() -> None:
    world = MPI.COMM_WORLD
    world.Set_errhandler(MPI.ERRORS_RETURN)
    rank = world.Get_rank()
    world.Barrier()
    if rank == 1:
        end, x = time.monotonic() + float(sys.argv[1]), 0
        while time.monotonic() < end:
            x += 1  # holds the GIL and makes no MPI call: no progress engine runs in this process
    try:
        world.Barrier()
        print(f"rank {rank} barrier ok", flush=True)
    except MPI.Exception as exc:
        print(f"rank {rank} barrier failed: {exc}", flush=True)


if __name__ == "__main__":
    main()
