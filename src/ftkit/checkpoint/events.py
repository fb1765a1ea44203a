"""The checkpointer's lines of the event log (:mod:`ftkit.eventlog`): one per event, on rank 0, at INFO.

Every function here is called where the pipeline already holds the data (the agreed file sizes of a
checkpoint, the recovered entry, the agreed outcome of a repair): nothing communicates, and nothing is
gathered or formatted unless the logger is enabled for the record's level.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..config import Config
from ..config import load_config as _load_config
from ..eventlog import configure, format_size, get_logger, warn_once
from ..storage.manifest import CheckpointEntry
from .contract import CheckpointJob, PipelineContext

__all__ = ["load_config", "start", "checkpoint_taken", "level_completed", "kept", "recovered",
           "failure_seen", "shrunk", "restored_online", "exit_requested"]

CKPT = get_logger("checkpoint")
RECOVERY = get_logger("recovery")
FAILURE = get_logger("failure")
_INFO, _DEBUG = logging.INFO, logging.DEBUG


def load_config(config: Any, rank: int) -> Config:
    """:func:`ftkit.config.load_config` (which issues the configuration's notes once per job, on the
    launcher's rank 0), then set the event log from it (:func:`start`)."""
    cfg = _load_config(config)
    start(cfg, rank)
    return cfg


def start(config: Config, rank: int) -> None:
    """Set the event log's level from ``config`` (and ``FTKIT_LOG``) and the rank its handler shows (the
    application rank; again after a head split or an online recovery). Not collective."""
    configure(config.verbosity, config.log_level, rank, verbosity_set="verbosity" in config.present)


def _rate(nbytes: int, seconds: float) -> str:
    return f"{format_size(nbytes / seconds)}/s" if seconds > 0 else "-"


def checkpoint_taken(ctx: PipelineContext, job: CheckpointJob, levels: dict[int, bool],
                     seconds: float) -> None:
    """After a checkpoint's commit: its line (rank 0) and this rank's file (DEBUG)."""
    if ctx.rank == 0 and CKPT.isEnabledFor(_INFO):
        nbytes = sum(f.size for f in job.files)
        later = [lv for lv in job.levels if not levels.get(lv)]
        CKPT.info("checkpoint %d at L%d: %s in %.3f s (%s), %d rank%s%s", job.ckpt_id, job.level,
                  format_size(nbytes), seconds, _rate(nbytes, seconds), len(job.files),
                  "s" if len(job.files) != 1 else "",
                  f"; L{'/L'.join(map(str, later))} in the background" if later else "")
    if CKPT.isEnabledFor(_DEBUG):
        size = job.file.size if job.file is not None else -1
        CKPT.debug("checkpoint %d: rank %d wrote %d bytes at L%d on node %d", job.ckpt_id, ctx.rank, size,
                   job.primary, ctx.topology.node_id)


def level_completed(ctx: PipelineContext, ckpt_id: int, levels: Sequence[int]) -> None:
    """Background post-processing committed ``levels`` of ``ckpt_id`` (rank 0)."""
    if ctx.rank == 0 and CKPT.isEnabledFor(_INFO):
        CKPT.info("checkpoint %d: L%s complete (background post-processing)", ckpt_id,
                  "/L".join(map(str, levels)))


def kept(ctx: PipelineContext, ckpt_id: int | None, flushed: bool) -> None:
    """``finalize()`` with ``keep_last_ckpt = 1``: which checkpoint is kept at L4 (rank 0)."""
    if ctx.rank == 0 and CKPT.isEnabledFor(_INFO):
        if ckpt_id is None:
            CKPT.info("finalize: no complete checkpoint to keep at L4")
        else:
            CKPT.info("finalize: checkpoint %d kept at L4%s; node-local files removed", ckpt_id,
                      " (flushed now)" if flushed else "")


def recovered(ctx: PipelineContext, info: Any, entry: CheckpointEntry, seconds: float) -> None:
    """After ``recover()``: the line of the recovery, the skipped checkpoints (WARNING), this rank's level
    (DEBUG)."""
    if ctx.rank == 0:
        for why in info.skipped:
            warn_once(RECOVERY, f"skipped {ctx.exec_id} {why}", "recovery skipped %s", why)
        if RECOVERY.isEnabledFor(_INFO):
            nbytes = sum(f.size for f in entry.files)
            other = (f" (written by {len(entry.files)} ranks, read by {ctx.nranks})"
                     if len(entry.files) != ctx.nranks else "")
            RECOVERY.info("recovered checkpoint %d from L%d: %s in %.3f s (%s)%s", info.checkpoint_id,
                          info.level, format_size(nbytes), seconds, _rate(nbytes, seconds), other)
    if RECOVERY.isEnabledFor(_DEBUG):
        RECOVERY.debug("recovery of checkpoint %d: rank %d read its data from L%d", info.checkpoint_id,
                       ctx.rank, info.source_level)


def failure_seen(rank: int, rebuilt: Any, shrinking: bool) -> None:
    """After the repair's agreement: the failure and what replaces the dead ranks (lowest survivor)."""
    if FAILURE.isEnabledFor(_DEBUG):
        FAILURE.debug("rank %d: process failure seen; dead ranks %s", rank, list(rebuilt.dead))
    if not rebuilt.survivors or rank != min(rebuilt.survivors) or not FAILURE.isEnabledFor(_INFO):
        return
    FAILURE.info("process failure: rank(s) %s dead", ", ".join(map(str, rebuilt.dead)))
    for dead in sorted(rebuilt.replaced):
        FAILURE.info("spare promoted to rank %d", dead)
    if rebuilt.missing and not shrinking:
        FAILURE.info("no spare left for rank(s) %s: online recovery impossible",
                     ", ".join(map(str, rebuilt.missing)))


def shrunk(new_rank: int, old_size: int, new_size: int) -> None:
    """The survivors formed a smaller communicator (new rank 0)."""
    if new_rank == 0 and FAILURE.isEnabledFor(_INFO):
        FAILURE.info("shrink: continuing on %d ranks instead of %d (no spare left)", new_size, old_size)


def restored_online(rank: int, report: Any, entry: CheckpointEntry) -> None:
    """An online recovery's restore is done (new rank 0): checkpoint, level, bytes, seconds per phase."""
    if rank == 0 and RECOVERY.isEnabledFor(_INFO):
        phases = ", ".join(f"{k} {v:.3f} s" for k, v in report.phases().items())
        RECOVERY.info("online recovery %d: checkpoint %d restored from L%d, %s, in %.3f s (%s)",
                      report.number, report.checkpoint_id, report.level,
                      format_size(sum(f.size for f in entry.files)), report.seconds, phases)


def exit_requested(rank: int, why: str, note: str) -> None:
    """``should_exit()`` turned true (rank 0): why (halt, signal, walltime) and the checkpoint taken."""
    if rank == 0 and CKPT.isEnabledFor(_INFO):
        CKPT.info("should_exit(): %s: %s; the job ends cleanly", why, note)
