"""The collective machinery of encoded groups: an error guard, error agreement, a worker thread, a polling
allgather.

The rule every group operation follows: a member that hits an error (an I/O error, a damaged file, any
exception) does not leave the collective loop -- that would leave the other members waiting in the next
collective forever. It records the error in an :class:`ErrorGuard`, keeps taking part with stale buffers,
and at the end :func:`agree_errors` shares every member's error so that all members raise the same ftkit
error, naming each member and its cause.

Deadlines: every collective is non-blocking and waited for at most ``timeout`` seconds
(:func:`wait_collective`; ``timeout`` is the caller's, e.g. the configuration's ``failure_timeout``). A
member that is alive but stuck (a hung file system, a stopped process) makes every other member raise
:class:`~ftkit.errors.TimeoutFailure` (as L2 does), and itself too once it goes on: the collective after the
one the others abandoned finds nobody. An abandoned collective stays posted, so the communicator's
collectives are out of step after a TimeoutFailure: it must not be used for group operations again.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._wait import deadline_after, wait_requests
from ...errors import FtkitError, StorageError, TimeoutFailure
from .._jsonslots import allgather_values
from .._writeback import KeptThread

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["ErrorGuard", "agree_errors", "encode_message", "decode_message", "MESSAGE_BYTES", "member_names",
           "open_or_none", "close_fd", "Worker", "allgather_in_place", "send_to_all", "allgather_json",
           "wait_collective",
           "POLL_MAX_SLEEP"]

PathLike = str | os.PathLike[str]

#: Longest sleep (seconds) between two tests of a pending chunk exchange (0: test without sleeping).
POLL_MAX_SLEEP = 5e-4
#: Collectives abandoned at their deadline, with their buffers: MPI completes them if the late member comes
#: back, and writes into the buffers then, so they must outlive the call.
_ABANDONED: list[tuple[Any, tuple[Any, ...]]] = []
#: Bytes of an error message exchanged between members (longer messages are cut).
MESSAGE_BYTES = 1024
_MSG = MESSAGE_BYTES


class ErrorGuard:
    """Remember the first error raised inside ``with guard:`` blocks instead of leaving the loop.

    Any :class:`Exception` is caught (a parse error on one member must become an error on every member,
    not a hang); ``KeyboardInterrupt`` and ``SystemExit`` pass.
    """

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __enter__(self) -> ErrorGuard:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if not isinstance(ev, Exception):
            return False
        if self.error is None:
            self.error = ev
        return True

    @property
    def ok(self) -> bool:
        """True while no error was recorded."""
        return self.error is None


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, (FtkitError, OSError)) else f"{type(exc).__name__}: {exc}"


def member_names(names: Sequence[str] | None, n: int) -> list[str]:
    """``names`` as a list, or ``member 0`` ... ``member n-1``."""
    return list(names) if names is not None else [f"member {m}" for m in range(n)]


def agree_errors(comm: MPI.Comm, guard: ErrorGuard, what: str, names: Sequence[str] | None,
                 exc_type: type[FtkitError] = StorageError, timeout: float | None = None) -> None:
    """Share every member's recorded error (collective); raise ``exc_type`` on every member if any failed.

    Parameters
    ----------
    timeout
        Seconds to wait for the other members (None: no deadline, for groups whose failures another
        mechanism reports).

    Raises
    ------
    FtkitError
        Of type ``exc_type``, naming each failed member and its error (each cut to 1000 bytes).
    TimeoutFailure
        If some member does not take part before the deadline.
    """
    n = comm.Get_size()
    mine = encode_message(None if guard.ok else _describe(guard.error))  # type: ignore[arg-type]
    every = np.empty(n * _MSG, np.uint8)
    wait_collective(comm.Iallgather(mine, every), (mine, every), timeout, f"{what}: agreeing on errors")
    bad = [(m, decode_message(every[m * _MSG:(m + 1) * _MSG])) for m in range(n) if every[(m + 1) * _MSG - 1]]
    if bad:
        nm = member_names(names, n)
        raise exc_type(f"{what} failed: " + "; ".join(f"{nm[m]}: {e}" for m, e in bad))


def encode_message(text: str | None) -> np.ndarray:
    """A fixed-size buffer (:data:`MESSAGE_BYTES`) holding ``text`` (cut), or an empty one for None."""
    buf = np.zeros(_MSG, np.uint8)
    if text is not None:
        blob = text.encode(errors="replace")[:_MSG - 1]
        buf[:len(blob)] = np.frombuffer(blob, np.uint8)
        buf[-1] = 1
    return buf


def decode_message(buf: np.ndarray) -> str | None:
    """Inverse of :func:`encode_message`."""
    if not buf[-1]:
        return None
    return bytes(buf[:-1]).rstrip(b"\0").decode(errors="replace")


def open_or_none(path: PathLike | None) -> int:
    """Open ``path`` read-only; -1 for None."""
    return os.open(path, os.O_RDONLY) if path is not None else -1


def close_fd(fd: int) -> None:
    """Close ``fd`` unless it is -1."""
    if fd >= 0:
        os.close(fd)


def wait_collective(req: Any, keep: tuple[Any, ...], timeout: float | None, what: str) -> None:
    """Wait for a non-blocking collective at most ``timeout`` seconds, sleeping between tests.

    Parameters
    ----------
    req
        The collective's request.
    keep
        Its buffers: kept alive for good if the collective is abandoned at the deadline.
    timeout
        Seconds (None: no deadline, for groups whose failures another mechanism reports).
    what
        What is waited for, for the error message.

    Raises
    ------
    TimeoutFailure
        If some member does not take part before the deadline (the collective is abandoned).
    mpi4py.MPI.Exception
        If MPI completes it in error (a failed member, with ULFM).
    """
    try:
        wait_requests([req], deadline_after(timeout), what, max_sleep=POLL_MAX_SLEEP)
    except TimeoutFailure:
        _ABANDONED.append((req, keep))
        raise


def allgather_in_place(comm: MPI.Comm, buf: np.ndarray, timeout: float | None, what: str) -> None:
    """``Allgather(IN_PLACE, buf)`` with a deadline, sleeping while it waits instead of spinning on a core.

    With ranks sharing cores (and the worker thread encoding the previous chunk) MPI's spinning wait
    steals the CPU the peers need. A failed peer surfaces as an MPI error of the request.

    Raises
    ------
    TimeoutFailure
        If some member does not take part within ``timeout`` seconds.
    """
    from mpi4py import MPI

    wait_collective(comm.Iallgather(MPI.IN_PLACE, buf), (buf,), timeout, what)


def send_to_all(comm: MPI.Comm, row: np.ndarray, gathered: np.ndarray, me: int, timeout: float | None,
                what: str) -> None:
    """Every member's ``row`` into its slot of ``gathered`` (``n`` rows), as an allgather, but sent from
    ``row`` wherever it lies (e.g. the caller's own memory): this member's slot is left untouched.

    An ``Alltoallv`` with every send displacement 0 (the one row to every other member), waited for as
    :func:`wait_collective` does. ``row`` must not lie inside ``gathered``: Open MPI's non-blocking
    collectives treat a send buffer at the receive buffer's address as ``IN_PLACE`` (they would send
    ``gathered``'s other slots).

    Raises
    ------
    TimeoutFailure
        If some member does not take part within ``timeout`` seconds.
    """
    from mpi4py import MPI

    n, lc = comm.Get_size(), row.nbytes
    counts = [0 if m == me else lc for m in range(n)]
    req = comm.Ialltoallv([row, (counts, [0] * n), MPI.BYTE],
                          [gathered, (counts, [m * lc for m in range(n)]), MPI.BYTE])
    wait_collective(req, (row, gathered), timeout, what)


def allgather_json(comm: MPI.Comm, value: Any, timeout: float | None, what: str) -> list[Any]:
    """Every member's ``value`` (JSON: numbers, strings, lists, dicts, None), in member order (collective).

    One non-blocking collective when every member's text fits its slot, else two
    (:mod:`ftkit.storage._jsonslots`), each waited for at most ``timeout`` seconds; what peers send is only
    ever parsed as JSON.

    Raises
    ------
    TimeoutFailure
        If some member does not take part in time.
    """
    return allgather_values(comm, value, lambda req, keep: wait_collective(req, keep, timeout, what))


class Worker:
    """Jobs run in submission order by the process's kept thread of that name
    (:class:`~ftkit.storage._writeback.KeptThread`: a thread started per call cost the call 4-13 ms on a
    loaded machine, issue 37); :meth:`wait` waits for the job of one buffer set.

    Jobs run in order (the parity hash is fed chunk by chunk). An exception in a job is re-raised by the
    caller's next :meth:`wait`; later jobs are skipped.
    """

    def __init__(self, name: str = "ftkit-l3-encode") -> None:
        self._cv = threading.Condition()
        self._busy: set[int] = set()
        self._error: BaseException | None = None
        with _KEPT_LOCK:
            self._thread = _KEPT.setdefault(name, KeptThread(name))

    def _job(self, b: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            if self._error is None:
                fn(*args)
        except BaseException as exc:  # handed to the caller by wait()
            self._error = exc
        finally:
            with self._cv:
                self._busy.discard(b)
                self._cv.notify_all()

    def submit(self, b: int, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)`` as the job of buffer set ``b``."""
        with self._cv:
            self._busy.add(b)
        self._thread.put(functools.partial(self._job, b, fn, args))

    def wait(self, b: int) -> None:
        """Wait until buffer set ``b`` is free; re-raise a job's exception."""
        with self._cv:
            while b in self._busy:
                self._cv.wait()
        if self._error is not None:
            raise self._error

    def wait_all(self) -> None:
        """Wait until every queued job is done; re-raise a job's exception."""
        with self._cv:
            while self._busy:
                self._cv.wait()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Wait until every queued job is done (the buffers are free); never raises. The thread is kept."""
        with self._cv:
            while self._busy:
                self._cv.wait()


#: The kept worker threads, by name (see :class:`Worker`).
_KEPT: dict[str, KeptThread] = {}
_KEPT_LOCK = threading.Lock()
