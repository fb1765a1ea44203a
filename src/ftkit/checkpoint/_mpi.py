"""Small collective helpers for the checkpoint layer: never hang on a dead or silent peer.

Every helper runs on ftkit's internal communicator (a duplicate of the application's, with
``MPI.ERRORS_RETURN``), so a failed peer turns into :class:`ProcessFailure` instead of an abort or a hang
(ULFM's failure detector completes pending operations with an error), and every one has a deadline: a peer
that does not answer within ``timeout`` seconds is a :class:`TimeoutFailure`. The waits are
:func:`ftkit._wait.wait_requests` (sleeping polls).

Values exchanged by :func:`allgather` and :func:`bcast` travel as JSON text (strings, numbers, booleans,
None, lists; tuples arrive as lists): nothing received is unpickled. Each travels in one collective round
when its text fits a slot, in two otherwise (:mod:`ftkit.storage._jsonslots`): the checkpoint call's
agreements are one round each, not two (issue 37).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._wait import deadline_after, wait_requests
from ..errors import ProcessFailure
from ..storage._jsonslots import allgather_values, bcast_value

__all__ = ["internal_comm", "internal_comms", "allreduce_int", "all_true", "any_true", "allgather", "bcast",
           "barrier", "as_failure", "DEFAULT_TIMEOUT"]

#: Deadline (s) of the exchanges whose caller gives none.
DEFAULT_TIMEOUT = 600.0
#: s; poll back-off cap of the agreements (issue 37: a call's rounds wait for the slowest rank's write; at a
#: 5 ms cap each round overshot its answer by ~2.5 ms on average, several rounds per call)
_MAX_SLEEP = 1e-3


def internal_comm(comm: Any) -> Any:
    """Return a duplicate of ``comm`` whose errors raise (``MPI.ERRORS_RETURN``) instead of aborting.

    The duplicate carries :data:`ftkit.mpienv.INTERNAL_COMM_INFO` (Open MPI 5: no ``coll/han`` on it; other
    MPIs ignore the hint): see :func:`ftkit.mpienv.internal_info`.
    """
    from mpi4py import MPI

    from ..mpienv import internal_info

    info = internal_info()
    try:
        dup = comm.Dup(info)
    finally:
        info.Free()
    dup.Set_errhandler(MPI.ERRORS_RETURN)
    return dup


def internal_comms(comm: Any, count: int, plain: int, timeout: float, what: str) -> list[Any]:
    """Return ``count`` duplicates of ``comm`` as :func:`internal_comm` makes them, then ``plain`` ones
    without the hints, all made at once (``MPI_Comm_idup``: their context-id agreements overlap) and waited
    for within ``timeout`` seconds; every one raises its errors (``MPI.ERRORS_RETURN``). Collective.

    Each communicator creation is ~0.15-0.2 s across the virtual cluster's hosts however many are made
    together; ``Checkpointer()`` makes its start-up ones in one round this way.

    Raises
    ------
    ProcessFailure, TimeoutFailure
        If a peer failed or did not take part in time (a missing rank is reported, never waited for).
    """
    from mpi4py import MPI

    from ..mpienv import internal_info

    info = internal_info()
    made: list[Any] = []
    requests: list[Any] = []
    try:
        for i in range(count + plain):
            dup, req = comm.Idup(info) if i < count else comm.Idup()
            made.append(dup)
            requests.append(req)
    finally:
        info.Free()
    _run(comm, lambda: requests, timeout, what)
    for dup in made:
        dup.Set_errhandler(MPI.ERRORS_RETURN)
    return made


def as_failure(exc: Exception, comm: Any, what: str) -> ProcessFailure:
    """Turn an MPI exception raised during ``what`` into a ProcessFailure naming the failed ranks if known."""
    failed: list[int] = []
    try:
        group = comm.Get_failed()
        failed = list(group.Translate_ranks(list(range(group.Get_size())), comm.Get_group()))
        group.Free()
    except Exception:  # noqa: BLE001 - not ULFM, or the communicator is unusable: no list then
        pass
    names = f" (failed ranks: {failed})" if failed else ""
    return ProcessFailure(f"{what}: a peer process failed{names}: {exc}", failed)


def _run(comm: Any, start: Any, timeout: float | None, what: str) -> None:
    """Start nonblocking operations (``start()`` returns their requests) and wait for them with a deadline.

    Raises
    ------
    ProcessFailure
        If MPI reports an error (a failed peer, a revoked communicator).
    TimeoutFailure
        If the operations do not complete within ``timeout`` seconds.
    """
    from mpi4py import MPI

    try:
        wait_requests(start(), deadline_after(DEFAULT_TIMEOUT if timeout is None else timeout), what,
                      max_sleep=_MAX_SLEEP)
    except MPI.Exception as exc:
        raise as_failure(exc, comm, what) from exc


def allreduce_int(comm: Any, value: int, op: str, timeout: float, what: str = "agreement") -> int:
    """Reduce one integer over ``comm`` with ``op`` ('min', 'max', 'sum') within ``timeout`` seconds.

    Raises
    ------
    ProcessFailure
        If a peer failed.
    TimeoutFailure
        If the reduction did not complete in time.
    """
    from mpi4py import MPI

    mpi_op = {"min": MPI.MIN, "max": MPI.MAX, "sum": MPI.SUM}[op]
    send = np.array([value], dtype=np.int64)
    recv = np.empty(1, dtype=np.int64)
    _run(comm, lambda: [comm.Iallreduce(send, recv, op=mpi_op)], timeout, what)
    return int(recv[0])


def all_true(comm: Any, flag: bool, timeout: float, what: str = "agreement") -> bool:
    """True on every rank iff ``flag`` is true on every rank."""
    return allreduce_int(comm, int(bool(flag)), "min", timeout, what) == 1


def any_true(comm: Any, flag: bool, timeout: float, what: str = "agreement") -> bool:
    """True on every rank iff ``flag`` is true on some rank."""
    return allreduce_int(comm, int(bool(flag)), "max", timeout, what) == 1


def _waiter(comm: Any, timeout: float | None, what: str) -> Any:
    """A ``wait(request, buffers)`` for :mod:`ftkit.storage._jsonslots`: :func:`_run` on one request."""
    return lambda req, keep: _run(comm, lambda: [req], timeout, what)


def allgather(comm: Any, obj: Any, what: str = "exchange", timeout: float | None = None) -> list[Any]:
    """Gather a small JSON-able value from every rank, within ``timeout`` seconds (default 600).

    One round when every rank's text fits its slot, else a second for the rest
    (:mod:`ftkit.storage._jsonslots`).

    Raises
    ------
    ProcessFailure, TimeoutFailure
        If a peer failed or did not take part in time.
    """
    return allgather_values(comm, obj, _waiter(comm, timeout, what))


def bcast(comm: Any, obj: Any, root: int = 0, what: str = "broadcast", timeout: float | None = None) -> Any:
    """Broadcast a small JSON-able value from ``root`` within ``timeout`` seconds (default 600).

    One round when its text fits a slot, else a second for the rest (:mod:`ftkit.storage._jsonslots`).

    Raises
    ------
    ProcessFailure, TimeoutFailure
        If a peer failed or did not take part in time.
    """
    return bcast_value(comm, obj, root, _waiter(comm, timeout, what))


def barrier(comm: Any, timeout: float, what: str = "barrier") -> None:
    """Wait for every rank, within ``timeout`` seconds."""
    allreduce_int(comm, 0, "max", timeout, what)
