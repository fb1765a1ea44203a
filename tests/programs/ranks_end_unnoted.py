"""Ranks that never import ftkit (only ``mpi4py``) and end together, one way for all (tests of ``ftkit
launch``'s exit code).

usage: ranks_end_unnoted.py {return,sigkill,sigkill_before_init}: every rank returns normally after a
barrier, SIGKILLs itself after it, or SIGKILLs itself before ``MPI_Init`` (as every rank of the campaign's
seed 53 trial 13 crashed inside ``MPI_Init``): no note of ftkit's, and mpirun exits 0 under ULFM.
"""
import os
import signal
import sys

how = sys.argv[1]
if how == "sigkill_before_init":
    print(f"a rank ends by {how}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

from mpi4py import MPI  # noqa: E402 - after the kill above, on purpose

MPI.COMM_WORLD.Barrier()
print(f"rank {MPI.COMM_WORLD.rank} ends by {how}", flush=True)
if how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
