"""A process of the grid failed during a linalg routine: every survivor leaves it with ftkit's
:class:`~ftkit.errors.ProcessFailure`, never a raw MPI error or a wait for the dead.

Under ULFM, MPI tells a rank of a peer's death only in a call that involves the dead: the ranks of its process
row or column learn it, and the others would wait for them for good (measured: ``pdtrsm`` on 2 x 2 with rank 3
killed before the call; rank 0 waited until the launcher's timeout). :func:`names_failures` wraps the public
routines: the first rank to see the failure revokes the grid's communicators, so every other rank's pending
or next call on them fails too, and each raises a ``ProcessFailure`` naming the routine, the failed ranks and
what is left of the output. Only the outermost wrapped routine converts (one that calls another passes
the error up), and none does under :func:`handles_failures` (the ``resilient_`` routines, which survive a
failure on their own and need MPI's errors as they are).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from mpi4py import MPI

from ..errors import ProcessFailure
from ..failure.ulfm import process_failure
from .grid import ProcessGrid
from .matrix import DistributedMatrix

__all__ = ["names_failures", "handles_failures", "grid_failure"]

F = TypeVar("F", bound=Callable[..., Any])

#: True inside a wrapped routine (the outermost one converts) or under :func:`handles_failures`.
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("ftkit_linalg_failures_handled", default=False)


def grid_failure(exc: BaseException, grid: ProcessGrid, what: str) -> ProcessFailure | None:
    """The ``ProcessFailure`` that an MPI error of a routine on ``grid`` means, the grid's communicators
    revoked (so no other rank waits for the dead), or ``None`` if it is not one
    (:func:`ftkit.failure.process_failure`; ``what`` begins the message)."""
    return process_failure(exc, (grid.comm, grid.row_comm, grid.col_comm), what)


def names_failures(routine: str, output: str, survivor: str | None = None) -> Callable[[F], F]:
    """Wrap a public routine so that a process failure during it raises ``ProcessFailure`` on every survivor,
    the grid (its first :class:`DistributedMatrix` argument's) revoked.

    Parameters
    ----------
    routine
        The routine's name in the message.
    output
        The argument it writes (the message says it may be partly written).
    survivor
        The routine that survives such a failure, if there is one (the message points to it).
    """
    left = (f"{output} may be partly written: compute it again from {output}'s original values"
            + (f" ({survivor} survives this)" if survivor else ""))

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _INSIDE.get():
                return fn(*args, **kwargs)
            token = _INSIDE.set(True)
            try:
                return fn(*args, **kwargs)
            except MPI.Exception as exc:
                grid = next((a.grid for a in (*args, *kwargs.values()) if isinstance(a, DistributedMatrix)),
                            None)
                failure = None if grid is None else grid_failure(
                    exc, grid, f"{routine}: a process of the grid failed; {left}")
                if failure is None:
                    raise
                raise failure from exc
            finally:
                _INSIDE.reset(token)
        return wrapper  # type: ignore[return-value]
    return wrap


def handles_failures(fn: F) -> F:
    """Wrap a routine that survives process failures itself: the routines it calls leave MPI's errors as
    they are (no conversion, no revocation)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = _INSIDE.set(True)
        try:
            return fn(*args, **kwargs)
        finally:
            _INSIDE.reset(token)
    return wrapper  # type: ignore[return-value]
