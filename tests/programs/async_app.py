"""Heat diffusion (examples/heat.py) with explicit checkpoints, for the asynchronous post-processing tests.

``--ckpt STEP:LEVEL`` (repeatable) checkpoints at LEVEL after STEP. ``--crash-at STEP`` waits for the
post-processing in flight (so the checkpoints taken are complete) and SIGKILLs every rank at STEP.
``--kill-in-flight ID`` SIGKILLs every rank while checkpoint ID's background post-processing is about to be
recorded as complete (its files are written, the manifest not yet updated). ``--dcp`` replaces the heat field
by a large array of which 1% of the blocks change between checkpoints, and prints the L4 bytes written.

Output: ``R<rank> size=<ckpt.comm size> world=<world rank> ...`` per application rank,
``recovered <id> <level>``
after a recovery, and on rank 0 ``digest <hex>`` and ``reference <hex>`` (a serial recomputation).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

import mpi4py
import numpy as np

if "--thread-level" in sys.argv:  # must be set before MPI is initialized
    mpi4py.rc.thread_level = sys.argv[sys.argv.index("--thread-level") + 1]
from mpi4py import MPI  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import heat  # noqa: E402

import ftkit  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--config", default="ftkit.ini")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--size", type=int, default=48)
p.add_argument("--ckpt", action="append", default=[])
p.add_argument("--crash-at", type=int, default=None)
p.add_argument("--kill-in-flight", type=int, default=None)
p.add_argument("--dcp", action="store_true")
p.add_argument("--dcp-bytes", type=int, default=1 << 21, help="bytes of the dCP array per rank")
p.add_argument("--dcp-block", type=int, default=4096)
p.add_argument("--thread-level", default="multiple", help="mpi4py.rc.thread_level")
args = p.parse_args()
plan = {int(s): int(lv) for s, lv in (c.split(":") for c in args.ckpt)}


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def mutate(big: np.ndarray, rank: int, step: int, block: int) -> None:
    """Change 1% of the blocks of ``big`` (deterministic in rank and step)."""
    nblocks = big.nbytes // block
    rng = np.random.default_rng(1000 * rank + step)
    view = big.view(np.uint8)
    for b in rng.choice(nblocks, max(1, nblocks // 100), replace=False):
        view[b * block + int(rng.integers(block))] ^= np.uint8(1 + step % 255)


def dcp_reference(rank: int, steps: int) -> np.ndarray:
    big = np.random.default_rng(rank).integers(0, 2**62, args.dcp_bytes // 8, dtype=np.int64)
    for s in range(1, steps + 1):
        mutate(big, rank, s, args.dcp_block)
    return big


ckpt = ftkit.Checkpointer(args.config)
comm = ckpt.comm
rank = comm.Get_rank()
print(f"R{rank} size={comm.Get_size()} world={MPI.COMM_WORLD.Get_rank()} node={ckpt.topology.node_id}",
      flush=True)
step = np.zeros(1, np.int64)
if args.dcp:
    big = np.random.default_rng(rank).integers(0, 2**62, args.dcp_bytes // 8, dtype=np.int64)
    ckpt.protect("big", big)
else:
    n = args.size
    start, stop = heat.row_band(n, comm.size, rank)
    u = heat.initial_band(n, start, stop)
    ckpt.protect("u", u)
ckpt.protect("step", step)
if ckpt.restarted:
    info = ckpt.recover()
    if rank == 0:
        print(f"recovered {info.checkpoint_id} {info.level} at step {step[0]}", flush=True)

if args.kill_in_flight is not None:
    def hook(stage: str) -> None:
        # The background thread of that checkpoint is about to record it complete: its files are written.
        name = threading.current_thread().name
        if stage == "before_commit" and name == f"ftkit-post-{args.kill_in_flight}":
            die()
    ckpt._session.ctx.fault_hook = hook

dcp_dir = ckpt.config.glbl_dir / ckpt.exec_id / "l4dcp"


def store_bytes() -> int:
    """Bytes of this rank's dCP block stores."""
    if not dcp_dir.is_dir():
        return 0
    return sum(f.stat().st_size for f in dcp_dir.glob(f"dcp-r{rank}-g*.blocks"))


while step[0] < args.steps:
    if args.crash_at is not None and step[0] == args.crash_at and not ckpt.restarted:
        ckpt.wait()
        comm.Barrier()
        die()
    if args.dcp:
        mutate(big, rank, int(step[0]) + 1, args.dcp_block)
    else:
        heat.exchange_halos(comm, u)
        heat.jacobi_rows(u, start, n)
    step[0] += 1
    level = plan.get(int(step[0]))
    if level:
        before = store_bytes() if args.dcp else 0
        cid = ckpt.checkpoint(level)
        if args.dcp:
            ckpt.wait()
            meta = (dcp_dir / f"dcp-r{rank}-c{cid}.map").stat().st_size
            print(f"R{rank} dcp id={cid} data={store_bytes() - before} map={meta} full={big.nbytes}",
                  flush=True)
ckpt.wait()
if args.dcp:
    ok = bool(np.array_equal(big, dcp_reference(rank, args.steps)))
    print(f"R{rank} final match={ok}", flush=True)
    ckpt.finalize()
    sys.exit(0)
bands = [heat.row_band(n, comm.size, r) for r in range(comm.size)]
counts = [(b - a) * n for a, b in bands]
field = np.empty((n, n)) if rank == 0 else None
comm.Gatherv(np.ascontiguousarray(u[1:-1]), [field, counts] if rank == 0 else None, root=0)
ckpt.finalize()
if rank == 0:
    print(f"digest {heat.digest(field)}", flush=True)
    print(f"reference {heat.digest(heat.reference(n, args.steps))}", flush=True)
