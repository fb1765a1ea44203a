"""The heat example's loop with spare ranks, stopped by ``should_exit()``: for tests/checkpoint/
test_should_exit_spares.py.

Every process writes ``wpid.<world rank>`` (its pid) before ``Checkpointer()``; every application rank writes
``pid.<rank>`` after it (again after a spare was promoted into that rank). Rank 0 writes ``progress`` (the
last step done) after each step. ``--pause S`` sleeps S seconds per step until the first online recovery
(the driver's window to kill a rank). ``--gate-at S``: after step S (with ``--gate-after-recovery``: the first
step after an online recovery), rank 0 writes ``gate`` and waits for ``release`` (at most 120 s); the others
wait for it in a broadcast. Every iteration asks ``ckpt.should_exit()`` and leaves the loop when it is true.
At the end rank 0 prints ``recoveries <n>`` and ``digest <hex>`` of the whole plate when every ``--steps``
step is done, else ``stopped <steps done>``; every rank prints ``R<rank> end <steps done> exit=<0|1>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exit_app import _gate, heat  # noqa: E402  (the heat example and the release gate of exit_app.py)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="ftkit.ini")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--gate-at", type=int, default=None)
    p.add_argument("--gate-after-recovery", action="store_true")
    args = p.parse_args()
    Path(f"wpid.{MPI.COMM_WORLD.rank}").write_text(str(os.getpid()))
    ckpt = ftkit.Checkpointer(args.config, MPI.COMM_WORLD)
    comm = ckpt.comm
    Path(f"pid.{comm.rank}.tmp").write_text(str(os.getpid()))
    os.replace(f"pid.{comm.rank}.tmp", f"pid.{comm.rank}")
    n = args.size
    plate = heat.Plate(n, comm.size, comm.rank)
    step = np.zeros(1, dtype=np.int64)
    plate.protect(ckpt)
    ckpt.protect("step", step, global_shape=(1,), offset=(0,))
    if ckpt.restarted:
        ckpt.recover()
    gated = False
    stop = False
    for s in ckpt.steps(args.steps):
        comm = ckpt.comm
        heat.exchange_halos(comm, plate.u)
        heat.jacobi_rows(plate.u, plate.start, n)
        step[0] = s + 1
        if args.pause and not ckpt.recoveries:
            time.sleep(args.pause)
        ckpt.snapshot()
        if comm.rank == 0:
            Path("progress").write_text(str(s))
        if args.gate_at is not None and not gated and not ckpt.restarted and s >= args.gate_at \
                and (bool(ckpt.recoveries) or not args.gate_after_recovery):
            gated = True
            _gate(comm)
        if ckpt.should_exit():
            stop = True
            break
    comm = ckpt.comm
    done = int(step[0])
    print(f"R{comm.rank} end {done} exit={int(stop)}", flush=True)
    field = np.empty((n, n)) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(plate.u[1:-1]), [field, plate.counts()] if comm.rank == 0 else None,
                 root=0)
    recoveries = len(ckpt.recoveries)
    ckpt.finalize()  # after should_exit() said stop, the checkpoints stay for the next job
    if comm.rank == 0:
        print(f"recoveries {recoveries}", flush=True)
        print(f"digest {heat.digest(field)}" if done == args.steps else f"stopped {done}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
