"""``ckpt.comm`` with online recovery: :class:`AppComm`, an ``MPI.Intracomm`` whose blocking calls survive a
process failure inside ``steps()`` (the repair starts, the rest of the iteration is fenced: :mod:`.fence`).

Each AppComm belongs to one session (:func:`guard`): a failure in one of its calls repairs that session.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from ...errors import ProcessFailure
from ...failure.detect import is_failure_error
from ..session import Session
from . import fence
from .repair import on_failure

__all__ = ["AppComm", "guard"]

_P2P = ("Send", "Ssend", "Bsend", "Rsend", "Recv", "Sendrecv", "Sendrecv_replace", "Probe",
        "send", "ssend", "bsend", "recv", "sendrecv", "probe")
_COLL = ("Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
         "Alltoall", "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter",
         "Reduce_scatter_block", "Scan", "Exscan", "barrier", "bcast", "gather", "scatter", "allgather",
         "alltoall", "reduce", "allreduce", "scan", "exscan")


def _sendrecv(comm: Any, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
              source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG, status: Any = None) -> None:
    """``MPI.Intracomm.Sendrecv``, but a plain send when ``source`` is ``PROC_NULL`` (the edge of a halo
    exchange): Open MPI 5.0's MPI_Sendrecv then cancels an uninitialised request when the send fails with
    anything but ERR_PROC_FAILED (a revoked communicator) and the process dies of a segfault."""
    if source != MPI.PROC_NULL or dest == MPI.PROC_NULL:
        return MPI.Intracomm.Sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
    MPI.Intracomm.Send(comm, sendbuf, dest, sendtag)
    if status is not None:  # what a receive from PROC_NULL reports
        status.source, status.tag, status.error = MPI.PROC_NULL, MPI.ANY_TAG, MPI.SUCCESS
        status.Set_elements(MPI.BYTE, 0)
    return None


# mpi4py's object reductions (lowercase ``allreduce``, ``reduce``, ``scan``, ``exscan``) run point to point on
# a duplicate of the communicator that mpi4py keeps hidden, which a repair's revoke of ckpt.comm cannot reach:
# a rank waiting there for a survivor that had started the repair waited forever (the survivor waited for it
# in the shrink). These gather the objects on ckpt.comm itself and reduce them in rank order.


def _allreduce(comm: Any, sendobj: Any, op: Any = MPI.SUM) -> Any:
    return functools.reduce(op, MPI.Intracomm.allgather(comm, sendobj))


def _reduce(comm: Any, sendobj: Any, op: Any = MPI.SUM, root: int = 0) -> Any:
    objs = MPI.Intracomm.gather(comm, sendobj, root)
    return None if objs is None else functools.reduce(op, objs)


def _scan(comm: Any, sendobj: Any, op: Any = MPI.SUM) -> Any:
    return functools.reduce(op, MPI.Intracomm.allgather(comm, sendobj)[:comm.Get_rank() + 1])


def _exscan(comm: Any, sendobj: Any, op: Any = MPI.SUM) -> Any:
    below = MPI.Intracomm.allgather(comm, sendobj)[:comm.Get_rank()]
    return functools.reduce(op, below) if below else None


_ON_COMM: dict[str, Callable[..., Any]] = {"Sendrecv": _sendrecv, "allreduce": _allreduce, "reduce": _reduce,
                                            "scan": _scan, "exscan": _exscan}


#: What unpickling a peer's part of an object collective raises when its bytes never arrived: with ULFM the
#: call can return on one rank (no error) with the part of a peer that died in it left unwritten (zero
#: bytes: "invalid load key, '\\x00'", seen in an allreduce when a node's two ranks were killed at once).
#: In the loop that rank did not complete the call: the agreement after it says so to every rank.
_UNREADABLE = (pickle.UnpicklingError, EOFError)


def _guarded(name: str) -> Callable[..., Any]:
    base = _ON_COMM.get(name) or getattr(MPI.Intracomm, name)
    agreed = name in _COLL

    def method(self: AppComm, *args: Any, **kwargs: Any) -> Any:
        session = self.session
        state = session.online if session is not None else None
        if state is not None and state.fenced:
            fence.check_left(state)
            return fence.fenced_result(self, name, args, kwargs)
        in_loop = agreed and state is not None and state.in_loop
        completed, result = True, None
        try:
            result = base(self, *args, **kwargs)
        except MPI.Exception as exc:
            if session is None or state is None or not is_failure_error(exc):
                raise
            on_failure(session, exc, f"ckpt.comm.{name}")
            return fence.fenced_result(self, name, args, kwargs)
        except _UNREADABLE:
            if not (in_loop and name.islower()):
                raise
            completed = False
        if session is not None and in_loop and not fence.all_completed(self, session.config.failure_timeout,
                                                                       completed):
            on_failure(session, ProcessFailure(f"ckpt.comm.{name}: not completed on every rank"),
                       f"ckpt.comm.{name}")
            return fence.fenced_result(self, name, args, kwargs)
        return result

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


class AppComm(MPI.Intracomm):
    """``ckpt.comm`` with spares: an ``MPI.Intracomm`` whose blocking communication survives a failure.

    Inside ``ckpt.steps()``, a call that fails because a process died starts the repair and returns; the
    rest of the iteration's calls return at once (fenced: neutral results, NaN for numbers, see
    :mod:`.fence`) and the next iteration restores the data. Collectives are followed by an agreement,
    so a result returned on one rank was returned on every rank. The object reductions (``allreduce``,
    ``reduce``, ``scan``, ``exscan``) gather the objects and reduce them in rank order (mpi4py's own run on a
    hidden communicator that a repair cannot interrupt). Outside the loop the failure is raised as
    :class:`~ftkit.errors.ProcessFailure`. Nonblocking calls and communicators derived from this one
    (``Dup``, ``Split``) are not guarded: use blocking calls on ``ckpt.comm`` in the loop.
    """

    #: The session whose communicator this is (a failure repairs it): set by :func:`guard`.
    session: Session | None = None

    @classmethod
    def wrap(cls, comm: Any) -> AppComm:
        """An AppComm on ``comm``'s handle (not yet guarded: see :func:`guard`); errors return instead of
        aborting."""
        app = cls(comm)
        app.Set_errhandler(MPI.ERRORS_RETURN)
        return app


for _name in _P2P + _COLL:
    setattr(AppComm, _name, _guarded(_name))
del _name


def guard(session: Session, comm: Any = None) -> Session:
    """``session`` with its communicator (or ``comm``) as an :class:`AppComm` that repairs the new session."""
    app = AppComm.wrap(session.comm if comm is None else comm)
    guarded = dataclasses.replace(session, comm=app)
    app.session = guarded
    return guarded
