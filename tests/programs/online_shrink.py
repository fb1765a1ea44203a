"""Heat diffusion (examples/heat.py, its ``Plate``) in ``for step in ckpt.steps(n, on_shrink=...)``, for the
"continue with fewer ranks" tests: the driver SIGKILLs ranks from outside while it runs.

Every process writes ``<dir>/pid.<rank>`` (its PID; rank in the job's first application communicator) at
start, a promoted spare ``<dir>/pid.<rank>`` again; rank 0 (of the current communicator) writes
``<dir>/progress`` (the last step done) after each step. ``--pause S`` sleeps S seconds per step.
``--no-layout`` protects the band without its place in the plate (the shrink must then fail).
``--hold-rank R``: the process that was rank R at start writes ``<dir>/held`` and sleeps until it is
killed from outside when it reaches the restore of a shrink (a kill during the shrink recovery itself).
``--late-rank R``: the process that was rank R at start, when its repair is about to form the survivors'
smaller communicator, writes ``<dir>/late`` and stays out of the repair (alive, progressing MPI) until
another survivor (not R, not one of the ``--killed`` ranks) has written its ``online-error`` file (at most
300 s), then goes on with its repair: a survivor that never comes must not hold the others.
``--bad-callback`` only prints ``R<rank> <error>`` of ``steps(1, on_shrink="x")``.

Output on rank 0: ``shrink old=<n> new=<m> failed=[..] ckpt=<id> level=<L> number=<k>`` per shrink, ``recovery
dead=[..] ckpt=<id> level=<L>`` per online recovery, then ``digest <hex>`` of the final field and
``reference <hex>`` (a serial recomputation). Every process that raises an OnlineRecoveryError writes its
message to ``<dir>/online-error.rank<r>`` (r: its rank at start; a spare: ``.spare<pid>``) and exits with
code 3.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import _online  # noqa: E402
import heat  # noqa: E402

import ftkit  # noqa: E402
from ftkit.checkpoint.online import repair as online_repair  # noqa: E402
from ftkit.checkpoint.online import restore as online_restore  # noqa: E402
from ftkit.failure import exit_without_finalize  # noqa: E402

p = _online.parser()
p.add_argument("--no-layout", action="store_true")
p.add_argument("--hold-rank", type=int, default=-1)
p.add_argument("--late-rank", type=int, default=-1)
p.add_argument("--killed", default="", help="with --late-rank: the ranks the driver kills (comma-separated)")
p.add_argument("--bad-callback", action="store_true", help="print R<rank> <error> of steps(on_shrink='x')")
a = p.parse_args()
out = Path(a.dir)

ckpt = _online.start(a.config, out)
first_rank = ckpt.comm.rank
(out / f"pid.{first_rank}.tmp{os.getpid()}").write_text(str(os.getpid()))
os.replace(out / f"pid.{first_rank}.tmp{os.getpid()}", out / f"pid.{first_rank}")  # never read half-written
plate = heat.Plate(a.size, ckpt.comm.size, ckpt.comm.rank)


def protect() -> None:
    if a.no_layout:
        ckpt.protect("u", plate.u[1:-1])
    else:
        plate.protect(ckpt)


def on_shrink(comm) -> None:  # type: ignore[no-untyped-def]
    assert comm.allreduce(1) == comm.size == ckpt.nranks  # the callback may communicate on the new comm
    plate.place(comm.size, comm.rank)
    protect()


def hold(fn):  # type: ignore[no-untyped-def]
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        if first_rank == a.hold_rank and ckpt._session.shrink.pending is not None:
            (out / "held.tmp").write_text(str(os.getpid()))  # renamed: the test never reads it half written
            os.replace(out / "held.tmp", out / "held")
            time.sleep(600)
        return fn(*args, **kwargs)
    return call


def late(fn):  # type: ignore[no-untyped-def]
    def call(state, sh, rebuilt, *args):  # type: ignore[no-untyped-def]
        if first_rank == a.late_rank and rebuilt.missing and not rebuilt.spares:
            (out / "late.tmp").write_text(str(os.getpid()))
            os.replace(out / "late.tmp", out / "late")
            from mpi4py import MPI  # initialized by now (ftkit's settings first)

            others = set(range(ckpt.nranks)) - {a.late_rank, *(int(r) for r in a.killed.split(","))}

            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not any((out / f"online-error.rank{r}").exists()
                                                          for r in others):
                MPI.COMM_SELF.Iprobe()  # in MPI: the failure detector sees this rank alive
                time.sleep(0.05)
        return fn(state, sh, rebuilt, *args)
    return call


online_restore.recover_newest = hold(online_restore.recover_newest)
online_repair.shrink_world = late(online_repair.shrink_world)
if a.bad_callback:
    try:
        ckpt.steps(1, on_shrink="x")  # type: ignore[arg-type]
    except ftkit.CheckpointError as exc:
        print(f"R{first_rank} {type(exc).__name__}: {exc}", flush=True)
    ckpt.finalize()
    sys.exit(0)
protect()
try:
    for step in ckpt.steps(a.steps, on_shrink=on_shrink):
        comm = ckpt.comm
        heat.exchange_halos(comm, plate.u)
        heat.jacobi_rows(plate.u, plate.start, plate.n)
        if a.pause:
            time.sleep(a.pause)
        ckpt.snapshot()
        if comm.rank == 0:
            (out / "progress").write_text(str(step))
    comm = ckpt.comm
    field = np.empty((plate.n, plate.n)) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(plate.u[1:-1]), [field, plate.counts()] if comm.rank == 0 else None,
                 root=0)
    reports, shrinks = ckpt.recoveries, ckpt.shrinks
    ckpt.finalize()
except ftkit.OnlineRecoveryError as exc:
    (out / f".tmp.rank{first_rank}").write_text(str(exc))  # whole, for the ranks waiting on it below
    os.replace(out / f".tmp.rank{first_rank}", out / f"online-error.rank{first_rank}")
    if a.late_rank >= 0 and first_rank != a.late_rank:
        # Stay until the late rank has reported too: a rank that exits without MPI_Finalize makes PRRTE
        # SIGKILL the job's other processes, which raced the late rank's own report (bounded wait).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out / f"online-error.rank{a.late_rank}").exists():
            time.sleep(0.05)
    exit_without_finalize(None, 3)
if comm.rank == 0:
    for s in shrinks:
        print(f"shrink old={s.old_size} new={s.new_size} failed={list(s.failed)} ckpt={s.checkpoint_id} "
              f"level={s.level} number={s.number}", flush=True)
        print(f"shrink-repr {s!r}", flush=True)
    for r in reports:
        print(f"recovery-repr {r!r}", flush=True)
_online.report(comm, reports, field, plate.n, a.steps)
