"""Checkpoints and a restart, for the event-log tests: ``--levels 1,2,4`` checkpoints at those levels, then
finalizes (``keep_last_ckpt = 1`` keeps the last at L4); on a restart it recovers first. ``--app-logging``
configures logging the application's way first (``logging.basicConfig`` with an ``APP`` prefix).

Output on stdout: ``R<rank> recovered <id>`` after a recovery, ``R<rank> models_imported=<bool>`` after the
checkpoints (whether ``ftkit.models`` was loaded), ``R<rank> done``.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
from mpi4py import MPI

import ftkit

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--levels", default="1")
p.add_argument("--app-logging", action="store_true")
a = p.parse_args()
if a.app_logging:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="APP %(name)s %(levelname)s %(message)s")

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
rank = ckpt.comm.Get_rank()
u = np.full(1000 + 10 * rank, float(rank))
ckpt.protect("u", u)
if ckpt.restarted:
    info = ckpt.recover()
    print(f"R{rank} recovered {info.checkpoint_id}", flush=True)
for level in (int(x) for x in a.levels.split(",") if x):
    ckpt.checkpoint(level)
# The checkpoint lines did not load ftkit.models (issue 37: 20-80 ms of rank 0's first checkpoint call).
print(f"R{rank} models_imported={'ftkit.models' in sys.modules}", flush=True)
ckpt.finalize()
print(f"R{rank} done", flush=True)
