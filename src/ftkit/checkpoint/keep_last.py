"""What ``finalize()`` does with the run's checkpoints: FTI's ``keep_last_ckpt = 1`` (the last checkpoint made
complete at L4, node-local storage removed, the run left restartable) or, with ``keep_last_ckpt = 0``, every
checkpoint and the run's directories removed (:func:`remove_run`).

FTI's ``FTI_Finalize`` with ``keep_last_ckpt = 1`` flushes the last checkpoint to the global directory (L4),
removes node-local storage and marks the run as restartable, so a relaunch on other nodes, or after the batch
system wiped the node-local disks between jobs, recovers from L4. :func:`keep_last_at_l4` does the same, in an
order that loses nothing if it fails or a rank dies part-way:

1. The newest complete checkpoint gets its L4 copy from its L1 files if it has none (collective; the L4
   post-processing step of the pipeline, so a differential write with ``enable_dcp = 1``; a hard link
   of the L1 file where ``ckpt_dir`` and ``glbl_dir`` share a file system, as the L1 file is removed in
   step 3), and level 4 is committed in the manifest. A failure on any rank raises
   :class:`~ftkit.errors.CheckpointError` on every rank and removes nothing: the checkpoint stays
   where it was.
2. The manifest then lists that checkpoint alone, complete at L4 only, with status ``"kept"`` (committed).
3. Only then are the files of every other checkpoint, the kept checkpoint's node-local copies and the run's
   node-local directories removed.
"""

from __future__ import annotations

import copy

from ..errors import CheckpointError
from ..storage import levels as table
from ..storage.manifest import CheckpointEntry, manifest_path
from ..topology import Topology
from . import _mpi, events, pipeline
from .contract import CheckpointJob, PipelineContext
from .runstate import remove_run_marker

__all__ = ["keep_last_at_l4", "remove_run"]


def keep_last_at_l4(ctx: PipelineContext, topology: Topology) -> None:
    """Keep the newest complete checkpoint at L4 only and remove everything node-local (collective).

    Call after background post-processing has finished (``finalize()`` waits for it first).

    Raises
    ------
    CheckpointError
        On every rank, if the L4 copy or a manifest commit failed (then nothing has been removed), or if the
        newest complete checkpoint has no L1 copy to flush from.
    ProcessFailure
        If a peer failed meanwhile.
    """
    m = ctx.store.manifest
    complete = [e for e in m.newest_first() if e.complete_levels]
    keep = complete[0] if complete else None
    pruned: list[CheckpointEntry] = []
    flushed = keep is not None and not keep.complete(4)
    if keep is not None and flushed:
        pruned = _flush_to_l4(ctx, keep)
    with ctx.store.lock:
        saved = copy.deepcopy(m)
        others = [e for e in m.checkpoints if keep is None or e.id != keep.id]
        ctx.store.drop(e.id for e in others)
        if keep is not None:
            kept = ctx.store.manifest.entry(keep.id)
            kept.levels = {4: True}   # its node-local copies are removed below
            kept.extra.pop("unsynced", None)
        ctx.store.manifest.status = "kept"
        try:
            pipeline.commit_manifest(ctx, "finalize(): keep_last_ckpt = 1: the manifest commit (nothing was "
                                          "removed)")
        except BaseException:
            ctx.store.manifest = saved
            raise
    pipeline.remove_checkpoints(ctx, pruned + others)
    if keep is not None:
        for lv in table.node_local():
            try:
                ctx.level(lv, keep.nodes).remove(keep.id, ctx.rank)
            except OSError:
                pass  # best effort, as pipeline.remove_checkpoints: the L4 copy is committed
    _mpi.barrier(ctx.comm, ctx.timeout, "finalize")
    if topology.rank_in_node == 0:
        _remove_local_run_dir(ctx, topology)
    events.kept(ctx, keep.id if keep is not None else None, flushed)


def _flush_to_l4(ctx: PipelineContext, entry: CheckpointEntry) -> list[CheckpointEntry]:
    """Produce ``entry``'s L4 copy from its L1 files and commit level 4; return the entries pruned by it."""
    if not entry.complete(1):
        raise CheckpointError(f"finalize(): keep_last_ckpt = 1: checkpoint {entry.id} is complete at "
                              f"L{entry.complete_levels} but not at L1, so it cannot be flushed to L4; its "
                              "copies are left where they are")
    if len(entry.files) != ctx.nranks:  # recovered elastically and not checkpointed since
        raise CheckpointError(f"finalize(): keep_last_ckpt = 1: checkpoint {entry.id} was written by "
                              f"{len(entry.files)} ranks, this run has {ctx.nranks}: checkpoint once before "
                              "finalize() to keep it at L4; its copies are left where they are")
    job = CheckpointJob(ckpt_id=entry.id, level=entry.level, seq=entry.seq, primary=1,
                        post_levels=(4,), nodes=list(entry.nodes), files=list(entry.files),
                        primary_removed=True)
    # The pipeline's L4 step: dCP with enable_dcp = 1, else a full copy, or a hard link where the L1 file
    # and glbl_dir share a file system (the L1 file is removed below, after the commit).
    pipeline.post_process(ctx, job)
    with ctx.store.lock:
        if ctx.config.enable_dcp:
            ctx.store.manifest.entry(entry.id).extra["dcp"] = True
    return pipeline.commit_levels(ctx, entry.id, {4: True})


def _remove_local_run_dir(ctx: PipelineContext, topology: Topology) -> None:
    """Remove this node's directory of the run (``ckpt_dir/node<i>/<exec_id>``), checked to lie inside the
    node's directory first (:class:`~ftkit.errors.UnsafePathError` otherwise)."""
    pipeline.remove_run_dir(topology.local_dir, ctx.exec_id, "node-local run directory")


def remove_run(ctx: PipelineContext) -> None:
    """Remove every checkpoint of the run, its directories and its manifest (collective, keep_last_ckpt = 0).

    The manifest is committed empty first, so a crash part-way leaves a fresh start, never a manifest that
    lists removed files.

    Raises
    ------
    CheckpointError
        If the empty manifest cannot be committed (the in-memory manifest is restored; nothing is removed).
    ProcessFailure
        If a peer dies during the final barrier.
    """
    store = ctx.store
    entries = list(store.manifest.checkpoints)
    with store.lock:
        saved = copy.deepcopy(store.manifest)
        store.drop(e.id for e in entries)
        try:
            pipeline.commit_manifest(ctx, "finalize(): manifest commit")
        except BaseException:
            store.manifest = saved
            raise
    pipeline.remove_checkpoints(ctx, entries)
    if ctx.topology.rank_in_node == 0:
        pipeline.remove_run_dir(ctx.topology.local_dir, ctx.exec_id, "the run's node-local directory")
    _mpi.barrier(ctx.comm, ctx.config.failure_timeout, "finalize")
    if ctx.rank == 0:
        pipeline.remove_run_dir(ctx.config.glbl_dir, ctx.exec_id, "the run's directory in glbl_dir")
        try:
            manifest_path(ctx.config.meta_dir).unlink()
        except FileNotFoundError:
            pass
        remove_run_marker(ctx.config.meta_dir)
