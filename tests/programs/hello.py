"""Prints one line per rank, with the emulated node size it was given; exits with --exit-code."""
import argparse
import os

from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--exit-code", type=int, default=0)
a = p.parse_args()
comm = MPI.COMM_WORLD
print(f"rank {comm.rank} size {comm.size} node_size {os.environ.get('FTKIT_NODE_SIZE')}", flush=True)
comm.Barrier()
if comm.rank == 0 and a.exit_code:
    raise SystemExit(a.exit_code)
