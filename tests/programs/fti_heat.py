"""FTI's heat-distribution loop ported as it is (issue 30, J7/J8): ``snapshot()`` at the TOP of the body,
where FTI's examples call ``FTI_Snapshot``, and a convergence ``if globalerror < PRECISION: break`` after an
allreduce of the local errors.

Every application rank writes ``<dir>/pid.<rank>``; rank 0 writes ``<dir>/progress`` (the last step whose
allreduce it passed). ``--wait-at S --wait-for FILE``: every original rank waits in step S, after its work
and before the allreduce, until FILE exists (at most 120 s), so the driver can kill a rank there.
``--crash-at S``: every rank ends without finalize at the top of step S, after the snapshot (a relaunch
recovers).
``--die-at S --die-ranks R,..``: those original ranks SIGKILL themselves at the top of step S, after the
snapshot (their neighbours' halo exchange fails, the other ranks reach the allreduce).
``--unreadable-at S --unreadable-rank R``: in step S the original rank R gives the allreduce an object that no
peer can unpickle (``UnpicklingError``), and dies (SIGKILL) as it unpickles it itself: the part of a rank
that died in the collective, as ULFM can leave it unwritten on a survivor whose call returned.
``--pause S``: sleep S seconds per step. ``--nan-converges``: the test is written
``if not globalerror >= PRECISION: break``, which a NaN passes.

Output on rank 0: ``recovery dead=[..] ckpt=<id> level=<L>`` per online recovery, ``steps <k>`` (steps run
when the loop ended), ``digest <hex>`` of the final field, and ``reference <k> <hex>``: the same loop run
serially. An ``OnlineRecoveryError`` is written to ``<dir>/online-error.rank<r>`` and the process exits
with 3.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import _online  # noqa: E402
import heat  # noqa: E402

import ftkit  # noqa: E402
from ftkit.failure import exit_without_finalize  # noqa: E402

p = _online.parser()
p.add_argument("--precision", type=float, default=1e-3)
p.add_argument("--wait-at", type=int, default=-1)
p.add_argument("--wait-for", default=None)
p.add_argument("--crash-at", type=int, default=-1)
p.add_argument("--nan-converges", action="store_true")
p.add_argument("--die-at", type=int, default=-1)
p.add_argument("--die-ranks", default="")
p.add_argument("--unreadable-at", type=int, default=-1)
p.add_argument("--unreadable-rank", type=int, default=-1)
a = p.parse_args()
out = Path(a.dir)


def _unreadable(pid: int) -> float:
    if pid == os.getpid():  # the sender, reading its own part back: it dies in the collective
        os.kill(os.getpid(), signal.SIGKILL)
    raise pickle.UnpicklingError("invalid load key, '\\x00'.")


class Unreadable:
    """An allreduce contribution whose bytes unpickle on no peer (see ``--unreadable-at``)."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return _unreadable, (os.getpid(),)


def serial(n: int, steps: int, precision: float) -> tuple[int, np.ndarray]:
    """The same loop on one process: the steps run and the final field."""
    u = heat.initial_band(n, 0, n)
    for step in range(steps):
        old = u[1:-1].copy()
        heat.jacobi_rows(u, 0, n)
        if float(np.max(np.abs(u[1:-1] - old))) < precision:
            return step + 1, u[1:-1].copy()
    return steps, u[1:-1].copy()


ckpt = _online.start(a.config, out)
comm = ckpt.comm
original = ckpt._session.online is None or not ckpt._session.online.fresh
(out / f"pid.{comm.rank}").write_text(str(os.getpid()))
n = a.size
start, stop = heat.row_band(n, comm.size, comm.rank)
u = heat.initial_band(n, start, stop)
ckpt.protect("u", u)
ran = 0
try:
    for step in ckpt.steps(a.steps):
        ckpt.snapshot()                              # FTI_Snapshot(), at the top of the body
        if step == a.crash_at:
            exit_without_finalize(ckpt.comm, 0)
        if step == a.die_at and original and str(ckpt.comm.rank) in a.die_ranks.split(","):
            os.kill(os.getpid(), signal.SIGKILL)
        comm = ckpt.comm
        heat.exchange_halos(comm, u)
        old = u[1:-1].copy()
        heat.jacobi_rows(u, start, n)
        localerror = float(np.max(np.abs(u[1:-1] - old)))
        time.sleep(a.pause)
        if step == a.wait_at and original:
            deadline = time.monotonic() + 120
            while not Path(a.wait_for).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        if step == a.unreadable_at and original and comm.rank == a.unreadable_rank:
            localerror = Unreadable()  # type: ignore[assignment]
        globalerror = comm.allreduce(localerror, op=MPI.MAX)
        if comm.rank == 0:
            (out / "progress").write_text(str(step))
        ran = step + 1
        if (not globalerror >= a.precision) if a.nan_converges else globalerror < a.precision:
            break
    comm = ckpt.comm
    counts = [(heat.row_band(n, comm.size, r)[1] - heat.row_band(n, comm.size, r)[0]) * n
              for r in range(comm.size)]
    field = np.empty((n, n)) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(u[1:-1]), [field, counts] if comm.rank == 0 else None, root=0)
    reports = ckpt.recoveries
    ckpt.finalize()
except ftkit.OnlineRecoveryError as exc:
    (out / f"online-error.rank{ckpt.rank}").write_text(str(exc))
    exit_without_finalize(None, 3)
if comm.rank == 0:
    for r in reports:
        print(f"recovery dead={list(r.dead)} ckpt={r.checkpoint_id} level={r.level}", flush=True)
    k, ref = serial(n, a.steps, a.precision)
    print(f"steps {ran}\ndigest {heat.digest(field)}\nreference {k} {heat.digest(ref)}", flush=True)
if reports:
    exit_without_finalize(comm, 0)
