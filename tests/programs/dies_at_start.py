"""Rank 3 SIGKILLs itself just before ``Checkpointer()``: the others' start-up collectives fail.

usage: dies_at_start.py DIR (4 ranks or more; the run's configuration and directories go in DIR)
"""

import os
import signal
import sys

from mpi4py import MPI

import ftkit

rank = MPI.COMM_WORLD.rank
base = sys.argv[1]
config = os.path.join(base, "ftkit.ini")
if rank == 0:
    with open(config, "w") as f:
        f.write(f"[basic]\nckpt_dir = {base}/local\nglbl_dir = {base}/global\nmeta_dir = {base}/meta\n"
                "ckpt_l1 = 5\n[ftkit]\nfailure_timeout = 20\n")
MPI.COMM_WORLD.Barrier()
if rank == 3:
    os.kill(os.getpid(), signal.SIGKILL)
ckpt = ftkit.Checkpointer(config, MPI.COMM_WORLD)
print("opened", rank, flush=True)
ckpt.finalize()
