"""Continue with fewer ranks: the online loop's fallback when no spare is left (issue 18).

``for step in ckpt.steps(n, on_shrink=callback)`` opts in. When a rank dies and no idle spare is left (the
job has none, or they were used by earlier failures), the survivors do not give up:

1. **Shrink** (:func:`.repair.shrink_world`, inside the repair): the survivors form a smaller application
   communicator, keeping their relative order (rank ``i`` of the new one is the ``i``-th survivor).
2. **Adopt** (:func:`adopt_fewer`, at the next iteration): ``ckpt.comm`` becomes that communicator
   (an :class:`~.online.AppComm` again), with a topology planned for the survivors' nodes. L2 partner
   copies and L3 groups that no longer fit the smaller job (too few nodes for ``group_size``, or nodes now
   holding different numbers of ranks) are turned off: their checkpoints go to L4 instead (``ckpt_l4``
   becomes the shortest L2/L3 interval when it was 0), with a :class:`~ftkit.errors.ConfigWarning` on rank
   0. Every protected array is forgotten and ``callback(ckpt.comm)`` is called on every survivor: it
   computes the new decomposition and re-protects every array with its new box (``ckpt.protect(name, buf,
   global_shape=, offset=)``). An array without a layout makes the shrink impossible: every survivor
   raises the same :class:`~ftkit.errors.OnlineRecoveryError`.
3. **Restore**: the arrays are filled from the newest checkpoint through the resharding path
   (:func:`ftkit.checkpoint.reshard.restore` over the smaller communicator) and the loop goes on at its step.

A further failure between the shrink and the end of that restore is not survived online: every survivor
raises the same OnlineRecoveryError and the checkpoint stays on disk for a relaunch (on any rank count).
The restore only reads: the restored checkpoint's lost copies and parity are not rebuilt for the smaller
job, so it is exposed (a further node loss may leave that checkpoint unreadable: an older one is used, or
the job stops) until its first checkpoint on the smaller communicator at a level that covers a node loss
(after an L4 fallback: the next L4 checkpoint). When some idle spares are left but
fewer than the dead ranks, nothing shrinks: the repair fails as without ``on_shrink``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ...config import Config
from ...errors import CheckpointError, ConfigError, ConfigWarning, TopologyError
from ...topology import Topology, plan_topology
from .. import _mpi
from ..handover import OnShrink
from ..reshard import layout_hint
from ..session import Session
from . import spares
from .adopt import adopt_session
from .host import Host
from .verdict import cannot_go_on

__all__ = ["check_opt_in", "adopt_fewer", "plan_fewer", "finish"]


def check_opt_in(session: Session, on_shrink: OnShrink | None) -> Session:
    """Record ``steps(on_shrink=)`` in ``session.shrink``; without spares, set up online recovery (collective
    over ``ckpt.comm``); return the session to go on with.

    Raises
    ------
    CheckpointError
        If ``on_shrink`` is not callable.
    ConfigError
        With ``head = 1`` (dedicated heads cannot follow a shrink).
    ULFMUnavailable
        If this MPI has no ULFM.
    TimeoutFailure
        Without spares, if some rank does not call ``steps(on_shrink=)`` within ``failure_timeout``.
    """
    if on_shrink is None:
        session.shrink.on_shrink = None
        return session
    if not callable(on_shrink):
        raise CheckpointError(f"steps(on_shrink={on_shrink!r}): expected a function taking the new "
                              "communicator (it re-protects every array with its new box)")
    if session.config.head:
        raise ConfigError(f"{session.config.source}: steps(on_shrink=) with head = 1: the job cannot "
                          "continue with fewer ranks when heads are dedicated; set head = 0")
    session.shrink.on_shrink = on_shrink
    if session.online is None:  # no spares: the loop still needs the failure handling of online recovery
        # A rank that did not opt in is reported (TimeoutFailure) instead of a hang in Dup below.
        _mpi.barrier(session.icomm, session.config.failure_timeout, "steps(on_shrink=) on every rank")
        return spares.without_spares(session, required_by="steps(on_shrink=) (continue with fewer ranks)")
    return session


def adopt_fewer(host: Host, app: Any) -> None:
    """Adopt the survivors' communicator ``app`` (``host`` gets the new session) and let the application
    re-protect its arrays on it (collective over ``app``).

    Raises
    ------
    OnlineRecoveryError
        On every survivor, if some protected array has no global layout (or none is protected).
    ProcessFailure
        If a peer fails meanwhile (also inside the callback; the caller repairs).
    """
    old = host.session
    sh, state = old.shrink, old.online
    assert state is not None and state.rebuilt is not None
    survivors = sh.survivors
    def plan(nodes: list[int], rank: int) -> tuple[Topology, Config]:
        return plan_fewer(old.config, [nodes[r] for r in survivors], rank)

    session = adopt_session(app, state, old.config, old, plan=plan)
    host.adopted(session)
    # The callback may communicate on ckpt.comm (not fenced); a failure inside it raises ProcessFailure
    # (not in the loop), and restore() repairs.
    state.in_loop = state.fenced = False
    try:
        assert sh.on_shrink is not None
        bare = host.reprotect(sh.on_shrink, session.comm)
    finally:
        state.in_loop = state.fenced = True
    timeout = session.config.failure_timeout
    if not _mpi.all_true(session.icomm, not bare, timeout, "continue with fewer ranks: layouts"):
        gathered = _mpi.allgather(session.icomm, bare, "shrink: layouts", timeout)
        names = sorted({n for b in gathered for n in b})
        why = ("on_shrink(comm) protected no array: it must re-protect every array with its new box"
               if names == ["<none>"] else layout_hint([n for n in names if n != "<none>"]))
        cannot_go_on(state.rebuilt, f"the job cannot continue with fewer ranks: {why}")


def plan_fewer(config: Config, nodes: list[int], rank: int) -> tuple[Topology, Config]:
    """The topology of the survivors (``nodes``: the old node id of each, in new rank order) and the config
    to go on with: L2/L3 off (their checkpoints at L4, a ConfigWarning on rank 0) when they no longer
    fit."""
    ids = sorted(set(nodes))
    nodes = [ids.index(n) for n in nodes]  # node ids 0..N-1 again (the directory of a lost node is reused)
    need = bool(config.ckpt_l2 or config.ckpt_l3)
    try:
        return plan_topology(nodes, rank, group_size=config.group_size, ckpt_dir=config.ckpt_dir,
                             need_groups=need), config
    except TopologyError:
        counts = [nodes.count(n) for n in range(len(ids))]
        why = (f"the survivors' nodes hold {counts} ranks" if len(set(counts)) > 1 else
               f"{len(ids)} node(s) left for group_size = {config.group_size}")
    if need:
        l4 = config.ckpt_l4 or min(v for v in (config.ckpt_l2, config.ckpt_l3) if v)
        config = config.replace(ckpt_l2=0, ckpt_l3=0, ckpt_l4=l4)
        if rank == 0:
            warnings.warn(ConfigWarning(
                f"continuing on {len(nodes)} ranks: L2 partners and L3 groups no longer fit ({why}); they "
                f"are taken at L4 instead (ckpt_l4 = {l4}) until the job is relaunched"), stacklevel=2)
    return Topology(rank=rank, world_rank=rank, node_of=tuple(nodes),
                    app_world_ranks=tuple(range(len(nodes))), head_world_ranks=(),
                    group_size=config.group_size, ckpt_dir=Path(config.ckpt_dir)), config


def finish(session: Session) -> None:
    """After a restore: a pending shrink is done (its report gets the checkpoint restored)."""
    sh, state = session.shrink, session.online
    if sh.pending is None or state is None:
        return
    report = state.report
    sh.pending.checkpoint_id, sh.pending.level, sh.pending.number = report.checkpoint_id, report.level, \
        report.number
    sh.pending.phases = report.phases()
    sh.history.append(sh.pending)
    sh.pending, sh.survivors = None, ()
