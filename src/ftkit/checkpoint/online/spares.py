"""Spare ranks: the last ``spare_ranks`` processes of the job wait inside ``Checkpointer()`` until needed.

:func:`split_spares` (collective over the world, at the start of ``Checkpointer()``) divides the job into
application ranks, which go on with the application communicator, and spares. A spare sleeps in a receive
from application rank 0 on the world communicator, polled with growing pauses (no CPU while idle). That
receive completes

- with a message when the job ends (:func:`release_spares`, called by ``finalize()``): the spare leaves
  the job and its process ends with exit code 0 (``Checkpointer()`` never returns in it: as a head does);
- in error when application rank 0 dies or a survivor revokes the world at a repair: the spare joins
  :func:`ftkit.failure.replace.rebuild`. Promoted, it returns from ``Checkpointer()`` as the dead rank (see
  :mod:`ftkit.checkpoint.online`); not needed this time, it sleeps again.

While idle, a spare holds the exit signals (SIGTERM, SIGUSR1, SIGUSR2: :meth:`..exitpolicy.ExitPolicy.idle`),
so a signal sent to every process of the job does not end it; promoted, it brings a signal it got into the
exit agreement (:meth:`~..exitpolicy.ExitPolicy.rebind`).

Placement: the spares are the *last* processes, so with the launcher's usual by-slot mapping they fill
nodes of their own when ``spare_ranks`` is a multiple of the ranks per node (a replacement on the failed
node would be lost with it). The topology of the application ranks never includes them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

from ... import jobstatus
from ..._wait import poll_until
from ...config import Config
from ...errors import ConfigError, ULFMUnavailable
from ...failure.detect import is_failure_error
from ...failure.replace import SPARE, Rebuilt, rebuild
from ...failure.ulfm import exit_without_finalize, require_ulfm
from ...launch import SPARES_ENV
from .. import _mpi
from ..exitpolicy import ExitPolicy
from ..handover import RELEASE_TAG, OnlineState, RepairReport
from ..session import Session
from . import exithook
from .adopt import adopt_session
from .appcomm import guard
from .repair import check_replaced, is_process_failure, repair

__all__ = ["with_spares", "split_spares", "promoted", "without_spares", "IDLE_SLEEP"]

#: Longest pause (s) between two looks of an idle spare at its receive.
IDLE_SLEEP = 0.05


def with_spares(config: Config, spare_ranks: int | None) -> Config:
    """``config`` with ``spare_ranks`` from the argument, else ``$FTKIT_SPARE_RANKS`` (``ftkit launch
    --spares``), else as configured.

    Raises
    ------
    ConfigError
        If the value is not an integer >= 0.
    """
    if spare_ranks is None and os.environ.get(SPARES_ENV):
        try:
            spare_ranks = int(os.environ[SPARES_ENV])
        except ValueError:
            raise ConfigError(f"${SPARES_ENV} = {os.environ[SPARES_ENV]!r} must be an integer >= 0 "
                              "(set by ftkit launch --spares)") from None
    return config if spare_ranks is None else config.replace(spare_ranks=spare_ranks)


def split_spares(config: Config, world: Any) -> tuple[Any, OnlineState | None]:
    """Divide ``world`` into application ranks and ``config.spare_ranks`` spares (collective).

    Returns
    -------
    The application communicator (None on a spare promoted to replace a dead rank: :func:`promoted` makes
    its session) and the job's online state (None without spares: ``world`` is then returned as it is). A
    spare that is never needed does not return (exit code 0).

    Raises
    ------
    ULFMUnavailable
        If this MPI or launch has no ULFM (spares need revoke, agree and shrink).
    ConfigError
        If ``spare_ranks`` leaves no application rank, or is combined with ``head = 1``.
    OnlineRecoveryError
        On a spare, if the job could not be recovered online.
    """
    spares = int(config.spare_ranks)
    if not spares:
        return world, None
    size = world.Get_size()
    if config.head:
        raise ConfigError(f"{config.source}: spare_ranks = {spares} with head = 1: spares and dedicated "
                          "heads cannot be combined; set one of them to 0")
    if spares >= size:
        raise ConfigError(f"{config.source}: spare_ranks = {spares} leaves no application rank in a job of "
                          f"{size} processes: launch more processes or use fewer spares")
    require_ulfm(world, f"spare_ranks = {spares} (online recovery)")
    wcomm = _mpi.internal_comm(world)
    napp = size - spares
    me = wcomm.Get_rank()
    try:
        app = wcomm.Split(0 if me < napp else MPI.UNDEFINED, me)
    except MPI.Exception as exc:
        raise _mpi.as_failure(exc, wcomm, "Checkpointer start-up: spares") from exc
    state = OnlineState(world=wcomm, napp=napp, spares=tuple(range(napp, size)), rank=me)
    if me < napp:
        app.Set_errhandler(MPI.ERRORS_RETURN)
        return app, state
    exithook.serve_spare(config, state)  # an uncaught exception ends the process as a failure, never a hang
    state.exit_hold = ExitPolicy.idle(config)  # SIGUSR1 to every process: held, not the end of a spare
    _wait_as_spare(config, state)
    return None, state


def without_spares(session: Session, *, required_by: str | None = None) -> Session:
    """At the start of ``steps()`` with ``spare_ranks = 0``: watch the loop for failures all the same
    (collective over ``session.comm``); return the session to go on with.

    When ULFM works on every rank, the session returned has an
    :class:`~ftkit.checkpoint.handover.OnlineState` with no spare and its ``comm`` is an
    :class:`~.appcomm.AppComm`: a process failure in the loop then revokes, the
    survivors agree on who died and, no spare being there, every one of them raises the same
    :class:`~ftkit.errors.OnlineRecoveryError` (instead of each the error of its own call, some of them only
    after their timeouts), and a relaunch recovers. Without ULFM, with dedicated heads or a single rank, the
    loop stays as it is (a failure then ends the job as MPI does), unless ``required_by`` names the feature
    that needs it.

    Raises
    ------
    ULFMUnavailable
        Without ULFM, if ``required_by`` is given (its text names what needs ULFM).
    """
    if session.online is not None or session.config.head or session.nranks < 2:
        return session
    try:
        require_ulfm(session.icomm, required_by or "a failure-aware steps() loop",
                     timeout=session.config.failure_timeout)
    except ULFMUnavailable:
        if required_by is not None:
            raise
        return session
    state = OnlineState(world=_mpi.internal_comm(session.comm), napp=session.nranks, spares=(),
                        rank=session.rank)
    return guard(dataclasses.replace(session, online=state))


def _leader(rebuilt: Rebuilt | None) -> int:
    """World position of application rank 0 (the spares' watch)."""
    if rebuilt is None:
        return 0
    return rebuilt.replaced.get(0, rebuilt.roster.index(0) if 0 in rebuilt.roster else 0)


def _wait_as_spare(config: Config, state: OnlineState) -> None:
    """Sleep until released (the process ends) or promoted (returns: :func:`promoted` follows)."""
    timeout = config.failure_timeout
    while True:
        buf = np.zeros(1, np.int64)
        req = state.world.Irecv(buf, source=_leader(state.rebuilt), tag=RELEASE_TAG)
        try:
            poll_until(req.Test, None, "idle spare", max_sleep=IDLE_SLEEP)
            _leave(state)
        except MPI.Exception as exc:
            if not is_failure_error(exc):
                raise
        woke = time.perf_counter()
        rebuilt = rebuild(state.world, SPARE, state.napp, timeout)
        state.world, state.spares, state.rebuilt = rebuilt.world, rebuilt.spares, rebuilt
        state.report = RepairReport(dead=rebuilt.dead, detected=woke, rebuilt=time.perf_counter())
        check_replaced(rebuilt, None, config)
        if rebuilt.app is not None:
            return


def promoted(config: Config, state: OnlineState) -> Session:
    """The session of a spare promoted to application rank ``state.rebuilt.app_rank`` (collective with
    the survivors): the dead rank's, adopted from them (:func:`.adopt.adopt_session`)."""
    assert state.rebuilt is not None
    state.informed = False
    state.fresh = True
    state.rank = state.rebuilt.app_rank
    while True:
        try:
            assert state.rebuilt is not None
            session = adopt_session(state.rebuilt.app, state, config)
            state.adopted = state.rebuilt
            return session
        except BaseException as exc:
            if not is_process_failure(exc):
                raise
            repair(state, None, config, exc)


def _leave(state: OnlineState) -> None:
    """End an idle spare's process: exit code 0 (after MPI_Finalize when no failure happened)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if state.rebuilt is None:
        jobstatus.note("exit", "spare released")
        MPI.Finalize()
        os._exit(0)
    exit_without_finalize(None, 0)  # after a failure, MPI_Finalize may wait for the dead (see ulfm.py)
