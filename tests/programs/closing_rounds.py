"""Survivors leaving together, round after round: the reproducer of the "ERR_PROC_FAILED at the end of a
recovered job" (issue 17).

One process is SIGKILLed at start; the others shrink. Each round, the two highest ranks of the current
communicator leave (their process exits without ``MPI_Finalize``, as
:func:`ftkit.failure.exit_without_finalize` does) right after the closing synchronization; the others (slow
inside it: ``--lag``) go on to the next round on a communicator without them, split beforehand. The last
round's ranks all leave. Every rank writes ``<dir>/round<k>.<world rank>``: ``ok`` if its closing
synchronization completed without reporting a failure, else what it reported. A leaver that exits while
another rank is still inside the synchronization is a process failure to that rank: a barrier then fails on
a communicator whose members all finished; ``--closing agree`` (:func:`ftkit.failure.ulfm.agree_to_leave`)
must not.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from mpi4py import MPI

from ftkit.failure import ulfm

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--closing", choices=("agree", "barrier"), default="agree")
p.add_argument("--lag", type=float, default=0.3,
               help="seconds a staying rank spends inside the synchronization before it waits for it (a rank "
                    "descheduled on a loaded machine)")
a = p.parse_args()
out = Path(a.dir)
me = MPI.COMM_WORLD.Get_rank()
world = MPI.COMM_WORLD.Dup()
world.Set_errhandler(MPI.ERRORS_RETURN)
if me == world.Get_size() - 1:
    os.kill(os.getpid(), signal.SIGKILL)  # a job that outlived a failure, as after an online recovery
comm = world.Shrink()  # collective over the survivors: returns once the dead rank is known to all
comm.Set_errhandler(MPI.ERRORS_RETURN)


def lagging(wait):  # type: ignore[no-untyped-def]
    """``wait`` that first sleeps ``--lag`` seconds: the synchronization has started, this rank is slow."""
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(a.lag)
        return wait(*args, **kwargs)
    return call


def close(c: MPI.Intracomm, lag: bool) -> str:
    if a.closing == "agree":
        poll = ulfm.poll_until
        ulfm.poll_until = lagging(poll) if lag else poll
        try:
            return "ok" if ulfm.agree_to_leave(c, timeout=60.0) else "agreement reported a failure"
        finally:
            ulfm.poll_until = poll
    try:
        req = c.Ibarrier()
        (lagging(req.Wait) if lag else req.Wait)()
        return "ok"
    except MPI.Exception as exc:
        return f"barrier: {exc.Get_error_string()}"


k = 0
while True:
    size, rank = comm.Get_size(), comm.Get_rank()
    leaving = size <= 2 or rank >= size - 2
    stay = comm.Split(MPI.UNDEFINED if leaving else 0, rank)
    outcome = close(comm, lag=not leaving)
    (out / f"round{k}.{me}").write_text(outcome)
    if leaving:
        sys.stdout.flush()
        os._exit(0)
    comm, k = stay, k + 1
