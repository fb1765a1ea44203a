"""The repair after a process failure: revoke, agree on the dead, replace them with spares (or, with
``steps(on_shrink=)`` and no spare left, form the survivors' smaller communicator), fence the iteration.

The repair changes only the job's :class:`~ftkit.checkpoint.handover.OnlineState` (the new world, the spares
left, the :class:`~ftkit.failure.replace.Rebuilt` outcome); the session that the outcome needs is made at
the next iteration (:mod:`.restore`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from mpi4py import MPI

from ...config import Config
from ...errors import OnlineRecoveryError, ProcessFailure, TimeoutFailure
from ...failure.detect import is_failure_error
from ...failure.replace import Rebuilt, app_comm, attempt, rebuild
from ...failure.ulfm import agree_within, revoke
from .. import _mpi, events
from ..handover import OnlineState, RepairReport, ShrinkReport, ShrinkState
from ..session import Session
from .verdict import cannot_go_on, shared_verdict

__all__ = ["is_process_failure", "check_replaced", "repair", "shrink_world", "comms_of", "on_failure"]


def is_process_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means a peer process failed (ULFM error classes, or ftkit's ProcessFailure)."""
    if isinstance(exc, OnlineRecoveryError):
        return False
    return is_failure_error(exc) or isinstance(exc, ProcessFailure)


def check_replaced(rebuilt: Rebuilt, session: Session | None, config: Config) -> None:
    """Raise :class:`OnlineRecoveryError` (via :func:`.verdict.cannot_go_on`) if some dead rank got no spare
    (collective over ``rebuilt.world``: the application ranks tell the spares what a relaunch recovers;
    ``session`` is None on a spare)."""
    if rebuilt.missing:
        relaunch = shared_verdict(session, rebuilt, config.failure_timeout)
        died = f"{len(rebuilt.dead)} rank(s) died and"
        left = (f"{died} the job has no spare ranks" if not config.spare_ranks else
                f"{died} {len(rebuilt.spares)} spare(s) were left: no spare left for some of them")
        cannot_go_on(rebuilt, left, relaunch)


def repair(state: OnlineState, session: Session | None, config: Config, cause: BaseException) -> None:
    """Revoke every communicator of ``session``, replace the dead ranks with spares, fence this iteration
    (``session`` is None on a spare being promoted: it has none yet).

    Raises
    ------
    OnlineRecoveryError
        On every live process, if the dead ranks cannot all be replaced.
    """
    seen = time.perf_counter()
    for comm in comms_of(session):
        with contextlib.suppress(Exception):
            revoke(comm)
    agreed = rebuild(state.world, state.rank, state.napp, config.failure_timeout)
    shrink = session.shrink if session is not None else None
    events.failure_seen(state.rank, agreed, shrink is not None and shrink.on_shrink is not None)
    timeout = config.failure_timeout
    rebuilt = shrink_world(state, shrink, agreed, timeout) if shrink is not None else agreed
    if state.fenced or state.fresh:  # a further failure before the data was restored: the same recovery
        state.report.dead = tuple(sorted({*state.report.dead, *rebuilt.dead}))
    else:
        state.report = RepairReport(dead=rebuilt.dead, detected=seen)
    state.report.rebuilt = time.perf_counter()
    state.world, state.spares, state.rebuilt = rebuilt.world, rebuilt.spares, rebuilt
    check_replaced(rebuilt, session, config)
    state.fenced = True


def shrink_world(state: OnlineState, sh: ShrinkState, rebuilt: Rebuilt, timeout: float) -> Rebuilt:
    """In the repair: if ranks died with no idle spare left and the application opted in
    (``steps(on_shrink=)``, :mod:`.shrink`), make the survivors' communicator (fault-tolerant collective over
    ``rebuilt.world``, within ``timeout`` seconds: ``failure_timeout``); else return ``rebuilt``.

    The survivors first agree that every one of them is there (bounded), and only then split: a survivor
    that is alive but never comes (stuck elsewhere, or later than ``timeout``) ends the repair on the others
    instead of holding them in the split for good. The first to give up revokes ``rebuilt.world``: the others
    and the latecomer, when it comes, find the repair over and raise the same error.

    Raises
    ------
    OnlineRecoveryError
        On every survivor, if a rank dies during a shrink recovery (before its restore ended) or while the
        survivors' communicator is made, or if some survivor does not take part within ``timeout``.
    """
    if not rebuilt.missing or rebuilt.spares or sh.on_shrink is None:
        return rebuilt
    if sh.pending is not None:
        cannot_go_on(rebuilt, "a further rank died during the recovery onto fewer ranks")
    world = rebuilt.world
    here, late = 0, False
    try:
        here = agree_within(world, 1, timeout, "continue with fewer ranks: every survivor in the repair")
    except ProcessFailure as exc:  # a TimeoutFailure, or the world revoked by a survivor that timed out
        late = isinstance(exc, TimeoutFailure) or world.Is_revoked()
        if late:
            with contextlib.suppress(Exception):
                revoke(world)  # the others (and a latecomer) find the repair given up at once
    if not here:
        cannot_go_on(rebuilt, f"the survivors did not all take part in the recovery onto fewer ranks within "
                     f"failure_timeout ({timeout:g} s): one of them is alive but elsewhere (stuck, or busy "
                     "outside MPI); raise failure_timeout if the survivors are only slow" if late else
                     "a further rank died while the survivors formed a smaller communicator")
    app, ok = attempt(app_comm, world, state.rank)  # every survivor is here: the split ends or fails at once
    try:
        ok = agree_within(world, ok, timeout, "continue with fewer ranks: the smaller communicator")
    except ProcessFailure:  # a TimeoutFailure too
        ok = 0
    if not ok:
        cannot_go_on(rebuilt, "a further rank died while the survivors formed a smaller communicator")
    assert app is not None
    app.Set_errhandler(MPI.ERRORS_RETURN)
    new_rank = rebuilt.survivors.index(state.rank)
    sh.pending = ShrinkReport(state.napp, len(rebuilt.survivors), rebuilt.dead)
    sh.survivors = rebuilt.survivors
    state.napp = len(rebuilt.survivors)
    state.rank = new_rank  # this process's role in the next repair
    events.shrunk(new_rank, sh.pending.old_size, sh.pending.new_size)
    return dataclasses.replace(rebuilt, app=app, app_rank=new_rank, missing=(), replaced={})


def comms_of(session: Session | None) -> Iterable[Any]:
    """Every communicator ``session`` may be blocked on (revoked at a repair)."""
    if session is None:
        return []
    comms = [session.comm, session.icomm]
    background = session.post.background
    pcomms = getattr(background, "comms", None)
    if pcomms is not None:
        comms += [pcomms.app, pcomms.group]
    return [c for c in comms if c is not None and c != MPI.COMM_NULL]


def on_failure(session: Session, exc: BaseException, what: str) -> None:
    """A process failure seen in ``what``: repair online inside ``steps()``, else revoke and raise it.

    Raises
    ------
    ProcessFailure
        Outside the loop (after revoking the session's communicators, so no peer stays blocked).
    OnlineRecoveryError
        If the repair cannot replace the dead ranks.
    """
    state = session.online
    if state is None or not state.in_loop:
        for comm in comms_of(session):
            with contextlib.suppress(Exception):
                revoke(comm)
        if isinstance(exc, ProcessFailure) or not isinstance(exc, Exception):
            raise exc
        raise _mpi.as_failure(exc, session.icomm, what) from exc
    repair(state, session, session.config, exc)
