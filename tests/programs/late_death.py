"""The last rank ends by a signal; every other rank ends normally, before it or after it.

``late_death.py PIDFILE ORDER HOW``: the last rank writes its pid to ``PIDFILE`` and then dies: ``HOW``
``kill`` waits (bounded) for the test to SIGKILL it, ``abort`` calls ``os.abort()`` (SIGABRT). ``ORDER``:

``after``
    the other ranks leave first (normally, without ``MPI_Finalize``, which would wait for the last rank), and
    the last rank dies once it has seen every other rank's process gone;
``after-notes``
    the other ranks end their programs (``sys.exit(0)``: their ``exit`` notes, then ``MPI_Finalize``), and
    the last rank dies once it has seen their ``exit`` notes in ``$FTKIT_JOB_STATUS``;
``before``
    the last rank dies first; the others learn of it from MPI (their barrier fails), declare it dead for the
    launcher (as ftkit's repair does), go on on a repaired communicator and end normally.

In the first two, nothing went on without the last rank: the job failed. In the third, it went on.
"""
import os
import sys
import time

from mpi4py import MPI

from ftkit import jobstatus
from ftkit.failure import exit_without_finalize, failed_ranks, repair

pidfile, order, how = sys.argv[1], sys.argv[2], sys.argv[3]
comm = MPI.COMM_WORLD
victim = comm.size - 1
pids = comm.allgather(os.getpid())
BOUND = 120.0


def wait_for(what: str, done) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + BOUND
    while not done():
        if time.monotonic() > deadline:
            print(f"rank {comm.rank}: {what} not seen after {BOUND} s", flush=True)
            os._exit(5)
        time.sleep(0.02)


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def die() -> None:
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pidfile + ".tmp", pidfile)
    if how == "abort":
        os.abort()
    time.sleep(BOUND)  # the test kills this process; if it does not, the rank ends with an error
    print(f"rank {comm.rank}: not killed after {BOUND} s", flush=True)
    os._exit(6)


comm.Barrier()
if comm.rank == victim:
    others = range(victim)
    if order == "after":
        wait_for("the other ranks' end", lambda: all(gone(pids[r]) for r in others))
    elif order == "after-notes":
        notes = {f"exit.{r}.{pids[r]}" for r in others}
        wait_for("the other ranks' exit notes",
                 lambda: notes <= set(os.listdir(os.environ[jobstatus.STATUS_ENV])))
    die()
if order == "after":
    exit_without_finalize(code=0)
if order == "after-notes":
    sys.exit(0)
try:
    comm.Barrier()  # the last rank never enters it: it fails once MPI knows that rank dead
except MPI.Exception:
    pass
else:
    print(f"rank {comm.rank}: the barrier passed without the last rank", flush=True)
    os._exit(7)
dead = failed_ranks(comm)
jobstatus.declare_dead(dead)
survivors = repair(comm, dead)
assert survivors is not None
survivors.Barrier()
print(f"rank {comm.rank} went on without {sorted(dead)}", flush=True)
exit_without_finalize(survivors, code=0)
