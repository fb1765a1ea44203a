"""Ranks that never import ftkit (only ``mpi4py``) and end together, one way for all (tests of ``ftkit
launch``'s exit code).

usage: ranks_end_unnoted.py {return,sigkill}: after a barrier every rank returns normally, or SIGKILLs itself
(as every rank of the campaign's seed 53 trial 13 crashed inside ``MPI_Init``: no note of ftkit's, and mpirun
exits 0 under ULFM).
"""
import os
import signal
import sys

from mpi4py import MPI

how = sys.argv[1]
MPI.COMM_WORLD.Barrier()
print(f"rank {MPI.COMM_WORLD.rank} ends by {how}", flush=True)
if how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
