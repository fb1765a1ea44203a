"""Config test program: snapshot() for --iterations calls with the intervals of a config file; prints
``R<rank> levels=<iteration:level,...>``, waits for background work and exits without finalize()."""
import argparse

import numpy as np
from mpi4py import MPI

import ftkit

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--iterations", type=int, default=12)
a = p.parse_args()

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
x = np.arange(20000.0) * (ckpt.comm.rank + 1)
ckpt.protect("x", x)
taken = []
for it in range(1, a.iterations + 1):
    x[it * 100:(it + 1) * 100] += 1.0          # a few blocks change per iteration (dCP writes only those)
    level = ckpt.snapshot()
    if level:
        taken.append(f"{it}:{level}")
ckpt.wait()
print(f"R{ckpt.comm.rank} levels={','.join(taken)}", flush=True)
