"""Test program: rank 1 computes SECONDS in pure Python without calling MPI while the others wait in a
barrier; every rank then prints "R<rank> ok threads=<names>". With --finalize every rank calls MPI.Finalize()
itself and prints "R<rank> finalized" after it.

usage: python long_compute.py SECONDS [--finalize]"""
import sys
import threading
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Set_errhandler(MPI.ERRORS_RETURN)
rank = comm.Get_rank()
comm.Barrier()
if rank == 1:
    end, x = time.monotonic() + float(sys.argv[1]), 0
    while time.monotonic() < end:
        x += 1
try:
    comm.Barrier()
    names = ",".join(sorted(t.name for t in threading.enumerate()))
    print(f"R{rank} ok threads={names}", flush=True)
except MPI.Exception as exc:
    print(f"R{rank} FAILED {exc.Get_error_string()}", flush=True)
    sys.exit(3)
if "--finalize" in sys.argv:
    MPI.Finalize()
    print(f"R{rank} finalized", flush=True)
