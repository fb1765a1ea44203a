"""Heat diffusion (examples/heat.py) in the resilient loop ``for step in ckpt.steps(n)``, for the online
recovery tests: the driver SIGKILLs ranks from outside while it runs.

Every application rank writes ``<dir>/pid.<rank>`` (its PID) at start, and again after it was promoted from
spare; rank 0 writes ``<dir>/progress`` (the last step done) after each step. ``--pause S`` sleeps S seconds
per step (on every rank) to give the driver a window. ``--hold-stage STAGE --hold-rank R``: rank R (an
original process, not a promoted spare) writes ``<dir>/held`` and sleeps until it is killed from outside
when, after step ``--hold-after`` and before any online recovery, it reaches STAGE: a stage of the
checkpoint pipeline (``after_write``, ``before_post``...), ``post`` (its L2 partner copy, in the background
thread with ``inline_l2 = 0``) or ``restore`` (the start of the first online restore). ``--raise-at S
--raise-rank R``: rank R raises a RuntimeError (uncaught) in step S, only the original process, or every
process that holds rank R with ``--raise-always`` (a deterministic bug). ``--wait-at S --wait-for FILE``:
every rank waits in step S until FILE exists (at most 120 s). ``--appstate``: every rank also protects a
resizable array, a generator and a dict (``_online.particles_step``) and rank 0 prints ``appstate ok`` if
every rank's final state is the failure-free run's (else ``appstate BAD``).

Output on rank 0: ``recovery dead=[..] ckpt=<id> level=<L>`` per online recovery, then ``digest <hex>`` of
the final field and ``reference <hex>`` (a serial recomputation). Every process that raises an
OnlineRecoveryError writes its message to ``<dir>/online-error.rank<r>`` (a spare: ``.spare<pid>``) and
exits with code 3 (a file, not stdout: the launcher may end the others as soon as one exits); another ftkit
error is written to ``<dir>/error.rank<r>`` (``Type: message``), exit code 4.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import _online  # noqa: E402
import heat  # noqa: E402

import ftkit  # noqa: E402
from ftkit.checkpoint.levels import partner  # noqa: E402
from ftkit.checkpoint.online import restore as online_restore  # noqa: E402
from ftkit.failure import exit_without_finalize  # noqa: E402

p = _online.parser()
p.add_argument("--hold-stage", default=None)
p.add_argument("--hold-rank", type=int, default=-1)
p.add_argument("--hold-after", type=int, default=0)
p.add_argument("--raise-at", type=int, default=-1)
p.add_argument("--raise-rank", type=int, default=-1)
p.add_argument("--raise-always", action="store_true")
p.add_argument("--wait-at", type=int, default=-1)
p.add_argument("--wait-for", default=None)
p.add_argument("--appstate", action="store_true")
a = p.parse_args()
out = Path(a.dir)

ckpt = _online.start(a.config, out)
comm = ckpt.comm
(out / f"pid.{comm.rank}").write_text(str(os.getpid()))
n = a.size
start, stop = heat.row_band(n, comm.size, comm.rank)
u = heat.initial_band(n, start, stop)
ckpt.protect("u", u)
if a.appstate:  # a spare promoted to a dead rank's place recovers this rank's sizes and states
    parts, rng, pstate = _online.particles_start(comm.rank)
    ckpt.protect("p", parts, resizable=True)
    ckpt.protect("rng", rng)
    ckpt.protect("pstate", pstate)
holding = {"armed": False, "original": ckpt._session.online is None or not ckpt._session.online.fresh}


def hold(stage: str) -> None:
    if holding["armed"] and holding["original"] and stage == a.hold_stage and ckpt.rank == a.hold_rank:
        (out / "held.tmp").write_text(str(os.getpid()))  # renamed: the test never reads it half written
        os.replace(out / "held.tmp", out / "held")
        time.sleep(600)


def held(stage: str, fn):  # type: ignore[no-untyped-def]
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        hold(stage)
        return fn(*args, **kwargs)
    return call


if a.hold_stage == "post":
    partner.partner_copy = held("post", partner.partner_copy)
elif a.hold_stage == "restore":
    online_restore.recover_newest = held("restore", online_restore.recover_newest)
elif a.hold_stage:
    ckpt._session.ctx.fault_hook = hold  # the test's window: this rank stops inside the pipeline

try:
    for step in ckpt.steps(a.steps):
        holding["armed"] = step >= a.hold_after and not ckpt.recoveries or a.hold_stage == "restore"
        comm = ckpt.comm
        heat.exchange_halos(comm, u)
        heat.jacobi_rows(u, start, n)
        if a.appstate:
            ckpt.protect("p", _online.particles_step(ckpt.array("p"), rng, pstate, step), resizable=True)
        if a.pause:
            time.sleep(a.pause)
        if step == a.wait_at:  # every rank waits (bounded) until the driver creates the file
            deadline = time.monotonic() + 120
            while not Path(a.wait_for).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if step == a.raise_at and ckpt.rank == a.raise_rank and (a.raise_always or holding["original"]):
            raise RuntimeError(f"application bug on rank {ckpt.rank} at step {step}")
        ckpt.snapshot()
        if comm.rank == 0:
            (out / "progress").write_text(str(step))
    comm = ckpt.comm
    counts = [(heat.row_band(n, comm.size, r)[1] - heat.row_band(n, comm.size, r)[0]) * n
              for r in range(comm.size)]
    field = np.empty((n, n)) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(u[1:-1]), [field, counts] if comm.rank == 0 else None, root=0)
    reports = ckpt.recoveries
    if a.appstate:
        ok = _online.particles_match(comm.rank, a.steps, ckpt.array("p"), rng, pstate)
        if comm.allreduce(int(ok), op=MPI.MIN) and comm.rank == 0:
            print("appstate ok", flush=True)
        elif comm.rank == 0:
            print("appstate BAD", flush=True)
    ckpt.finalize()
except ftkit.OnlineRecoveryError as exc:
    (out / f"online-error.rank{ckpt.rank}").write_text(str(exc))
    exit_without_finalize(None, 3)
except ftkit.FtkitError as exc:  # e.g. a full disk: the same error on every rank
    (out / f"error.rank{ckpt.rank}").write_text(f"{type(exc).__name__}: {exc}")
    exit_without_finalize(None, 4)
_online.report(comm, reports, field, n, a.steps)
