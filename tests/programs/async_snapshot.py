"""snapshot(auto=True) under MPI: Daly's interval from the measured cost, the same decisions on every rank.

Ranks sleep a different time per iteration (the agreement must make them decide alike anyway). Prints
``R<rank> levels=<iteration:level,...>``.
"""

from __future__ import annotations

import time

import numpy as np

import ftkit

cfg = ftkit.Config(ckpt_dir="run/local", glbl_dir="run/global", meta_dir="run/meta", ckpt_l4=5, inline_l4=0,
                   mtbf=1.0, max_sync_intv=4, failure_timeout=120.0)
ckpt = ftkit.Checkpointer(cfg)
rank = ckpt.comm.Get_rank()
x = np.arange(1000.0) * rank
ckpt.protect("x", x)
taken = []
for it in range(1, 61):
    time.sleep(0.01 * (1 + rank % 2))
    x += 1.0
    level = ckpt.snapshot(auto=True)
    if level:
        taken.append(f"{it}:{level}")
ckpt.wait()
ckpt.finalize()
print(f"R{rank} levels={','.join(taken)}", flush=True)
