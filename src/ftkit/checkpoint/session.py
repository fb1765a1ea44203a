"""A run's session: everything a :class:`~ftkit.checkpoint.Checkpointer` works with between start-up and
finalize, in one record.

A :class:`Session` holds the communicators (the application's ``comm``, ftkit's internal ``icomm``), this
rank's place (``rank``, ``nranks``, ``topology``), the run (``exec_id``, the manifest ``store``, the run
``lock``, whether it ``restarted`` and the ``problem`` found at start-up), and what serves it (the snapshot
``schedule``, the pipeline context ``ctx``, the post-processing ``post``, the ``exit`` policy, the head
links). Its life:

- **opened** in one place, :func:`ftkit.checkpoint.opening.open_session` (``Checkpointer()``);
- **replaced as a whole** by online recovery, spare promotion and shrink
  (:func:`ftkit.checkpoint.online.adopt.adopt_session` returns the new one; the records of
  :mod:`.handover`, ``online`` and ``shrink``, are handed on);
- **closed** in one place, :meth:`Session.close`.

The Checkpointer holds one session; the online-recovery package takes and returns sessions and never sees
the Checkpointer. :func:`build_session` is the part of opening and adopting that both share.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Config
from ..errors import CheckpointError
from ..storage.manifest import ManifestStore
from ..topology import Topology
from . import _mpi
from .contract import PipelineContext
from .exitpolicy import ExitPolicy
from .handover import OnlineState, ShrinkState
from .head import HeadLinks
from .offload import PostManager
from .runlock import RunLock
from .schedule import SnapshotSchedule

__all__ = ["Session", "CheckpointStatus", "build_session", "release"]

_ID_MAX = 2**63 - 1  # checkpoint ids are stored as signed 64-bit integers


@dataclass(frozen=True)
class CheckpointStatus:
    """What :meth:`Checkpointer.status` reports (FTI_Status, and more): ``checkpoints`` lists
    ``(id, level, complete_levels)`` oldest first."""

    restarted: bool
    recovered: bool
    exec_id: str
    checkpoints: tuple[tuple[int, int, tuple[int, ...]], ...]
    last_checkpoint_id: int | None
    snapshots: int
    problem: str


@dataclass
class Session:
    """The run-scoped state of one Checkpointer (see the module docstring). Replace it, do not edit it:
    only ``closed`` changes in place (and the handed-on records ``online`` and ``shrink``)."""

    config: Config
    comm: Any                          # the application's communicator (an AppComm with online recovery)
    icomm: Any                         # ftkit's internal communicator (application ranks, ERRORS_RETURN)
    rank: int
    nranks: int
    topology: Topology
    exec_id: str
    store: ManifestStore
    restarted: bool
    problem: str
    schedule: SnapshotSchedule
    ctx: PipelineContext
    post: PostManager
    exit: ExitPolicy
    lock: RunLock | None = None
    links: HeadLinks | None = None
    online: OnlineState | None = None
    shrink: ShrinkState = field(default_factory=ShrinkState)
    closed: bool = False

    def close(self) -> None:
        """Close the run (idempotent, never raises): idle spares released, post-processing and the exit
        policy closed, the run lock released, the internal communicator freed."""
        if self.closed:
            return
        self.closed = True
        release(self.icomm, self.lock, self.online, self.config.failure_timeout, self.post, self.exit)

    def status(self, recovered: bool) -> CheckpointStatus:
        """The run's :class:`CheckpointStatus` (``recovered``: whether the Checkpointer recovered)."""
        m = self.store.manifest
        ordered = sorted(m.checkpoints, key=lambda e: e.seq)
        cps = tuple((e.id, e.level, tuple(e.complete_levels)) for e in ordered)
        newest = m.newest_first()
        return CheckpointStatus(self.restarted, recovered, self.exec_id, cps,
                                newest[0].id if newest else None, self.schedule.count, self.problem)

    def agree_id(self, requested: int | None) -> int:
        """The id of the next checkpoint: ``requested`` (the same on every rank, checked: collective), or
        the manifest's next one.

        Raises
        ------
        CheckpointError
            On every rank, if ``requested`` is not an integer in 1 .. 2**63 - 1, differs across ranks, or
            is not larger than the newest checkpoint's id.
        """
        m = self.store.manifest
        if requested is None:
            return m.next_id
        if (isinstance(requested, bool) or not isinstance(requested, int | np.integer)
                or not 1 <= requested <= _ID_MAX):
            raise CheckpointError(f"checkpoint id {requested!r} must be an integer from 1 to {_ID_MAX} "
                                  "(ids are stored as signed 64-bit integers)")
        timeout = self.config.failure_timeout
        lo = _mpi.allreduce_int(self.icomm, int(requested), "min", timeout, "checkpoint id")
        hi = _mpi.allreduce_int(self.icomm, int(requested), "max", timeout, "checkpoint id")
        if lo != hi:
            raise CheckpointError(f"checkpoint ids differ across ranks ({lo}..{hi}): pass the same id on "
                                  "every rank")
        if requested < m.next_id:
            raise CheckpointError(f"checkpoint id {requested} is not larger than the newest one "
                                  f"({m.next_id - 1}): ids must increase")
        return int(requested)


def release(icomm: Any, lock: RunLock | None, online: OnlineState | None, timeout: float,
            *parts: PostManager | ExitPolicy) -> None:
    """Close what a run holds, in this order: idle spares released, ``parts`` closed, the run lock
    released, ``icomm`` freed (also for a session that failed to open). Never raises."""
    if online is not None:
        online.release_spares(timeout)
    for part in parts:
        with contextlib.suppress(Exception):
            part.close()
    if lock is not None:
        lock.release()
    try:
        icomm.Free()
    except Exception:  # noqa: BLE001 - a communicator with dead peers may refuse to be freed
        pass


def build_session(config: Config, comm: Any, icomm: Any, topology: Topology, exec_id: str,
                  store: ManifestStore, *, restarted: bool, problem: str, exit: ExitPolicy,
                  lock: RunLock | None = None, links: HeadLinks | None = None,
                  online: OnlineState | None = None, shrink: ShrinkState | None = None,
                  fault_hook: Any = None) -> Session:
    """The session on ``icomm`` (collective): its snapshot schedule, pipeline context and post-processing
    made afresh, the rest given. On an error nothing given is released (the caller decides)."""
    rank, nranks = icomm.Get_rank(), icomm.Get_size()
    # The schedule's sync point asks the post-processing (made below) whether background work failed.
    schedule = SnapshotSchedule.from_config(config, icomm, probe=lambda: post.failure_flag())
    ctx = PipelineContext(comm=icomm, config=config, exec_id=exec_id, topology=topology, store=store,
                          rank=rank, nranks=nranks, fault_hook=fault_hook)
    post = PostManager(ctx, links)
    return Session(config=config, comm=comm, icomm=icomm, rank=rank, nranks=nranks, topology=topology,
                   exec_id=exec_id, store=store, restarted=restarted, problem=problem, schedule=schedule,
                   ctx=ctx, post=post, exit=exit, lock=lock, links=links, online=online,
                   shrink=shrink if shrink is not None else ShrinkState())
