"""An L2 checkpoint whose partner is alive but stuck: every other rank must end in a ftkit error within the
configured ``failure_timeout``, not the storage layer's 600 s default.

Usage: l2_stuck_partner.py --config CFG --stuck R --first LEVEL   (under ``ftkit launch``, emulated nodes)

A first checkpoint at ``LEVEL`` with every rank (2: the L2 group communicator exists then; 1: the L2
checkpoint below sets it up, a collective on the whole job). Then rank ``R`` stops itself (a real
``SIGSTOP``) at the ``before_post`` stage of an L2 checkpoint; the others go on into the partner copy.
Each rank prints ``R<rank> error <Type> <seconds> <message>`` or ``R<rank> wrote``.
Every rank but the stuck one waits until every other has reported (one that left at once would be a failed
process to those still waiting for their deadline); then rank 0 resumes the stuck one (``SIGCONT``). Every
rank then leaves without ``MPI_Finalize`` (the job's collectives are out of step on purpose).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--stuck", type=int, required=True)
p.add_argument("--first", type=int, required=True)
a = p.parse_args()

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
rank, n = ckpt.comm.rank, ckpt.comm.size
root = Path(a.config).resolve().parent
Path(root, f"pid.{rank}").write_text(str(os.getpid()))
data = np.arange(200_000, dtype=np.float64) + rank
ckpt.protect("data", data)
ckpt.checkpoint(a.first)  # a good checkpoint first, with every rank taking part

if rank == a.stuck:
    ckpt._session.ctx.fault_hook = (
        lambda s: os.kill(os.getpid(), signal.SIGSTOP) if s == "before_post" else None)
t0 = time.monotonic()
try:
    ckpt.checkpoint(2)
    line = f"R{rank} wrote"
except ftkit.FtkitError as exc:
    line = f"R{rank} error {type(exc).__name__} {time.monotonic() - t0:.1f} {exc}"
print(line, flush=True)
Path(root, f"outcome.{rank}").write_text(line)

# Every rank stays until every other rank reported (bounded): a rank that left at once would be a failed
# process to the ones still waiting for their deadline, which would then raise ProcessFailure instead.
deadline = time.monotonic() + 150
while rank != a.stuck and not all(Path(root, f"outcome.{r}").exists() for r in range(n) if r != a.stuck):
    if time.monotonic() > deadline:
        raise SystemExit("the other ranks did not report within 150 s")
    time.sleep(0.05)
if rank == 0:  # then resume the stuck rank
    pid = int(Path(root, f"pid.{a.stuck}").read_text())
    while not Path(root, f"outcome.{a.stuck}").exists() and time.monotonic() < deadline:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # the runtime ended it meanwhile
            break
        time.sleep(0.05)
os._exit(0)
