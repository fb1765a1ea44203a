"""The heat example's loop, stopped by ``should_exit()`` (halt, signals, walltime): for tests/checkpoint/
test_should_exit.py.

Every rank writes its pid to ``pid<rank>`` at start. With ``--gate-at S`` the job pauses after step ``S``
(rank 0 writes ``gate`` and waits for ``release`` to appear, at most 120 s; the others wait for it in a
broadcast), so a test can act on a running job at a known place. ``--ask`` also calls ``should_exit()`` in the
body. At the end every rank prints ``R<rank> end <steps done> exit=<0|1>``; rank 0 prints
``digest <hex>`` of the whole plate when all ``--steps`` are done, else ``stopped <steps done>``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit

_HEAT = Path(__file__).resolve().parents[2] / "examples" / "heat.py"
_spec = importlib.util.spec_from_file_location("ftkit_example_heat", _HEAT)
heat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heat)


def _gate(comm: MPI.Comm) -> None:
    if comm.rank == 0:
        Path("gate").write_text("1")
        deadline = time.monotonic() + 120.0
        while not Path("release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    comm.bcast(None, root=0)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="ftkit.ini")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--gate-at", type=int, default=None)
    p.add_argument("--ask", action="store_true")
    args = p.parse_args()
    ckpt = ftkit.Checkpointer(args.config, MPI.COMM_WORLD)
    comm = ckpt.comm
    Path(f"pid{comm.rank}").write_text(str(os.getpid()))
    n = args.size
    plate = heat.Plate(n, comm.size, comm.rank)
    step = np.zeros(1, dtype=np.int64)
    plate.protect(ckpt)
    ckpt.protect("step", step, global_shape=(1,), offset=(0,))
    if ckpt.restarted:
        ckpt.recover()
    asked = False
    for s in ckpt.steps(args.steps):
        heat.exchange_halos(comm, plate.u)
        heat.jacobi_rows(plate.u, plate.start, n)
        step[0] = s + 1
        ckpt.snapshot()
        if args.gate_at is not None and s == args.gate_at and not ckpt.restarted:
            _gate(comm)
        if args.ask and ckpt.should_exit():
            asked = True
            break
    done = int(step[0])
    print(f"R{comm.rank} end {done} exit={int(asked or ckpt.should_exit())}", flush=True)
    field = np.empty((n, n)) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(plate.u[1:-1]), [field, plate.counts()] if comm.rank == 0 else None,
                 root=0)
    finished = done == args.steps
    ckpt.finalize()  # after should_exit() said stop, the checkpoints stay for the next job
    if comm.rank == 0:
        print(f"digest {heat.digest(field)}" if finished else f"stopped {done}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
