"""A job that is interrupted (SIGINT) inside an L4 checkpoint, at a chosen point, and its relaunch.

usage: sigint_in_checkpoint.py ROOT --config ftkit.ini --mode write --point STAGE --victim R
       sigint_in_checkpoint.py ROOT --config ftkit.ini --mode recover

write mode: checkpoint 1 and 2 at L4 (data ``value(rank, i)``, step ``i``). In checkpoint 2, rank R stops at
the fault-injection stage STAGE (``ctx.hook``: after_write, before_post, after_post, gate_agreed,
before_commit, after_commit), writes ``ROOT/reached`` and waits there, bounded, for the SIGINT the test sends
to ``ftkit launch`` (which passes it on to every rank: a ``KeyboardInterrupt`` in each main thread). A rank
whose checkpoint 2 returned writes ``ROOT/waiting.<rank>`` and waits for it too. Nobody catches the
interrupt: every rank ends through ftkit's exit hook, as the campaign's ``launcher`` trials do. No SIGINT
within :data:`WAIT` seconds: exit code 7.

recover mode: ``recover()``, then one line per rank: ``R<rank> recovered id=<id> step=<step> data=ok|BAD``
(``ok``: every value bit for bit the one written at that step).
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit
from ftkit._wait import deadline_after, poll_until
from ftkit.errors import TimeoutFailure

#: How long a rank waits for the test's SIGINT (seconds).
WAIT = 200.0
N = 5000


def value(rank: int, i: int) -> np.ndarray:
    return rank * 1000.0 + i * 7.0 + np.arange(N) * 0.5


def wait_for_interrupt(root: Path, note: str) -> None:
    """Write ``root/note``, wait for the SIGINT (its KeyboardInterrupt leaves this call); exit 7 without."""
    (root / note).write_text(str(os.getpid()))
    try:
        poll_until(lambda: False, deadline_after(WAIT), "the test's SIGINT", max_sleep=0.05)
    except TimeoutFailure:
        print(f"no SIGINT within {WAIT:g} s ({note})", file=sys.stderr, flush=True)
        os._exit(7)


p = argparse.ArgumentParser()
p.add_argument("root", type=Path)
p.add_argument("--config", required=True)
p.add_argument("--mode", choices=["write", "recover"], required=True)
p.add_argument("--point", default="")
p.add_argument("--victim", type=int, default=-1)
a = p.parse_args()

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
rank = ckpt.comm.rank
data = np.full(N, -1.0)
step = np.full(1, -1, dtype=np.int64)
ckpt.protect("data", data)
ckpt.protect("step", step)

if a.mode == "recover":
    info = ckpt.recover()
    ok = bool(np.array_equal(data, value(rank, int(step[0]))))
    print(f"R{rank} recovered id={info.checkpoint_id} step={int(step[0])} data={'ok' if ok else 'BAD'}",
          flush=True)
    ckpt.finalize()
    sys.exit(0)

for i in (1, 2):
    data[:] = value(rank, i)
    step[0] = i
    if i == 2 and rank == a.victim:
        ckpt._session.ctx.fault_hook = (
            lambda stage: wait_for_interrupt(a.root, "reached") if stage == a.point else None)
    cid = ckpt.checkpoint(4)
    print(f"R{rank} wrote id={cid}", flush=True)
wait_for_interrupt(a.root, f"waiting.{rank}")
