"""The restore after a repair, at the top of the next ``steps()`` iteration: a new session on the repaired
communicator (:func:`.adopt.adopt_session`, or :func:`.shrink.adopt_fewer` after a shrink), then every
protected array from the newest checkpoint the new set of ranks can recover.
"""

from __future__ import annotations

import time

from ...errors import RecoveryError
from .. import _mpi, events
from ..recovery import recover_newest
from . import shrink
from .adopt import adopt_session, forget_unreachable
from .host import Host
from .repair import is_process_failure, repair
from .verdict import cannot_go_on, relaunch_verdict

__all__ = ["restore"]


def _adopt(host: Host) -> None:
    """Give ``host`` the session on the repaired communicator (a smaller one after a shrink)."""
    old = host.session
    state = old.online
    assert state is not None and state.rebuilt is not None and state.rebuilt.app is not None
    if old.shrink.pending is not None:
        shrink.adopt_fewer(host, state.rebuilt.app)
    else:
        host.adopted(adopt_session(state.rebuilt.app, state, old.config, old))


def restore(host: Host) -> int:
    """Adopt the repaired communicator and restore every protected array (collective); return the step.

    A failure meanwhile repairs again and starts over (while spares last).

    Raises
    ------
    OnlineRecoveryError
        On every rank, if no spare is left, or no checkpoint is usable by the new set of ranks.
    """
    state = host.session.online
    assert state is not None
    while True:
        try:
            if state.adopted is not state.rebuilt:
                _adopt(host)
                state.adopted = state.rebuilt
            session = host.session
            if state.fresh:
                forget_unreachable(session)
            try:
                info, entry = host.restored(recover_newest)  # resizable arrays, state records
            except RecoveryError as exc:
                assert state.rebuilt is not None
                if state.fresh:
                    forget_unreachable(session, "restore")  # the relaunch may need them
                cannot_go_on(state.rebuilt, f"no checkpoint can be recovered by the new set of ranks ({exc})",
                             relaunch_verdict(session, state.report.dead))
            session.schedule.count = int(entry.extra.get("snapshots", 0))
            _mpi.barrier(session.icomm, session.config.failure_timeout, "online recovery: restored")
            state.report.restored = time.perf_counter()
        except BaseException as exc:
            if not is_process_failure(exc):
                raise
            repair(state, host.session, host.session.config, exc)
            continue
        report = state.report
        report.checkpoint_id, report.level = info.checkpoint_id, info.level
        state.recoveries += 1
        report.number = state.recoveries
        state.history.append(report)
        if state.fresh:
            forget_unreachable(session, "drop")
        state.fenced = state.fresh = False
        events.restored_online(session.rank, report, entry)
        return int(entry.extra.get("next_step", 0))
