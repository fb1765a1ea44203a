"""Online recovery: a rank dies, a spare takes its place, the job goes on without a relaunch (issue 17).

With ``spare_ranks = S`` the last S processes of the job are spares held inside ``Checkpointer()``
(:mod:`.spares`). The application writes its main loop as ``for step in ckpt.steps(n): ...`` and
communicates on ``ckpt.comm``, an :class:`AppComm`. Within that loop a process failure never escapes to the
application:

1. **Detection and repair.** The first failure-class ``MPI.Exception`` an ``AppComm`` call raises, or a
   :class:`~ftkit.errors.ProcessFailure` from ``snapshot()``/``checkpoint()``, makes this rank revoke every
   communicator it holds (the others' pending calls fail at once, idle spares wake up) and call
   :func:`ftkit.failure.replace.rebuild` with every live process: the dead ranks are agreed on, a spare
   takes each dead rank's number, the new application communicator has the old size and rank order.
2. **Fence.** The rest of the iteration is fenced: every ``AppComm`` call and ``snapshot()`` returns at
   once without communicating, with results that no rank takes for convergence (NaN; the data is restored
   next). Collectives in the loop are agreed, so a result one rank acts on, every rank got (:mod:`.fence`).
3. **Restore.** The next ``steps()`` iteration (on a promoted spare: its first one) adopts the new
   communicator (:func:`adopt`: the run's state from a rank that has it, internal communicators,
   post-processing), restores every protected array from the newest checkpoint complete for the new set of
   ranks (survivors read their L1 files; a replacement's file comes from its partner copy, an L3 decode by
   its group, else L4; those recovery steps also rebuild the lost copies and parity, so the redundancy of
   the restored checkpoint covers the new layout again), and yields the restored step.

A failure during the restore starts it again with the spares left. When it cannot recover online (spares
exhausted, all ranks that knew the run's state lost), every survivor raises the same
:class:`~ftkit.errors.OnlineRecoveryError`; the checkpoints stay on disk and a relaunch recovers from them
(with ``steps(on_shrink=)`` the survivors continue with fewer ranks instead: :mod:`.shrink`).

A replacement takes over the dead rank's *logical* node (``ckpt.topology`` is planned from the job's
original node map): its node-local files live under that node's directory on the spare's own disk. Files
there that belong to the dead rank are not reachable from the spare's node on a real cluster, so a
replacement never reads them (:func:`forget_unreachable`: on emulated nodes, where they would be, they are
removed first).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from mpi4py import MPI

from ..errors import FtkitError, OnlineRecoveryError, ProcessFailure, RecoveryError
from ..failure.detect import is_failure_error
from ..failure.replace import Rebuilt, rebuild
from ..failure.ulfm import revoke
from ..storage.manifest import Manifest, ManifestStore
from ..topology import plan_topology
from . import _mpi, events, fence, online_verdict
from .contract import PipelineContext
from .offload import PostManager
from .recovery import recover_newest
from .runlock import acquire_run_lock
from .schedule import SnapshotSchedule
from .startup import prepare_dirs

if TYPE_CHECKING:
    from .checkpointer import Checkpointer

__all__ = ["AppComm", "OnlineState", "RepairReport", "format_phases", "adopt", "cannot_go_on",
           "forget_unreachable", "is_process_failure", "repair", "restore", "comms_of", "check_replaced"]


def is_process_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means a peer process failed (ULFM error classes, or ftkit's ProcessFailure)."""
    if isinstance(exc, OnlineRecoveryError):
        return False
    return is_failure_error(exc) or isinstance(exc, ProcessFailure)


def format_phases(phases: dict[str, float]) -> str:
    """``repair=0.120 s, adopt=0.010 s, restore=0.300 s``: phase durations for a ``repr``."""
    return ", ".join(f"{name}={seconds:.3f} s" for name, seconds in phases.items())


@dataclass(repr=False)
class RepairReport:
    """One online recovery: which ranks died, what was restored, and how long each phase took
    (:meth:`phases`, :attr:`seconds`; the fields ``detected`` ... ``restored`` are when each phase ended,
    ``time.perf_counter`` seconds, ``detected`` being when this process saw the failure). Its ``repr``
    shows the durations, not the raw clock values.

    ``number`` counts the job's online recoveries (1 for the first), the same on every rank. The job is
    exposed (a further failure in the same group is not survivable) from the failure until ``restored``:
    the restore rebuilds the lost node's files, partner copies and parity of the restored checkpoint on the
    new layout (recovery's L2/L3 steps); after a restore from L4, until the next L2/L3 checkpoint.
    """

    number: int = 0
    dead: tuple[int, ...] = ()
    detected: float = 0.0
    rebuilt: float = 0.0
    adopted: float = 0.0
    restored: float = 0.0
    checkpoint_id: int = 0
    level: int = 0

    def phases(self) -> dict[str, float]:
        """Seconds per phase: repair (agreement, shrink, spare promotion), adopt (the new communicator set
        up), restore (the arrays read back and the lost files, copies and parity rebuilt); a phase not
        reached yet counts 0."""
        ends = [self.detected, self.rebuilt, self.adopted, self.restored]
        return {name: max(0.0, end - start) if end and start else 0.0
                for name, start, end in zip(("repair", "adopt", "restore"), ends, ends[1:], strict=False)}

    @property
    def seconds(self) -> float:
        """Seconds from the failure's detection to the end of the restore (the phases' sum)."""
        return sum(self.phases().values())

    def __repr__(self) -> str:
        return (f"RepairReport(number={self.number}, dead={self.dead}, checkpoint_id={self.checkpoint_id}, "
                f"level={self.level}, {format_phases(self.phases())}, total={self.seconds:.3f} s)")


@dataclass
class OnlineState:
    """A Checkpointer's online-recovery state (one per Checkpointer when ``spare_ranks > 0``)."""

    world: Any                    # every live process of the job, error-returning
    napp: int
    spares: tuple[int, ...]       # world positions of the idle spares
    informed: bool = True         # this rank holds the run's state (a fresh replacement does not)
    fenced: bool = False          # a repair happened in this iteration: the data is restored next
    in_loop: bool = False
    rebuilt: Rebuilt | None = None
    adopted: Rebuilt | None = None    # the repair whose communicator this rank has adopted
    fresh: bool = False               # a replacement not yet restored (the dead rank's files are not its own)
    report: RepairReport = field(default_factory=RepairReport)
    history: list[RepairReport] = field(default_factory=list)
    recoveries: int = 0               # online recoveries of the job so far (agreed at each adoption)
    left: str = ""                    # the loop was left in a fenced iteration: why every call is refused


def cannot_go_on(rebuilt: Rebuilt, why: str, relaunch: str = online_verdict.UNKNOWN) -> NoReturn:
    """Raise the one error every process raises when the job cannot recover online.

    This is the seam where "continue with fewer ranks" (elastic restart) plugs in: it gets the agreed
    outcome of the repair (``rebuilt.survivors``, ``rebuilt.missing``) on every live process. ``relaunch``
    says what a relaunch recovers (:mod:`.online_verdict`; the same text on every process).

    Raises
    ------
    OnlineRecoveryError
        Always, with the same message on every process.
    """
    raise OnlineRecoveryError(
        f"online recovery impossible: {why} (dead application ranks {list(rebuilt.dead)}, "
        f"{len(rebuilt.spares)} idle spare(s)). {relaunch}", list(rebuilt.dead))


def check_replaced(rebuilt: Rebuilt, ckpt: Any) -> None:
    """Raise :class:`OnlineRecoveryError` (via :func:`cannot_go_on`) if some dead rank got no spare
    (collective over ``rebuilt.world``: the application ranks tell the spares what a relaunch recovers)."""
    if rebuilt.missing:
        relaunch = online_verdict.shared_verdict(ckpt, rebuilt, ckpt.config.failure_timeout)
        died = f"{len(rebuilt.dead)} rank(s) died and"
        left = (f"{died} the job has no spare ranks" if not ckpt.config.spare_ranks else
                f"{died} {len(rebuilt.spares)} spare(s) were left: no spare left for some of them")
        cannot_go_on(rebuilt, left, relaunch)


def repair(ckpt: Checkpointer, cause: BaseException) -> None:
    """Revoke every communicator of ``ckpt``, replace the dead ranks with spares, fence this iteration.

    Raises
    ------
    OnlineRecoveryError
        On every live process, if the dead ranks cannot all be replaced.
    """
    state = ckpt._online
    assert state is not None
    seen = time.perf_counter()
    for comm in comms_of(ckpt):
        with contextlib.suppress(Exception):
            revoke(comm)
    agreed = rebuild(state.world, ckpt.rank, state.napp, ckpt.config.failure_timeout)
    shrinking = ckpt._shrink is not None and ckpt._shrink.on_shrink is not None
    events.failure_seen(ckpt.rank, agreed, shrinking)
    rebuilt = ckpt._shrink_world(agreed)
    if state.fenced or state.fresh:  # a further failure before the data was restored: the same recovery
        state.report.dead = tuple(sorted({*state.report.dead, *rebuilt.dead}))
    else:
        state.report = RepairReport(dead=rebuilt.dead, detected=seen)
    state.report.rebuilt = time.perf_counter()
    state.world, state.spares, state.rebuilt = rebuilt.world, rebuilt.spares, rebuilt
    check_replaced(rebuilt, ckpt)
    state.fenced = True


def comms_of(ckpt: Checkpointer) -> Iterable[Any]:
    """Every communicator ``ckpt`` may be blocked on (revoked at a repair)."""
    comms = [getattr(ckpt, "comm", None), getattr(ckpt, "_icomm", None)]
    post = getattr(ckpt, "_post", None)
    background = getattr(post, "background", None) if post is not None else None
    pcomms = getattr(background, "comms", None)
    if pcomms is not None:
        comms += [pcomms.app, pcomms.group]
    return [c for c in comms if c is not None and c != MPI.COMM_NULL]


def adopt(ckpt: Checkpointer, app: Any, plan: Callable[[list[int], int], Any] | None = None) -> None:
    """Make ``app`` (the repaired application communicator) ``ckpt``'s communicator (collective over it).

    The run's state (execution id, node map, manifest) comes from the lowest rank that holds it; every rank
    then builds its internal communicator, topology, pipeline context and post-processing afresh.
    ``plan(node map, rank)``, if given, plans the topology instead (a smaller job: :mod:`.shrink`; it may
    replace ``ckpt.config``).

    Raises
    ------
    OnlineRecoveryError
        If no rank holds the run's state any more.
    ProcessFailure
        If a peer fails meanwhile (the caller repairs again).
    """
    state = ckpt._online
    assert state is not None
    timeout = ckpt.config.failure_timeout
    old_post = getattr(ckpt, "_post", None)
    if old_post is not None:
        with contextlib.suppress(Exception):
            old_post.close()
    with contextlib.suppress(Exception):
        ckpt._icomm.Free()
    icomm = _mpi.internal_comm(app)
    ckpt._icomm = icomm
    rank, size = icomm.Get_rank(), icomm.Get_size()
    root = _mpi.allreduce_int(icomm, rank if state.informed else size, "min", timeout, "online recovery")
    if root == size:
        assert state.rebuilt is not None
        cannot_go_on(state.rebuilt, "every rank that knew the run's state is dead")
    mine = None
    if rank == root:
        mine = {"exec_id": ckpt.exec_id, "nodes": list(ckpt.topology.node_of), "restarted": ckpt._restarted,
                "manifest": ckpt._store.manifest.dumps(), "problem": ckpt._problem,
                "recoveries": state.recoveries, "dead": list(state.report.dead)}
    run = _mpi.bcast(icomm, mine, root, "online recovery: run state", timeout)
    config = ckpt.config
    ckpt.comm = AppComm.wrap(app, ckpt)
    ckpt.rank, ckpt.nranks = rank, size
    events.start(ckpt.config, rank)  # the log shows the rank this process now holds
    ckpt.topology = plan(list(run["nodes"]), rank) if plan is not None else plan_topology(
        list(run["nodes"]), rank, head=0, group_size=config.group_size, ckpt_dir=config.ckpt_dir,
        need_groups=bool(config.ckpt_l2 or config.ckpt_l3))
    config = ckpt.config
    ckpt.exec_id = str(run["exec_id"])
    manifest = Manifest.loads(run["manifest"])
    ckpt._store = ManifestStore(config.meta_dir, manifest, writer=rank == 0)
    ckpt._restarted, ckpt._problem = bool(run["restarted"]), str(run["problem"])
    state.recoveries = int(run["recoveries"])
    state.report.dead = tuple(sorted({*state.report.dead, *run["dead"]}))  # a replacement learns them all
    prepare_dirs(config, ckpt.topology, icomm)  # a replacement's node directory may be gone with its node
    if rank == 0 and ckpt._lock is None:
        ckpt._lock = _take_over_lock(config.meta_dir)
    ckpt._schedule = SnapshotSchedule.from_config(config, icomm, probe=lambda: ckpt._post.failure_flag())
    ckpt._ctx = PipelineContext(comm=icomm, config=config, exec_id=ckpt.exec_id, topology=ckpt.topology,
                                store=ckpt._store, rank=rank, nranks=size,
                                fault_hook=getattr(ckpt, "_ctx", None) and ckpt._ctx.fault_hook)
    ckpt._post = PostManager(ckpt._ctx, None)
    state.informed = True
    state.report.adopted = time.perf_counter()


def _take_over_lock(meta_dir: Any) -> Any:
    """The run lock for a replacement of rank 0 (the dead holder's lock is stale); None if it cannot."""
    from pathlib import Path

    try:
        return acquire_run_lock(Path(meta_dir), time.time())
    except (FtkitError, OSError):
        return None  # the job goes on; only a second job on the same meta_dir is no longer kept out


def forget_unreachable(ckpt: Checkpointer) -> None:
    """On a replacement: remove the dead rank's node-local files it could not reach on a real cluster."""
    ctx = ckpt._ctx
    for entry in ctx.store.manifest.checkpoints:
        for lv in (1, 2, 3):
            with contextlib.suppress(FtkitError, OSError, ValueError):
                ctx.level(lv, entry.nodes).remove(entry.id, ctx.rank)


# -- the application communicator ------------------------------------------------------------------------

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


def _guarded(name: str) -> Callable[..., Any]:
    base = _sendrecv if name == "Sendrecv" else getattr(MPI.Intracomm, name)
    agreed = name in _COLL

    def method(self: AppComm, *args: Any, **kwargs: Any) -> Any:
        ckpt = getattr(self, "_ckpt", None)
        state = ckpt._online if ckpt is not None else None
        if state is not None and state.fenced:
            fence.check_left(ckpt)
            return fence.fenced_result(self, name, args, kwargs)
        try:
            result = base(self, *args, **kwargs)
        except MPI.Exception as exc:
            if ckpt is None or state is None or not is_failure_error(exc):
                raise
            ckpt._on_failure(exc, f"ckpt.comm.{name}")
            return fence.fenced_result(self, name, args, kwargs)
        if agreed and ckpt is not None and state is not None and state.in_loop and not fence.all_completed(
                self, ckpt.config.failure_timeout):
            ckpt._on_failure(ProcessFailure(f"ckpt.comm.{name}: not completed on every rank"),
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
    so a result returned on one rank was returned on every rank. Outside the loop the failure is raised as
    :class:`~ftkit.errors.ProcessFailure`. Nonblocking calls and communicators derived from this one
    (``Dup``, ``Split``) are not guarded: use blocking calls on ``ckpt.comm`` in the loop.
    """

    _ckpt: Any = None

    @classmethod
    def wrap(cls, comm: Any, ckpt: Any) -> AppComm:
        """An AppComm on ``comm``'s handle, guarded by ``ckpt``; errors return instead of aborting."""
        app = cls(comm)
        app.Set_errhandler(MPI.ERRORS_RETURN)
        app._ckpt = ckpt
        return app


for _name in _P2P + _COLL:
    setattr(AppComm, _name, _guarded(_name))
del _name


# -- the loop's side: restore after a repair, and the end of the loop --------------------------------------


def restore(ckpt: Checkpointer) -> int:
    """Adopt the repaired communicator and restore every protected array (collective); return the step.

    A failure meanwhile repairs again and starts over (while spares last).

    Raises
    ------
    OnlineRecoveryError
        On every rank, if no spare is left, or no checkpoint is usable by the new set of ranks.
    """
    state = ckpt._online
    assert state is not None
    while True:
        try:
            if state.adopted is not state.rebuilt:
                assert state.rebuilt is not None and state.rebuilt.app is not None
                ckpt._adopt(state.rebuilt.app)
                state.adopted = state.rebuilt
            if state.fresh:
                forget_unreachable(ckpt)
            try:
                info, entry = recover_newest(ckpt._ctx, ckpt._protected, ckpt.recovery_steps, ckpt._layouts)
            except RecoveryError as exc:
                assert state.rebuilt is not None
                cannot_go_on(state.rebuilt, f"no checkpoint can be recovered by the new set of ranks ({exc})",
                             online_verdict.relaunch_verdict(ckpt, state.report.dead))
            ckpt._schedule.count = int(entry.extra.get("snapshots", 0))
            ckpt._recovered = True
            _mpi.barrier(ckpt._icomm, ckpt.config.failure_timeout, "online recovery: restored")
            state.report.restored = time.perf_counter()
        except BaseException as exc:
            if not is_process_failure(exc):
                raise
            repair(ckpt, exc)
            continue
        report = state.report
        report.checkpoint_id, report.level = info.checkpoint_id, info.level
        state.recoveries += 1
        report.number = state.recoveries
        state.history.append(report)
        state.fenced = state.fresh = False
        events.restored_online(ckpt.rank, report, entry)
        return int(entry.extra.get("next_step", 0))

