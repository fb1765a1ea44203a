"""A new session on a repaired application communicator: the one way online recovery, spare promotion
and shrink replace a :class:`~ftkit.checkpoint.session.Session`.

:func:`adopt_session` takes the communicator the repair made (:mod:`.repair`) and returns the session that
runs on it: the run's state (execution id, node map, manifest) comes from the lowest rank that holds it;
every rank then builds its internal communicator, topology, pipeline context and post-processing afresh.
The records of :mod:`ftkit.checkpoint.handover` are handed on, never rebuilt.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config import Config
from ...errors import FtkitError
from ...failure.ulfm import revoke
from ...storage import levels as table
from ...storage.manifest import Manifest, ManifestStore
from ...topology import Topology, plan_topology
from .. import _mpi, events
from ..exitpolicy import ExitPolicy
from ..handover import OnlineState
from ..runlock import RunLock, acquire_run_lock
from ..session import Session, build_session
from ..startup import prepare_dirs
from .appcomm import guard
from .verdict import cannot_go_on

__all__ = ["Plan", "adopt_session", "forget_unreachable"]

#: Plans the topology of a smaller job from (node map, rank); returns it and the config to use (a shrink
#: may turn L2/L3 off: :func:`.shrink.plan_fewer`).
Plan = Callable[[list[int], int], tuple[Topology, Config]]


def adopt_session(app: Any, online: OnlineState, config: Config, old: Session | None = None,
                  plan: Plan | None = None) -> Session:
    """The session on ``app`` (the repaired application communicator; collective over it), replacing
    ``old`` (None on a spare being promoted: ``config`` is then the job's).

    ``old``'s post-processing is closed and its internal communicator freed; its run lock, exit policy
    (rebound to the new communicator: :meth:`~..exitpolicy.ExitPolicy.rebind`; a promoted spare's is the one
    it held while idle), fault hook and shrink opt-in pass to the new session. ``plan(node map, rank)``, if
    given, plans the topology instead (a smaller job: :mod:`.shrink`).

    Raises
    ------
    OnlineRecoveryError
        If no rank holds the run's state any more.
    ProcessFailure
        If a peer fails meanwhile (the caller repairs again; the communicators made here are revoked).
    """
    timeout = config.failure_timeout
    if old is not None:
        with contextlib.suppress(Exception):
            old.post.close()
        with contextlib.suppress(Exception):
            old.icomm.Free()
    icomm = _mpi.internal_comm(app)
    made = [icomm]
    try:
        rank = icomm.Get_rank()
        run = _run_state(icomm, online, old, timeout)
        made.append(app)
        events.start(config, rank)  # the log shows the rank this process now holds
        if plan is not None:
            topology, config = plan(list(run["nodes"]), rank)
        else:
            topology = plan_topology(list(run["nodes"]), rank, head=0, group_size=config.group_size,
                                     ckpt_dir=config.ckpt_dir,
                                     need_groups=bool(config.ckpt_l2 or config.ckpt_l3))
        store = ManifestStore(config.meta_dir, Manifest.loads(run["manifest"]), writer=rank == 0)
        online.recoveries = int(run["recoveries"])
        online.report.dead = tuple(sorted({*online.report.dead, *run["dead"]}))  # a replacement learns them
        prepare_dirs(config, topology, icomm)  # a replacement's node directory may be gone with its node
        lock = old.lock if old is not None else None
        if rank == 0 and lock is None:
            lock = _take_over_lock(config.meta_dir)
        # the exit agreement moves to the new communicator (a promoted spare brings the signals it held)
        held = old.exit if old is not None else online.exit_hold or ExitPolicy.idle(config)
        policy = held.rebind(icomm, str(run["exec_id"]), config)
        session = build_session(
            config, app, icomm, topology, str(run["exec_id"]), store, restarted=bool(run["restarted"]),
            problem=str(run["problem"]), exit=policy, lock=lock,
            online=online, shrink=old.shrink if old is not None else None,
            fault_hook=old.ctx.fault_hook if old is not None else None)
    except BaseException:
        for comm in made:  # a peer blocked on them fails out at once (the caller repairs)
            with contextlib.suppress(Exception):
                revoke(comm)
        with contextlib.suppress(Exception):
            icomm.Free()
        raise
    online.rank = rank
    online.informed = True
    online.report.adopted = time.perf_counter()
    return guard(session)


def _run_state(icomm: Any, online: OnlineState, old: Session | None, timeout: float) -> dict[str, Any]:
    """The run's state from the lowest rank of ``icomm`` that holds it (collective).

    Raises
    ------
    OnlineRecoveryError
        If no rank holds it any more.
    """
    rank, size = icomm.Get_rank(), icomm.Get_size()
    root = _mpi.allreduce_int(icomm, rank if online.informed else size, "min", timeout, "online recovery")
    if root == size:
        assert online.rebuilt is not None
        cannot_go_on(online.rebuilt, "every rank that knew the run's state is dead")
    mine = None
    if rank == root:
        assert old is not None
        mine = {"exec_id": old.exec_id, "nodes": list(old.topology.node_of), "restarted": old.restarted,
                "manifest": old.store.manifest.dumps(), "problem": old.problem,
                "recoveries": online.recoveries, "dead": list(online.report.dead)}
    return dict(_mpi.bcast(icomm, mine, root, "online recovery: run state", timeout))


def _take_over_lock(meta_dir: Any) -> RunLock | None:
    """The run lock for a replacement of rank 0 (the dead holder's lock is stale); None if it cannot."""
    try:
        return acquire_run_lock(Path(meta_dir), time.time())
    except (FtkitError, OSError):
        return None  # the job goes on; only a second job on the same meta_dir is no longer kept out


#: Suffix of a dead rank's node-local file that its replacement must not read (:func:`forget_unreachable`).
UNREACHABLE = ".unreachable"


def forget_unreachable(session: Session, how: str = "hide") -> None:
    """On a replacement, the dead rank's node-local files, which it could not reach on a real cluster:
    ``hide`` renames them with :data:`UNREACHABLE` (no reader looks for it); when the online recovery fails,
    ``restore`` puts them back (a relaunch on the dead rank's node finds them there, so the checkpoint the
    job's last line names stays recoverable: deleting them lost it on emulated nodes); once it succeeded,
    ``drop`` deletes them."""
    ctx = session.ctx
    for entry in ctx.store.manifest.checkpoints:
        for lv in table.node_local():
            with contextlib.suppress(FtkitError, OSError, ValueError):
                path = ctx.level(lv, entry.nodes).path(entry.id, ctx.rank)
                aside = path.with_name(path.name + UNREACHABLE)
                if how == "hide" and path.exists():
                    path.replace(aside)
                elif how == "restore" and aside.exists():
                    aside.replace(path)
                elif how == "drop":
                    aside.unlink(missing_ok=True)
