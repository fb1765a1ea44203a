"""The contract between the checkpoint pipeline and its levels: what a level's steps receive and return.

A *level* (one module of :mod:`ftkit.checkpoint.levels`, or any module its record in the level table
:mod:`ftkit.storage.levels` names) is described by a :class:`Level`: its post-processing step (produce this
level's copy from the primary file), the recovery steps it adds to the recovery chain, and, for head mode,
what a rank tells its head and what the head then does. The pipeline, the recovery chain and the executors
read it through :data:`ftkit.checkpoint.levels.LEVELS`, a view of the level table; nothing is registered at
import time.

Rules every level follows:

- A post-processing step is a plain function of ``(ctx, job)``: it may run inline, in a background thread
  (with ``ctx.comm`` replaced by the thread's duplicate) or be replaced by the head's work. If it
  communicates, every rank calls it. It raises on failure (an ftkit error or ``OSError``).
- :meth:`RecoveryStep.locate` is collective over ``ctx.comm`` and never raises for a missing or damaged file:
  it returns ``Located(reason=...)``; a failed peer is a :class:`~ftkit.errors.ProcessFailure`.

This module imports no level.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..config import Config
from ..errors import CheckpointError, FtkitError, ProcessFailure, StorageError
from ..storage._fsutil import BackgroundSyncs
from ..storage.format.container import FileInfo, Header
from ..storage.levels import make_level as _make_level
from ..storage.manifest import CheckpointEntry, ManifestStore, RankFile
from ..storage.pending import PendingFile
from ..storage.placement.level_storage import StorageLevel
from ..topology import Topology

__all__ = ["PipelineContext", "CheckpointJob", "make_level", "PostStep", "Located", "RecoveryStep",
           "LevelFileStep", "Level", "DAMAGED", "HeadRequest", "HeadWork"]


def make_level(level: int, config: Config, exec_id: str, nodes: Sequence[int]) -> StorageLevel:
    """Build the storage of ``level`` for this configuration (see :func:`ftkit.storage.levels.make_level`).

    Raises
    ------
    CheckpointError
        If no storage exists for ``level``.
    """
    try:
        return _make_level(level, config.ckpt_dir, config.glbl_dir, exec_id, nodes, config.io_chunk_bytes)
    except StorageError as exc:
        raise CheckpointError(str(exc)) from exc


@dataclass
class PipelineContext:
    """What every pipeline and recovery step may use (one per Checkpointer)."""

    comm: Any                      # internal communicator (application ranks, ERRORS_RETURN)
    config: Config
    exec_id: str
    topology: Topology
    store: ManifestStore
    rank: int
    nranks: int
    fault_hook: Callable[[str], None] | None = None

    @property
    def timeout(self) -> float:
        """Seconds any wait on a peer may take (``failure_timeout``)."""
        return self.config.failure_timeout

    def level(self, level: int, nodes: Sequence[int] | None = None) -> StorageLevel:
        """The storage of ``level`` for this run, placing files by ``nodes`` (default: current topology)."""
        return make_level(level, self.config, self.exec_id, self.topology.node_of if nodes is None else nodes)

    def hook(self, stage: str) -> None:
        """Call the fault-injection hook (tests kill a rank at a precise stage)."""
        if self.fault_hook is not None:
            self.fault_hook(stage)


@dataclass
class CheckpointJob:
    """One checkpoint in flight, as seen by one rank."""

    ckpt_id: int
    level: int                     # level requested
    seq: int
    primary: int                   # level written from the buffers (1, or 4 for inline L4)
    post_levels: tuple[int, ...]   # levels produced from the primary file by post-processing
    nodes: list[int]
    file: FileInfo | None = None   # this rank's file, after write_primary
    files: list[RankFile] = field(default_factory=list)   # every rank's, after agree_written
    # The primary file while its fsync runs in the background (inline L2/L3: see pipeline.write_primary);
    # its bytes are served from the protected arrays until post_process settles it.
    pending: PendingFile | None = None
    # Where the post steps of levels with ``Level.background_fsync`` hand their files' fsyncs (inline
    # post-processing only); None: they fsync before the commit.
    syncs: BackgroundSyncs | None = None
    # The primary file is removed as soon as the post levels are committed (finalize() keeping the last
    # checkpoint at L4): L4 may then take it by a hard link instead of a copy.
    primary_removed: bool = False
    # Earlier checkpoints whose ``unsynced`` levels this job's commit settles: id → durable on every rank
    # (agreed by agree_written; see ftkit.checkpoint.offload).
    settle: dict[int, bool] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)   # goes to the manifest entry

    @property
    def levels(self) -> tuple[int, ...]:
        """Every level this checkpoint will be complete at."""
        return (self.primary, *self.post_levels)


#: What a reader of a damaged file may raise: ftkit's format/corruption errors, OS errors, and whatever a
#: parser raises on bad data. Recovery takes any of them as "this copy is damaged" and tries the next one.
DAMAGED: tuple[type[BaseException], ...] = (FtkitError, OSError, ValueError, TypeError, KeyError, IndexError,
                                            AttributeError, RecursionError, OverflowError)

#: A level's post-processing: this rank's share of producing the level's copy from the primary file.
PostStep = Callable[[PipelineContext, CheckpointJob], None]
#: Head mode, application side: the level's fields of the request a rank sends to its head.
HeadRequest = Callable[[PipelineContext, CheckpointJob], dict[str, Any]]
#: Head mode, head side: do one rank's request; the communicator joins the heads of the node set.
HeadWork = Callable[[dict[str, Any], Any], None]


@dataclass
class Located:
    """A step's answer for one rank: where to read its verified file, or why it could not supply one."""

    storage: StorageLevel | None = None
    header: Header | None = None
    reason: str = ""
    level: int = 0

    @property
    def ok(self) -> bool:
        return self.storage is not None and self.header is not None


class RecoveryStep(ABC):
    """One link of the recovery chain: a level that can supply (or rebuild) a rank's checkpoint file."""

    level: ClassVar[int]

    def applies(self, entry: CheckpointEntry) -> bool:
        """Whether this step can help for ``entry`` (default: the entry is complete at this level)."""
        return entry.complete(self.level)

    @abstractmethod
    def locate(self, ctx: PipelineContext, entry: CheckpointEntry, need: bool) -> Located:
        """Supply this rank's verified file of ``entry`` if ``need``; collective over ``ctx.comm``.

        Called on every rank while any rank needs a file; a rank with ``need = False`` only takes part in the
        step's communication. Must not raise for a missing or damaged file: return ``Located(reason=...)``.
        """


class LevelFileStep(RecoveryStep):
    """A step reading the rank's own file at one level, verified against the manifest (no communication)."""

    def locate(self, ctx: PipelineContext, entry: CheckpointEntry, need: bool) -> Located:
        if not need:
            return Located()
        storage = ctx.level(self.level, entry.nodes)
        try:
            header = storage.verify(entry.id, ctx.rank, entry.files[ctx.rank].digest)
        except ProcessFailure:
            raise
        except DAMAGED as exc:
            return Located(reason=str(exc), level=self.level)
        return Located(storage, header, level=self.level)


@dataclass(frozen=True)
class Level:
    """One checkpoint level, as the pipeline, the recovery chain and the executors see it.

    Attributes
    ----------
    number
        FTI's level number (1 local, 2 partner, 3 encoded, 4 parallel file system).
    name
        Short name for messages.
    post
        Post-processing step producing this level from the primary file (None: only ever primary).
    recovery
        Recovery steps of this level, in the order the chain tries them.
    prepare
        Records in ``job.extra`` what recovery of this level needs, before the entry is committed (the
        post-processing may run later, in the background).
    head_request, head_work
        Head mode: the level's fields of a rank's request, and the head's work on one request (None: the
        heads cannot do this level).
    needs_groups
        Whether the heads need the node set's communicator for this level.
    from_buffers
        Whether the post step reads the primary file's bytes from ``job.pending`` when there is one.
    background_fsync
        Whether the post step hands its files' fsyncs to ``job.syncs`` when there is one (the level is then
        committed as ``unsynced``, see :mod:`ftkit.storage.manifest`).
    warm
        Prepares, while the primary file is written, what the post step will need (None: nothing).

    The level's other facts (root, storage class, node-loss rule, configuration keys, recovery order) are its
    record in the level table, :mod:`ftkit.storage.levels`.
    """

    number: int
    name: str
    post: PostStep | None = None
    recovery: tuple[type[RecoveryStep], ...] = ()
    prepare: PostStep | None = None
    head_request: HeadRequest | None = None
    head_work: HeadWork | None = None
    needs_groups: bool = False
    from_buffers: bool = False
    background_fsync: bool = False
    warm: Callable[[PipelineContext], None] | None = None
