"""Config test program: start a Checkpointer from a config file, take one checkpoint per level given, print
"L<level> ok id=<id>" or "L<level> refused <Type>: <message>" on rank 0, then finalize."""
import argparse

import numpy as np
from mpi4py import MPI

import ftkit

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--levels", default="1")
a = p.parse_args()

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
data = np.arange(1000, dtype=np.float64) + ckpt.comm.rank
ckpt.protect("data", data)
for lv in (int(x) for x in a.levels.split(",")):
    try:
        cid = ckpt.checkpoint(lv)
        line = f"L{lv} ok id={cid}"
    except ftkit.FtkitError as exc:
        line = f"L{lv} refused {type(exc).__name__}: {exc}"
    if ckpt.comm.rank == 0:
        print(line, flush=True)
ckpt.finalize()
