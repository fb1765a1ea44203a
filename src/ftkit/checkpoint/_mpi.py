"""Small collective helpers for the checkpoint layer: never hang on a dead peer.

Every helper runs on ftkit's internal communicator (a duplicate of the application's, with
``MPI.ERRORS_RETURN``), so a failed peer turns into :class:`ProcessFailure` instead of an abort or a
hang (ULFM's failure detector completes pending operations with an error). Integer reductions also poll
with a deadline and raise :class:`TimeoutFailure` when a peer does not answer within ``timeout`` seconds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import ProcessFailure, TimeoutFailure

__all__ = ["internal_comm", "allreduce_int", "all_true", "any_true", "allgather", "bcast", "barrier",
           "as_failure"]


def internal_comm(comm: Any) -> Any:
    """Return a duplicate of ``comm`` whose errors raise (``MPI.ERRORS_RETURN``) instead of aborting."""
    from mpi4py import MPI

    dup = comm.Dup()
    dup.Set_errhandler(MPI.ERRORS_RETURN)
    return dup


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
    try:
        req = comm.Iallreduce(send, recv, op=mpi_op)
        deadline = time.monotonic() + timeout
        delay = 1e-5
        while not req.Test():
            if time.monotonic() > deadline:
                raise TimeoutFailure(f"{what}: no answer from every rank within {timeout:g} s "
                                     "(raise failure_timeout if ranks are just slow)")
            time.sleep(delay)
            delay = min(delay * 2, 0.005)
    except Exception as exc:
        if isinstance(exc, ProcessFailure):
            raise
        from mpi4py import MPI as _MPI

        if isinstance(exc, _MPI.Exception):
            raise as_failure(exc, comm, what) from exc
        raise
    return int(recv[0])


def all_true(comm: Any, flag: bool, timeout: float, what: str = "agreement") -> bool:
    """True on every rank iff ``flag`` is true on every rank."""
    return allreduce_int(comm, int(bool(flag)), "min", timeout, what) == 1


def any_true(comm: Any, flag: bool, timeout: float, what: str = "agreement") -> bool:
    """True on every rank iff ``flag`` is true on some rank."""
    return allreduce_int(comm, int(bool(flag)), "max", timeout, what) == 1


def allgather(comm: Any, obj: Any, what: str = "exchange") -> list[Any]:
    """Gather a small Python value (str, int, tuple...) from every rank; ProcessFailure if a peer failed."""
    from mpi4py import MPI

    try:
        return list(comm.allgather(obj))
    except MPI.Exception as exc:
        raise as_failure(exc, comm, what) from exc


def bcast(comm: Any, obj: Any, root: int = 0, what: str = "broadcast") -> Any:
    """Broadcast a small Python value from ``root``; ProcessFailure if a peer failed."""
    from mpi4py import MPI

    try:
        return comm.bcast(obj, root=root)
    except MPI.Exception as exc:
        raise as_failure(exc, comm, what) from exc


def barrier(comm: Any, timeout: float, what: str = "barrier") -> None:
    """Wait for every rank, within ``timeout`` seconds."""
    allreduce_int(comm, 0, "max", timeout, what)
