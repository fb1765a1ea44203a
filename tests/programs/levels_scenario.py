"""A small 1-D diffusion run protected by the Checkpointer, for the L2/L3 failure-scenario matrix.

Usage: levels_scenario.py ROOT PHASE [--steps N] [--plan L@S,...] [--group-size K] [--code rs|xor]

Each rank owns a band of a different length (so checkpoint files differ in size) and exchanges halos with
its neighbours every step. ROOT holds ``local/`` (node-local dirs), ``global/`` and ``meta/``.

PHASE ``ref``: run N steps without checkpoints; rank 0 prints ``DIGEST <hex>`` of the final field.
PHASE ``ckpt``: run, checkpointing at level L after step S for each ``L@S`` of the plan, then stop after the
last one without finalize (as a crash would).
PHASE ``recover``: restart, ``recover()``, run on to N steps; prints ``RECOVERED <rank> <id> <level>`` and the
digest, or ``RECOVERYERROR <rank> <message>`` when recovery is refused.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
from pathlib import Path

import numpy as np
import xxhash
from mpi4py import MPI

import ftkit
from ftkit.errors import RecoveryError

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("phase", choices=["ref", "ckpt", "recover"])
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--plan", default="3@6")
ap.add_argument("--group-size", type=int, default=4)
ap.add_argument("--code", default="rs")
ap.add_argument("--inline", type=int, default=1, help="0: L2/L3 post-processing in the background")
ap.add_argument("--head", type=int, default=0, help="1: a dedicated head rank per node does it")
ap.add_argument("--crash", type=int, default=0, help="ckpt phase: end every rank with os._exit(CRASH)")
args = ap.parse_args()
if os.environ.get("FTKIT_TEST_DUMP_AFTER"):  # a hang shows every thread's stack on stderr
    faulthandler.dump_traceback_later(float(os.environ["FTKIT_TEST_DUMP_AFTER"]), exit=False)

world = MPI.COMM_WORLD
root = Path(args.root)


def band_length(rank: int) -> int:
    # The band length depends on the application rank (heads excluded), so runs with and without heads match.
    return 600 + 97 * rank


def step(comm: MPI.Comm, u: np.ndarray) -> None:
    """One explicit diffusion step on the band u (halo cells u[0], u[-1]), with a fixed source on rank 0."""
    r, n = comm.Get_rank(), comm.Get_size()
    left = r - 1 if r > 0 else MPI.PROC_NULL
    right = r + 1 if r < n - 1 else MPI.PROC_NULL
    comm.Sendrecv(u[1:2], left, 1, u[-1:], right, 1)
    comm.Sendrecv(u[-2:-1], right, 2, u[0:1], left, 2)
    if r == 0:
        u[0] = 1.0
    u[1:-1] = u[1:-1] + 0.25 * (u[:-2] - 2.0 * u[1:-1] + u[2:])


def digest(comm: MPI.Comm, u: np.ndarray) -> str:
    parts = comm.gather(u[1:-1].tobytes(), root=0)
    return xxhash.xxh3_64(b"".join(parts)).hexdigest() if parts is not None else ""


if args.phase == "ref":
    u = np.zeros(band_length(world.rank) + 2)
    for _ in range(args.steps):
        step(world, u)
    d = digest(world, u)
    if world.rank == 0:
        print(f"DIGEST {d}", flush=True)
    sys.exit(0)

config = ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global", meta_dir=root / "meta",
                      group_size=args.group_size, l3_code=args.code, failure_timeout=120.0,
                      inline_l2=args.inline, inline_l3=args.inline, head=args.head)
ckpt = ftkit.Checkpointer(config, comm=world)
comm = ckpt.comm
u = np.zeros(band_length(comm.rank) + 2)
it = np.zeros(1, np.int64)
ckpt.protect("u", u)
ckpt.protect("it", it)

if args.phase == "ckpt":
    assert not ckpt.restarted
    plan = [(int(lv), int(s)) for lv, s in (p.split("@") for p in args.plan.split(","))]
    while plan:
        step(comm, u)
        it[0] += 1
        if it[0] == plan[0][1]:
            ckpt.checkpoint(level=plan[0][0])
            plan.pop(0)
    ckpt.wait()
    comm.Barrier()
    if comm.rank == 0:
        print("CHECKPOINTED", flush=True)
    if args.crash:
        os._exit(args.crash)  # a crash: no finalize, no exit handlers, the FT thread still alive
    sys.exit(0)

assert ckpt.restarted, "expected a restart"
try:
    info = ckpt.recover()
except RecoveryError as exc:
    print(f"RECOVERYERROR {comm.rank} {exc}", flush=True)
    sys.exit(0)
print(f"RECOVERED {comm.rank} {info.checkpoint_id} {info.level} at step {int(it[0])}", flush=True)
while it[0] < args.steps:
    step(comm, u)
    it[0] += 1
d = digest(comm, u)
if comm.rank == 0:
    print(f"DIGEST {d}", flush=True)
