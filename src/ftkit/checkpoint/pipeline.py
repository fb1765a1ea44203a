"""The checkpoint pipeline: primary write → post-processing per level → manifest commit of what is complete.

1. :func:`write_primary` (local, never collective): this rank writes its protected arrays straight from their
   buffers into the *primary* level: L1, or L4 directly when ``level = 4`` and ``inline_l4 = 1`` (FTI writes
   inline L4 checkpoints straight to the PFS).
2. :func:`agree_written` (collective): every rank learns every rank's file size and digest, or all raise.
3. :func:`post_process` (collective): the levels above the primary one are produced from the primary file by
   the steps in :data:`POST_STEPS` (level → function): L4 flush here; L2 partner copy and L3 encoding are
   registered by :mod:`ftkit.storage.partner` / :mod:`ftkit.storage.encoded` users. It is a plain function of
   ``(ctx, job)`` so it can run inline, in a background thread or on a head rank.
4. :func:`commit` (collective): the entry (with per-level completion) goes into the manifest, which rank 0
   writes atomically; obsolete checkpoints are pruned from it, and only then are their files removed.
   :func:`commit_levels` records levels completed later (asynchronous post-processing).

A crash anywhere before step 4 leaves the previous manifest, hence the previous checkpoint, untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Config
from ..errors import CheckpointError, ConfigError, FtkitError, ProcessFailure, StorageError
from ..storage.base import StorageLevel
from ..storage.format import FileInfo
from ..storage.levels import LEVEL_CLASSES
from ..storage.levels import make_level as _make_level
from ..storage.manifest import CheckpointEntry, ManifestStore, RankFile, plan_prune
from ..topology import Topology
from . import _mpi

__all__ = ["LEVEL_CLASSES", "POST_STEPS", "PipelineContext", "CheckpointJob", "make_level", "plan_job",
           "write_primary", "agree_written", "post_process", "commit", "commit_levels", "remove_checkpoints",
           "flush_to_pfs"]

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


def make_level(level: int, config: Config, exec_id: str, nodes: Sequence[int]) -> StorageLevel:
    """Build the storage of ``level`` for this configuration (see :func:`ftkit.storage.levels.make_level`).

    Raises
    ------
    CheckpointError
        If no storage is registered for ``level``.
    """
    try:
        return _make_level(level, config.ckpt_dir, config.glbl_dir, exec_id, nodes, config.io_chunk_bytes)
    except StorageError as exc:
        raise CheckpointError(str(exc)) from exc


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
    extra: dict[str, Any] = field(default_factory=dict)   # goes to the manifest entry

    @property
    def levels(self) -> tuple[int, ...]:
        """Every level this checkpoint will be complete at."""
        return (self.primary, *self.post_levels)


PostStep = Callable[[PipelineContext, CheckpointJob], None]


def flush_to_pfs(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Post-processing for L4: copy this rank's L1 file to ``glbl_dir`` (local work; collective-safe)."""
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    ctx.level(4, job.nodes).put_file(job.ckpt_id, ctx.rank, src)


#: Post-processing step of each level (level → step). A step does this rank's share of producing that
#: level's copy from the primary file; it may communicate over ``ctx.comm`` (all ranks call it) and raises on
#: failure. Levels 2 and 3 are registered by the node-loss work.
POST_STEPS: dict[int, PostStep] = {4: flush_to_pfs}


def plan_job(ctx: PipelineContext, level: int, ckpt_id: int, seq: int) -> CheckpointJob:
    """Decide the primary level and the post-processing levels of a checkpoint at ``level``.

    Raises
    ------
    CheckpointError
        If ``level`` is not 1..4 or its post-processing is not available.
    """
    if level not in (1, 2, 3, 4):
        raise CheckpointError(f"checkpoint level {level!r} is invalid: use 1 (local), 2 (partner), "
                              "3 (Reed-Solomon/XOR group), or 4 (parallel file system)")
    cfg = ctx.config
    try:
        cfg.check_level(level)  # e.g. group_size = 1 (loaded with L2/L3 off): L2/L3 refused here
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from exc
    primary = 4 if (level == 4 and cfg.inline_l4 and not cfg.enable_dcp) else 1
    post = () if level == primary else (level,)
    for lv in post:
        if lv not in POST_STEPS or lv not in LEVEL_CLASSES:
            raise CheckpointError(f"checkpoint level {lv} is not available in this ftkit yet "
                                  f"(available: {sorted({1, 4} | set(POST_STEPS))})")
    return CheckpointJob(ckpt_id=ckpt_id, level=level, seq=seq, primary=primary, post_levels=post,
                         nodes=list(ctx.topology.node_of))


def write_primary(ctx: PipelineContext, job: CheckpointJob, arrays: Sequence[tuple[str, np.ndarray]],
                  meta: dict[str, Any] | None = None) -> FileInfo:
    """Write this rank's file of ``job`` into its primary level, straight from ``arrays`` (not collective)."""
    info = ctx.level(job.primary, job.nodes).write(job.ckpt_id, ctx.rank, arrays, level=job.level,
                                                   nranks=ctx.nranks, meta=meta)
    job.file = info
    return info


def _agree(ctx: PipelineContext, error: str | None, what: str) -> None:
    """Raise CheckpointError on every rank if ``error`` is set on any (messages name the ranks)."""
    if _mpi.all_true(ctx.comm, error is None, ctx.timeout, what):
        return
    errors = _mpi.allgather(ctx.comm, error, what)
    bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
    raise CheckpointError(f"{what} failed on {len(bad)} rank(s): " + "; ".join(bad[:4])
                          + (" ..." if len(bad) > 4 else ""))


def agree_written(ctx: PipelineContext, job: CheckpointJob, error: str | None) -> list[RankFile]:
    """Collectively check that every rank wrote its file; fill and return ``job.files``.

    Raises
    ------
    CheckpointError
        On every rank, naming the ranks whose write failed.
    """
    _agree(ctx, error, f"checkpoint {job.ckpt_id}: writing the L{job.primary} files")
    assert job.file is not None
    pairs = _mpi.allgather(ctx.comm, (job.file.size, job.file.digest), "checkpoint file exchange")
    job.files = [RankFile(int(s), str(d)) for s, d in pairs]
    return job.files


def post_process(ctx: PipelineContext, job: CheckpointJob) -> dict[int, bool]:
    """Run the post-processing steps of ``job`` (collective); return the levels completed.

    Raises
    ------
    CheckpointError
        On every rank if a step failed on any rank.
    """
    done: dict[int, bool] = {}
    for lv in job.post_levels:
        error = None
        try:
            POST_STEPS[lv](ctx, job)
        except ProcessFailure:
            raise
        except (FtkitError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        _agree(ctx, error, f"checkpoint {job.ckpt_id}: L{lv} post-processing")
        done[lv] = True
    return done


def commit(ctx: PipelineContext, job: CheckpointJob, levels: dict[int, bool]) -> list[CheckpointEntry]:
    """Add ``job`` to the manifest with per-level completion ``levels``, prune, and commit (collective).

    Returns the pruned entries; the caller removes their files (after this returned, i.e. after the commit).
    """
    entry = CheckpointEntry(id=job.ckpt_id, seq=job.seq, level=job.level, time=time.time(),
                            levels={lv: bool(levels.get(lv, False)) for lv in job.levels},
                            nodes=list(job.nodes), files=list(job.files), extra=dict(job.extra))
    ctx.store.add(entry)
    return _prune_and_write(ctx, f"checkpoint {job.ckpt_id}: manifest commit")


def commit_levels(ctx: PipelineContext, ckpt_id: int, levels: dict[int, bool]) -> list[CheckpointEntry]:
    """Record levels of checkpoint ``ckpt_id`` completed later (e.g. by background work), prune, commit.

    Collective over ``ctx.comm``; returns the pruned entries (remove their files afterwards).
    """
    ctx.store.set_levels(ckpt_id, levels)
    return _prune_and_write(ctx, f"checkpoint {ckpt_id}: manifest update")


def _prune_and_write(ctx: PipelineContext, what: str) -> list[CheckpointEntry]:
    with ctx.store.lock:
        ids = plan_prune(ctx.store.manifest, keep_all_l4=bool(ctx.config.keep_l4_ckpt))
        pruned = [e for e in ctx.store.manifest.checkpoints if e.id in ids]
        ctx.store.drop(ids)
        ctx.hook("before_commit")
        error = None
        if ctx.rank == 0:
            try:
                ctx.store.commit()
            except (FtkitError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
        error = _mpi.bcast(ctx.comm, error, 0, what)
        if error:
            raise CheckpointError(f"{what} failed on rank 0: {error}")
        ctx.hook("after_commit")
    return pruned


def remove_checkpoints(ctx: PipelineContext, entries: Sequence[CheckpointEntry]) -> None:
    """Delete this rank's files of ``entries`` at every level (not collective; missing files are fine)."""
    for e in entries:
        for lv in sorted(LEVEL_CLASSES):
            try:
                ctx.level(lv, e.nodes).remove(e.id, ctx.rank)
            except OSError:
                pass  # best effort: an unremovable old file must not fail a good checkpoint


from . import redundancy as _redundancy  # noqa: E402  (registers the L2/L3 post steps; imports this module)

_redundancy.register()
