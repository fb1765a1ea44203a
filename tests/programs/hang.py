"""Hangs forever on rank 0 (to test the hard timeout)."""
import time

from mpi4py import MPI

if MPI.COMM_WORLD.rank == 0:
    while True:
        time.sleep(1)
MPI.COMM_WORLD.Barrier()
