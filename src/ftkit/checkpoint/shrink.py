"""Continue with fewer ranks: the online loop's fallback when no spare is left (issue 18).

``for step in ckpt.steps(n, on_shrink=callback)`` opts in. When a rank dies and no idle spare is left (the
job has none, or they were used by earlier failures), the survivors do not give up:

1. **Shrink** (:func:`shrink_world`, inside the repair): the survivors form a smaller application
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

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError, ConfigError, ConfigWarning, ProcessFailure, TopologyError
from ..failure.replace import Rebuilt, app_comm, attempt
from ..failure.ulfm import agree_flag
from ..topology import Topology, plan_topology
from . import _mpi, events, spares
from .online import adopt, cannot_go_on, format_phases
from .reshard import layout_hint

if TYPE_CHECKING:
    from .checkpointer import Checkpointer

__all__ = ["OnShrink", "ShrinkReport", "ShrinkState", "check_opt_in", "shrink_world", "adopt_fewer",
           "plan_fewer", "finish"]

#: The application's callback: gets the new (smaller) ``ckpt.comm``, re-protects every array.
OnShrink = Callable[[Any], None]


@dataclass(repr=False)
class ShrinkReport:
    """One continuation on fewer ranks: communicator sizes before and after, the ranks (of the old
    communicator) that died, the checkpoint the arrays were restored from (id, highest level read), the
    ``number`` of the job's online recovery it was, and that recovery's seconds per phase (``phases``:
    repair, adopt, restore, as :meth:`.online.RepairReport.phases`)."""

    old_size: int
    new_size: int
    failed: tuple[int, ...]
    checkpoint_id: int = 0
    level: int = 0
    number: int = 0
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Seconds from the failure's detection to the end of the restore on the fewer ranks."""
        return sum(self.phases.values())

    def __repr__(self) -> str:
        return (f"ShrinkReport(number={self.number}, old_size={self.old_size}, new_size={self.new_size}, "
                f"failed={self.failed}, checkpoint_id={self.checkpoint_id}, level={self.level}, "
                f"{format_phases(self.phases)}, total={self.seconds:.3f} s)")


@dataclass
class ShrinkState:
    """A Checkpointer's opt-in and its shrinks (``ckpt._shrink``)."""

    on_shrink: OnShrink | None = None
    pending: ShrinkReport | None = None          # shrunk, not yet restored
    survivors: tuple[int, ...] = ()              # old ranks of the pending shrink, in new rank order
    history: list[ShrinkReport] = field(default_factory=list)


def check_opt_in(ckpt: Checkpointer, on_shrink: OnShrink | None) -> None:
    """Record ``steps(on_shrink=)``; without spares, set up online recovery (collective over ``ckpt.comm``).

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
        if ckpt._shrink is not None:
            ckpt._shrink.on_shrink = None
        return
    if not callable(on_shrink):
        raise CheckpointError(f"steps(on_shrink={on_shrink!r}): expected a function taking the new "
                              "communicator (it re-protects every array with its new box)")
    if ckpt.config.head:
        raise ConfigError(f"{ckpt.config.source}: steps(on_shrink=) with head = 1: the job cannot continue "
                          "with fewer ranks when heads are dedicated; set head = 0")
    if ckpt._shrink is None:
        ckpt._shrink = ShrinkState()
    ckpt._shrink.on_shrink = on_shrink
    if ckpt._online is None:  # no spares: the loop still needs the failure handling of online recovery
        # A rank that did not opt in is reported (TimeoutFailure) instead of a hang in Dup below.
        _mpi.barrier(ckpt._icomm, ckpt.config.failure_timeout, "steps(on_shrink=) on every rank")
        spares.without_spares(ckpt, required_by="steps(on_shrink=) (continue with fewer ranks)")


def shrink_world(ckpt: Checkpointer, rebuilt: Rebuilt) -> Rebuilt:
    """In the repair: if ranks died with no idle spare left and the application opted in, make the
    survivors' communicator (fault-tolerant collective over ``rebuilt.world``); else return ``rebuilt``.

    Raises
    ------
    OnlineRecoveryError
        On every survivor, if a rank dies during a shrink recovery (before its restore ended) or while the
        survivors' communicator is made.
    """
    sh, state = ckpt._shrink, ckpt._online
    if not rebuilt.missing or rebuilt.spares or sh is None or sh.on_shrink is None or state is None:
        return rebuilt
    if sh.pending is not None:
        cannot_go_on(rebuilt, "a further rank died during the recovery onto fewer ranks")
    app, ok = attempt(app_comm, rebuilt.world, ckpt.rank)
    try:
        ok = agree_flag(rebuilt.world, ok)
    except ProcessFailure:
        ok = 0
    if not ok:
        cannot_go_on(rebuilt, "a further rank died while the survivors formed a smaller communicator")
    assert app is not None
    from mpi4py import MPI

    app.Set_errhandler(MPI.ERRORS_RETURN)
    new_rank = rebuilt.survivors.index(ckpt.rank)
    sh.pending = ShrinkReport(state.napp, len(rebuilt.survivors), rebuilt.dead)
    sh.survivors = rebuilt.survivors
    state.napp = len(rebuilt.survivors)
    ckpt.rank = new_rank  # this process's role in the next repair
    events.shrunk(new_rank, sh.pending.old_size, sh.pending.new_size)
    return dataclasses.replace(rebuilt, app=app, app_rank=new_rank, missing=(), replaced={})


def adopt_fewer(ckpt: Checkpointer, app: Any) -> None:
    """Adopt the survivors' communicator ``app`` and let the application re-protect its arrays on it
    (collective over ``app``).

    Raises
    ------
    OnlineRecoveryError
        On every survivor, if some protected array has no global layout (or none is protected).
    ProcessFailure
        If a peer fails meanwhile (also inside the callback; the caller repairs).
    """
    sh, state = ckpt._shrink, ckpt._online
    assert sh is not None and state is not None and state.rebuilt is not None
    survivors = sh.survivors
    adopt(ckpt, app, plan=lambda nodes, rank: plan_fewer(ckpt, [nodes[r] for r in survivors], rank))
    ckpt._forget_protected()
    # The callback may communicate on ckpt.comm (not fenced); a failure inside it raises ProcessFailure
    # (not in the loop), and restore() repairs.
    state.in_loop = state.fenced = False
    try:
        assert sh.on_shrink is not None
        sh.on_shrink(ckpt.comm)
    finally:
        state.in_loop = state.fenced = True
    bare = sorted(set(ckpt._protected) - set(ckpt._layouts)) or ([] if ckpt._protected else ["<none>"])
    timeout = ckpt.config.failure_timeout
    if not _mpi.all_true(ckpt._icomm, not bare, timeout, "continue with fewer ranks: layouts"):
        names = sorted({n for b in _mpi.allgather(ckpt._icomm, bare, "shrink: layouts", timeout) for n in b})
        why = ("on_shrink(comm) protected no array: it must re-protect every array with its new box"
               if names == ["<none>"] else layout_hint([n for n in names if n != "<none>"]))
        cannot_go_on(state.rebuilt, f"the job cannot continue with fewer ranks: {why}")


def plan_fewer(ckpt: Checkpointer, nodes: list[int], rank: int) -> Topology:
    """The topology of the survivors (``nodes``: the old node id of each, in new rank order); L2/L3 off
    (their checkpoints at L4, a ConfigWarning on rank 0) when they no longer fit. Sets ``ckpt.config``."""
    ids = sorted(set(nodes))
    nodes = [ids.index(n) for n in nodes]  # node ids 0..N-1 again (the directory of a lost node is reused)
    config = ckpt.config
    need = bool(config.ckpt_l2 or config.ckpt_l3)
    try:
        return plan_topology(nodes, rank, group_size=config.group_size, ckpt_dir=config.ckpt_dir,
                             need_groups=need)
    except TopologyError:
        counts = [nodes.count(n) for n in range(len(ids))]
        why = (f"the survivors' nodes hold {counts} ranks" if len(set(counts)) > 1 else
               f"{len(ids)} node(s) left for group_size = {config.group_size}")
    if need:
        l4 = config.ckpt_l4 or min(v for v in (config.ckpt_l2, config.ckpt_l3) if v)
        ckpt.config = config.replace(ckpt_l2=0, ckpt_l3=0, ckpt_l4=l4)
        if rank == 0:
            warnings.warn(ConfigWarning(
                f"continuing on {len(nodes)} ranks: L2 partners and L3 groups no longer fit ({why}); they "
                f"are taken at L4 instead (ckpt_l4 = {l4}) until the job is relaunched"), stacklevel=2)
    return Topology(rank=rank, world_rank=rank, node_of=tuple(nodes),
                    app_world_ranks=tuple(range(len(nodes))), head_world_ranks=(),
                    group_size=config.group_size, ckpt_dir=Path(config.ckpt_dir))


def finish(ckpt: Checkpointer) -> None:
    """After a restore: a pending shrink is done (its report gets the checkpoint restored)."""
    sh, state = ckpt._shrink, ckpt._online
    if sh is None or sh.pending is None or state is None:
        return
    report = state.report
    sh.pending.checkpoint_id, sh.pending.level, sh.pending.number = report.checkpoint_id, report.level, \
        report.number
    sh.pending.phases = report.phases()
    sh.history.append(sh.pending)
    sh.pending, sh.survivors = None, ()
