"""Replacing failed ranks with spare processes: the ULFM repair behind online recovery.

The job's processes are the *world* (application ranks and idle spares, on one error-returning
communicator). When an application rank dies, every live process calls :func:`rebuild` on the world:

1. the world is revoked (an idle spare's pending receive completes in error, so it joins);
2. ``Shrink`` leaves the live processes; they exchange their roles (application rank or spare) and agree,
   with ULFM's fault-tolerant ``Agree``, that every one of them got the same roster. A failure that
   strikes here starts the round again on the shrunk communicator (bounded: each round needs a new death);
3. each dead application rank gets a spare (the lowest world position first), and a ``Split`` keyed by
   application rank makes the new application communicator: same size, same rank order, the spare holding
   the dead rank's number.

Everything here is a fault-tolerant collective over the live processes of the world, and every plain
collective is followed by an agreement on its outcome, so no process goes on alone with a half-built
communicator. This module knows processes and communicators only, not checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from mpi4py import MPI

from .. import jobstatus
from .._wait import deadline_after, wait_requests
from ..errors import ProcessFailure
from .detect import is_failure_error
from .ulfm import agree_flag, bounded, revoke, shrink

T = TypeVar("T")

__all__ = ["SPARE", "Rebuilt", "plan_roles", "rebuild", "app_comm", "attempt"]

#: Role of an idle spare in the roster (application ranks are 0..napp-1).
SPARE = -1


@dataclass(frozen=True)
class Rebuilt:
    """The outcome of one :func:`rebuild`, the same on every live process (but ``app``/``app_rank``).

    Attributes
    ----------
    world
        The live processes (application ranks and spares), error-returning: the world of the next repair.
    app
        The new application communicator (``napp`` ranks, same rank order), or None on a spare still idle
        and when no replacement was possible.
    app_rank
        This process's application rank in ``app`` (-1 on an idle spare).
    replaced
        Dead application rank -> world position (in ``world``) of the spare that took its place.
    dead
        Application ranks that died (sorted).
    missing
        Dead application ranks no spare was left for (sorted; empty when every one was replaced).
    survivors
        Application ranks that were alive before the failure and still are (sorted).
    spares
        World positions (in ``world``) of the spares still idle.
    roster
        Role of each process of ``world`` before the promotion (application rank or :data:`SPARE`).
    """

    world: MPI.Intracomm
    app: MPI.Intracomm | None
    app_rank: int
    replaced: dict[int, int]
    dead: tuple[int, ...]
    missing: tuple[int, ...]
    survivors: tuple[int, ...]
    spares: tuple[int, ...]
    roster: tuple[int, ...] = ()


def plan_roles(roster: Sequence[int], napp: int) -> tuple[dict[int, int], tuple[int, ...], tuple[int, ...]]:
    """Assign spares to dead application ranks.

    Parameters
    ----------
    roster
        Role of each live process, by world position: its application rank, or :data:`SPARE`.
    napp
        Number of application ranks the job started with.

    Returns
    -------
    replaced, missing, idle
        Dead rank -> world position of its spare; dead ranks left without a spare; idle spares' positions.
    """
    alive = {r for r in roster if r != SPARE}
    dead = sorted(set(range(napp)) - alive)
    spares = [pos for pos, r in enumerate(roster) if r == SPARE]
    replaced = dict(zip(dead, spares, strict=False))
    return replaced, tuple(dead[len(spares):]), tuple(spares[len(replaced):])


def _roster(comm: MPI.Intracomm, role: int, timeout: float) -> list[int]:
    """Every live process's role (collective over ``comm``, with a deadline)."""
    mine = np.array([role], np.int64)
    out = np.empty(comm.Get_size(), np.int64)
    wait_requests([comm.Iallgather(mine, out)], deadline_after(timeout), "spare promotion: roster")
    return [int(x) for x in out]


def rebuild(world: MPI.Intracomm, role: int, napp: int, timeout: float,
            *, max_rounds: int | None = None) -> Rebuilt:
    """Replace the dead application ranks of ``world`` with spares (fault-tolerant collective).

    Call it on every live process of ``world``: application ranks with ``role`` = their application rank,
    idle spares with :data:`SPARE`. ``world`` is revoked first.

    Parameters
    ----------
    world
        Error-returning communicator of every process of the job (it may be revoked already).
    role
        This process's application rank, or :data:`SPARE`.
    napp
        Number of application ranks.
    timeout
        Seconds a collective of the repair may take (``failure_timeout``); a blocking ULFM call (``Shrink``,
        ``Agree``, the ``Split``) still waiting then ends the process (:func:`~ftkit.failure.ulfm.bounded`).
    max_rounds
        Rounds (one per further failure during the repair) before giving up; default: the world's size.

    Returns
    -------
    Rebuilt
        With ``app`` None everywhere when dead ranks are left without a spare (``missing`` non-empty):
        the caller decides (raise, or go on with fewer ranks).

    Raises
    ------
    ProcessFailure
        If failures keep striking during the repair (more rounds than processes).
    """
    revoke(world)
    comm = world
    rounds = comm.Get_size() + 1 if max_rounds is None else max_rounds
    for _ in range(rounds):
        with bounded(timeout, "MPI_Comm_shrink in the repair"):
            shrunk = shrink(comm)
        got, ok = attempt(_roster, shrunk, role, timeout)
        roster: list[int] = got or []
        with bounded(timeout, "MPI_Comm_agree on the roster in the repair"):
            agreed = agree_flag(shrunk, ok)
        if not agreed:
            revoke(shrunk)
            comm = shrunk
            continue
        _declare_dead(world, shrunk)
        replaced, missing, idle = plan_roles(roster, napp)
        dead = tuple(sorted(replaced) + list(missing))
        survivors = tuple(sorted(r for r in roster if r != SPARE))
        me = shrunk.Get_rank()
        if missing:
            spares = tuple(pos for pos, r in enumerate(roster) if r == SPARE)  # all stay idle
            return Rebuilt(shrunk, None, -1 if role == SPARE else role, {}, dead, missing, survivors, spares,
                           tuple(roster))
        new_rank = role if role != SPARE else next((r for r, pos in replaced.items() if pos == me), -1)
        with bounded(timeout, "the new application communicator's MPI_Comm_split in the repair"):
            app, ok = attempt(app_comm, shrunk, new_rank)
            agreed = agree_flag(shrunk, ok)
        if not agreed:
            if app is not None and app != MPI.COMM_NULL:
                app.Free()
            revoke(shrunk)
            comm = shrunk
            continue
        if app is None or app == MPI.COMM_NULL:
            app = None
        else:
            app.Set_errhandler(MPI.ERRORS_RETURN)
        return Rebuilt(shrunk, app, new_rank, replaced, dead, (), survivors, idle, tuple(roster))
    raise ProcessFailure("spare promotion: failures kept striking while the job was being repaired "
                         f"({rounds} rounds)")


def _declare_dead(before: MPI.Intracomm, after: MPI.Intracomm) -> None:
    """Note for ``ftkit launch`` the world ranks in ``before`` but not in ``after`` (declared dead: the
    launcher kills them, so a rank that only hangs cannot hold the job; see :mod:`ftkit.jobstatus`)."""
    groups = []
    try:
        groups = [before.Get_group(), after.Get_group(), MPI.COMM_WORLD.Get_group()]
        gone = MPI.Group.Difference(groups[0], groups[1])
        groups.append(gone)
        n = gone.Get_size()
        ranks = MPI.Group.Translate_ranks(gone, list(range(n)), groups[2]) if n else []
        jobstatus.declare_dead([r for r in ranks if r >= 0])
    except MPI.Exception:
        pass
    finally:
        for group in groups:
            group.Free()


def app_comm(shrunk: MPI.Intracomm, new_rank: int) -> MPI.Intracomm:
    """The application communicator split from ``shrunk`` (a plain collective over it).

    Parameters
    ----------
    shrunk
        The live processes.
    new_rank
        This process's application rank in the new communicator (its order key), or a negative number on a
        process that stays out of it (an idle spare).

    Returns
    -------
    MPI.Intracomm
        The new communicator, ``MPI.COMM_NULL`` on a process that stays out.

    Raises
    ------
    MPI.Exception
        If the split fails (a process failure: run it through :func:`attempt`).
    """
    return MPI.Intracomm(shrunk.Split(0 if new_rank >= 0 else MPI.UNDEFINED, new_rank))


def attempt(step: Callable[..., T], *args: Any) -> tuple[T | None, int]:
    """Run one MPI step of a repair, ``step(*args)``, turning a process failure into a flag the survivors
    then agree on (with :func:`ftkit.failure.ulfm.agree_flag`).

    Returns
    -------
    tuple
        ``(its result, 1)``, or ``(None, 0)`` if a process failure stopped it.

    Raises
    ------
    MPI.Exception
        Any MPI error that is not a process failure.
    """
    try:
        return step(*args), 1
    except MPI.Exception as exc:
        if not is_failure_error(exc):
            raise
        return None, 0
