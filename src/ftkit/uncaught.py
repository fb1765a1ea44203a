"""One message per error: an uncaught ftkit error of an MPI job is printed once, with its ranks.

ftkit raises the same error on every rank by design; left to Python, an 8-rank job prints 8 identical
tracebacks. :func:`install` (called by every ``Checkpointer``; collective: it duplicates the communicator)
makes :func:`hook` the process's ``sys.excepthook`` in jobs of more than one rank, unless the application
or ftkit already replaced the default hook. On an uncaught :class:`~ftkit.errors.FtkitError`:

1. **Exchange** (:func:`exchange`): the rank sends a digest of its error (type and message) to every other
   rank with nonblocking sends on the duplicated communicator, and collects the others' digests until it has
   every rank's or ``wait`` seconds (default :data:`DEFAULT_WAIT`) have passed. Nothing blocks: a rank
   whose peers raise nothing (they wait in a collective for it, or are dead) stops waiting at the deadline.
2. **Print** (:func:`report`): the errors are grouped by digest; the lowest rank of each group prints its
   traceback once, followed by ``(same on ranks 0-7)`` (or ``(on rank 3)``), and by the ranks that raised
   nothing within the wait, if any. Different errors on different ranks are thus each printed once. Then
   each rank tells the others it has stopped listening, and waits (bounded by the same wait) until every rank
   it heard from has too: a rank that ends its process right away must not die while a peer has still to
   read its digest (a ULFM probe of a failed peer raises even when its message has arrived, and the peer
   would then print the error a second time).
3. **End**: if every rank raised, the process exits as Python does after an uncaught exception (status 1;
   ``MPI_Finalize`` completes, every rank is in it). Otherwise some ranks are still inside MPI calls waiting
   for this one, and ``MPI_Finalize`` would wait for them: the process ends without it (:func:`end_process`:
   a SIGKILL of itself, which a ULFM job's other ranks see as a process failure at once, and a plain job's
   launcher as a failed rank; an exit without ``MPI_Finalize`` is reported to a ULFM job's other ranks only
   after about a minute).

Any other exception, a job of one rank and a process without MPI keep Python's behaviour (one traceback,
status 1). :func:`report` is the reusable piece for another exit hook (the spare-rank hook of
:mod:`ftkit.checkpoint.online.exithook` prints through it).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from . import _shm_segments
from .errors import FtkitError

__all__ = ["DEFAULT_WAIT", "EXIT_CODE", "install", "hook", "report", "exchange", "format_ranks",
           "end_process"]

#: Seconds a rank with an uncaught ftkit error waits for the other ranks' errors.
DEFAULT_WAIT = 2.0
#: Exit status of a process ended by an uncaught error (Python's).
EXIT_CODE = 1
_TAG = 3607
_TAG_DONE = 3608  # "this rank has stopped listening for digests"
_DIGEST = 16   # bytes of a message digest

_comm: Any = None       # the duplicated communicator of the exchange
_source: Any = None     # the communicator it duplicates
_wait = DEFAULT_WAIT
_end: Callable[[], None] | None = None


def install(comm: Any, *, wait: float = DEFAULT_WAIT, end: Callable[[], None] | None = None,
            dup: Any = None) -> None:
    """Make :func:`hook` this process's ``sys.excepthook`` for the ranks of ``comm`` (collective over
    ``comm``: it is duplicated, unless the last call had the same communicator).

    Nothing happens on a communicator of one rank. An excepthook other than Python's default is left in
    place (the application's, or the spare-rank hook of :mod:`ftkit.checkpoint.online.exithook`).

    Parameters
    ----------
    comm
        The ranks whose errors are compared (an ``MPI.Intracomm``).
    wait
        Seconds a rank waits for the others' errors (bounded: an error on some ranks never hangs).
    end
        Called to end the process when not every rank raised (default :func:`end_process`).
    dup
        A duplicate of ``comm`` made by the caller (``Checkpointer()`` makes its start-up communicators in
        one round): used instead of duplicating here (not collective then).
    """
    global _comm, _source, _wait, _end
    if comm.Get_size() < 2:
        return
    if dup is not None or _source is None or _source != comm:
        from mpi4py import MPI

        dup = comm.Dup() if dup is None else dup
        dup.Set_errhandler(MPI.ERRORS_RETURN)
        _comm, _source = dup, comm  # the previous duplicate is not freed: freeing it would be collective
    _wait, _end = float(wait), end
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = hook


def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """``sys.excepthook``: print an uncaught ftkit error once per job (see the module docstring); ends the
    process when some rank did not raise."""
    if not isinstance(exc, FtkitError) or _comm is None:
        sys.__excepthook__(kind, exc, tb)
        return
    try:
        everyone = report(kind, exc, tb)
    except Exception:  # noqa: BLE001 - the hook must not fail: print as Python does
        sys.__excepthook__(kind, exc, tb)
        everyone = False
    if everyone:
        return  # every rank raised: Python exits with status 1, MPI_Finalize has every rank
    (_end or end_process)()


def report(kind: type[BaseException], exc: BaseException, tb: TracebackType | None, *,
           comm: Any = None, wait: float | None = None) -> bool:
    """Print ``exc`` once per job on standard error; return whether every rank of ``comm`` raised an error.

    An ftkit error is exchanged over ``comm`` (default: the one :func:`install` duplicated) for at most
    ``wait`` seconds and printed by the lowest rank that raised it, with its ranks; anything else (or no
    communicator) is printed as Python prints it, and False is returned.
    """
    comm = _comm if comm is None else comm
    if not isinstance(exc, FtkitError) or comm is None or _finalized():
        traceback.print_exception(kind, exc, tb)
        return False
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = _digest(kind, exc)
    heard = exchange(comm, mine, _wait if wait is None else wait)
    same = sorted({rank, *(r for r, d in heard.items() if d == mine)})
    if same[0] == rank:
        silent = sorted(set(range(size)) - {rank} - set(heard))
        where = f"same on {format_ranks(same)}" if len(same) > 1 else f"on {format_ranks(same)}"
        if silent:
            where += (f"; no error from {format_ranks(silent)} within "
                      f"{_wait if wait is None else wait:g} s")
        text = "".join(traceback.format_exception(kind, exc, tb))
        sys.stderr.write(f"{text}({where})\n")
    sys.stderr.flush()
    _post(comm, bytearray(1), _TAG_DONE, sorted(heard), _wait if wait is None else wait)
    return len(heard) == size - 1


def exchange(comm: Any, digest: bytes, wait: float) -> dict[int, bytes]:
    """Send ``digest`` to every other rank of ``comm`` and collect theirs for at most ``wait`` seconds.

    Nonblocking sends and per-source probes only (a dead or silent rank is skipped, never waited for
    beyond the deadline). Returns the digests heard, by rank.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    return _post(comm, bytearray(digest), _TAG, [r for r in range(size) if r != rank], wait)


def _post(comm: Any, message: bytearray, tag: int, expect: Sequence[int], wait: float) -> dict[int, bytes]:
    """Send ``message`` to every other rank of ``comm`` with ``tag`` and collect the messages of that tag (of
    ``message``'s size) from the ranks ``expect`` for at most ``wait`` seconds; returns them by rank."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    sends = []
    for dest in range(size):
        if dest != rank:
            try:
                sends.append(comm.Isend([message, MPI.BYTE], dest, tag))
            except MPI.Exception:
                pass  # a dead rank: it will not answer either
    heard: dict[int, bytes] = {}
    pending = list(expect)
    deadline = time.monotonic() + wait
    pause = 1e-4
    while pending and time.monotonic() < deadline:
        pending = _receive(comm, pending, heard, tag, len(message))
        if pending:
            time.sleep(pause)
            pause = min(2 * pause, 0.01)
    _settle(sends, deadline)
    return heard


def _receive(comm: Any, pending: Sequence[int], heard: dict[int, bytes], tag: int, nbytes: int) -> list[int]:
    """Take the messages of ``tag`` that arrived from ``pending`` ranks into ``heard``; return the ranks still
    pending."""
    from mpi4py import MPI

    left = []
    for src in pending:
        try:
            if not comm.Iprobe(src, tag):
                left.append(src)
                continue
            buf = bytearray(nbytes)
            comm.Recv([buf, MPI.BYTE], src, tag)
            heard[src] = bytes(buf)
        except MPI.Exception:
            pass  # a failed rank (ULFM): it raises nothing any more
    return left


def _settle(sends: list[Any], deadline: float) -> None:
    """Let the sends complete until ``deadline`` (small messages complete at once); never raises."""
    from mpi4py import MPI

    try:
        while sends and not MPI.Request.Testall(sends) and time.monotonic() < deadline:
            time.sleep(1e-3)
    except MPI.Exception:
        pass


def format_ranks(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0-7`` or ``ranks 0-2, 5, 7`` (``ranks`` sorted)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def end_process() -> None:
    """End this process without ``MPI_Finalize`` (which would wait for ranks still inside MPI calls): a
    SIGKILL of itself, so the other ranks of a ULFM job see a process failure at once."""
    _shm_segments.remove_leftovers()  # a singleton's files (MPI_Finalize would not remove them either)
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(EXIT_CODE)


def _digest(kind: type[BaseException], exc: BaseException) -> bytes:
    key = f"{kind.__module__}.{kind.__qualname__}: {exc}"
    return hashlib.blake2b(key.encode("utf-8", "replace"), digest_size=_DIGEST).digest()


def _finalized() -> bool:
    try:
        from mpi4py import MPI

        return bool(MPI.Is_finalized()) or not MPI.Is_initialized()
    except Exception:  # noqa: BLE001 - no usable MPI: Python's behaviour
        return True
