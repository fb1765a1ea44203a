"""The checkpoint pipeline: primary write → post-processing per level → manifest commit of what is done.

1. :func:`write_primary` (local, never collective): this rank writes its protected arrays straight from their
   buffers into the *primary* level: L1, or L4 directly when ``level = 4`` and ``inline_l4 = 1`` (FTI writes
   inline L4 checkpoints straight to the PFS).
2. :func:`agree_written` (collective): every rank learns every rank's file size and digest, or all raise.
3. :func:`post_process` (collective): the levels above the primary one are produced from the primary file by
   each level's post-processing step, read from the level table :data:`ftkit.checkpoint.levels.LEVELS`
   (L2 partner copy in ``levels/partner.py``, L3 encoding in ``levels/encoded.py``, L4 flush in
   ``levels/pfs.py``). A step is a plain function of ``(ctx, job)`` so it can run inline, in a background
   thread or be replaced by a head rank's work. Inline L2/L3 steps read the primary file's bytes from the
   protected arrays while its fsync runs (``job.pending``, :mod:`ftkit.storage.pending`); it is committed
   before the ranks agree on the level.
4. :func:`commit` (collective): the entry (with per-level completion) goes into the manifest, which rank 0
   writes atomically; obsolete checkpoints are pruned from it, and only then are their files removed.
   :func:`commit_levels` records levels completed later (asynchronous post-processing). A commit is a
   transaction: if writing the manifest fails, the in-memory manifest is restored on every rank exactly as
   it was, so the next commit neither claims the failed checkpoint nor forgets the pruned ones.

A crash anywhere before step 4 leaves the previous manifest, hence the previous checkpoint, untouched.
"""

from __future__ import annotations

import contextlib
import copy
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from .._paths import check_plain_name, check_removable, inside
from ..errors import CheckpointError, ConfigError, FtkitError, ProcessFailure, TimeoutFailure
from ..failure.ulfm import agree_within, revoke
from ..mpienv import probe_ulfm
from ..storage import levels as table
from ..storage.format.container import FileInfo
from ..storage.format.global_layout import Layout
from ..storage.manifest import CheckpointEntry, RankFile, plan_prune
from . import _mpi
from .contract import CheckpointJob, PipelineContext
from .levels import LEVELS, level

__all__ = ["plan_job", "write_primary", "settle_primary", "agree", "agree_written", "post_process",
           "prepare_job", "commit", "commit_levels", "commit_manifest", "remove_checkpoints",
           "remove_job_files", "remove_run_dir"]


def plan_job(ctx: PipelineContext, requested: int, ckpt_id: int, seq: int) -> CheckpointJob:
    """Decide the primary level and the post-processing levels of a checkpoint at level ``requested``.

    Raises
    ------
    CheckpointError
        If ``requested`` is not a level of the table (an ``int``; ``bool`` is refused).
    """
    if isinstance(requested, bool) or not isinstance(requested, int | np.integer):
        raise CheckpointError(f"checkpoint level {requested!r} ({type(requested).__name__}) is invalid: use "
                              f"the int {table.describe()}")
    spec = level(int(requested))
    cfg = ctx.config
    try:  # e.g. group_size = 1 (loaded with L2/L3 off): the levels that need groups are refused here
        cfg.check_level(spec.number, needs_groups=table.spec(spec.number).needs_groups)
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from exc
    # Straight from the buffers into the requested level when its record allows (inline L4 without dCP or
    # compression), else into the base level (L1) and post-processed from its file.
    primary = table.primary_level(cfg, spec.number)
    post = () if spec.number == primary else (spec.number,)
    return CheckpointJob(ckpt_id=ckpt_id, level=spec.number, seq=seq, primary=primary, post_levels=post,
                         nodes=list(ctx.topology.node_of))


def write_primary(ctx: PipelineContext, job: CheckpointJob, arrays: Sequence[tuple[str, np.ndarray]],
                  meta: dict[str, Any] | None = None,
                  layouts: Mapping[str, Layout] | None = None) -> FileInfo:
    """Write this rank's file of ``job`` into its primary level, straight from ``arrays`` (not collective).

    When every post-processing step of ``job`` runs inline and reads from the buffers (L2, L3), the file's
    fsync and rename are left running (``job.pending``): the steps serve its bytes from ``arrays``
    meanwhile, and :func:`post_process` commits it before the ranks agree on the level (see
    :mod:`ftkit.storage.pending`).
    """
    storage = ctx.level(job.primary, job.nodes)
    if _from_buffers(ctx, job):
        for lv in job.post_levels:  # directories made now (their parents' fsyncs paid at the files' commits)
            ctx.level(lv, job.nodes).prepare_dir(job.ckpt_id, ctx.rank)
        for lv in job.post_levels:  # e.g. the RS code matrices, built while the L1 file is written
            warm = LEVELS[lv].warm
            if warm is not None:
                warm(ctx)
        job.pending = storage.start_write(job.ckpt_id, ctx.rank, arrays, level=job.level, nranks=ctx.nranks,
                                          meta=meta, layouts=layouts)
        job.file = job.pending.info
        return job.file
    info = storage.write(job.ckpt_id, ctx.rank, arrays, level=job.level, nranks=ctx.nranks, meta=meta,
                         layouts=layouts, compression=_compression(ctx, job))
    job.file = info
    return info


def _compression(ctx: PipelineContext, job: CheckpointJob) -> tuple[str, int, dict[str, str]] | None:
    """(codec, level, per-array codecs) of ``job``'s primary file: compression applies where the bytes leave
    the node (a level that is not node-local), when a codec is configured for some array."""
    codecs = job.extra.get("codecs", {})
    if table.spec(job.primary).node_local or (ctx.config.compression == "none"
                                             and all(c == "none" for c in codecs.values())):
        return None
    return ctx.config.compression, ctx.config.compression_level, dict(codecs)


def _from_buffers(ctx: PipelineContext, job: CheckpointJob) -> bool:
    """Whether ``job``'s post-processing runs inline in this call and can read the primary file in memory."""
    return bool(job.post_levels) and all(
        LEVELS[lv].from_buffers and table.inline(ctx.config, lv) for lv in job.post_levels)


def settle_primary(job: CheckpointJob) -> str | None:
    """Commit ``job``'s primary file if its fsync was left running; return why it failed, or None.

    Not collective; idempotent. Called before the ranks agree on a post-processed level, so that no level
    is ever agreed (or committed to the manifest) on a primary file that is not durable.
    """
    if job.pending is None or job.pending.finished:
        return None
    try:
        job.pending.finish()
    except (FtkitError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _abort_pending(job: CheckpointJob) -> None:
    """Drop an uncommitted primary file left running (its checkpoint failed); never raises."""
    if job.pending is not None and not job.pending.finished:
        job.pending.abort()


def agree(ctx: PipelineContext, error: str | None, what: str) -> None:
    """Raise CheckpointError on every rank if ``error`` is set on any (messages name the ranks)."""
    if _mpi.all_true(ctx.comm, error is None, ctx.timeout, what):
        return
    _raise_errors(_mpi.allgather(ctx.comm, error, what, ctx.timeout), what)


def _raise_errors(errors: Sequence[str | None], what: str) -> None:
    bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
    if bad:
        raise CheckpointError(f"{what} failed on {len(bad)} rank(s): " + "; ".join(bad[:4])
                              + (" ..." if len(bad) > 4 else ""))


def agree_written(ctx: PipelineContext, job: CheckpointJob, error: str | None,
                  synced: Mapping[int, bool] | None = None) -> list[RankFile]:
    """Collectively check that every rank wrote its file; fill and return ``job.files``.

    One collective round: every rank's outcome, size and digest travel together, and with them ``synced``:
    whether this rank's files of each earlier checkpoint with ``unsynced`` levels are durable (the same ids
    on every rank: the manifest's). ``job.settle`` then says, per id, whether they are on every rank; the
    commit of ``job`` settles those levels (:func:`commit`).

    Raises
    ------
    CheckpointError
        On every rank, naming the ranks whose write failed.
    """
    what = f"checkpoint {job.ckpt_id}: writing the L{job.primary} files"
    synced = synced or {}
    ids = sorted(synced)
    flags = [int(bool(synced[i])) for i in ids]   # a list in the order of the ids: JSON has no int keys
    mine: tuple[str | None, int, str, list[int]]
    if error is not None or job.file is None:
        mine = (error or "no file was written", -1, "", flags)
    else:
        mine = (None, job.file.size, job.file.digest, flags)
    try:
        rows = _mpi.allgather(ctx.comm, mine, what, ctx.timeout)
        _raise_errors([e for e, _, _, _ in rows], what)
    except BaseException:
        _abort_pending(job)
        raise
    job.files = [RankFile(int(s), str(d)) for _, s, d, _ in rows]
    job.settle = {i: all(len(row[3]) == len(ids) and row[3][k] == 1 for row in rows)
                  for k, i in enumerate(ids)}
    return job.files


def prepare_job(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Record in ``job.extra`` what recovery of its post-processed levels needs (before the commit)."""
    for lv in job.post_levels:
        prepare = LEVELS[lv].prepare
        if prepare is not None:
            prepare(ctx, job)


def post_process(ctx: PipelineContext, job: CheckpointJob) -> dict[int, bool]:
    """Run the post-processing steps of ``job`` (collective); return the levels completed.

    Raises
    ------
    CheckpointError
        On every rank if a step failed on any rank.
    """
    done: dict[int, bool] = {}
    try:
        for lv in job.post_levels:
            step = LEVELS[lv].post
            assert step is not None, f"level {lv} has no post-processing"
            # A step that reads the primary file by its name needs it committed first.
            error = None if LEVELS[lv].from_buffers else settle_primary(job)
            try:
                if error is None:
                    step(ctx, job)
            except ProcessFailure:
                raise
            except MPI.Exception as exc:  # a group peer failed mid-step: never a raw MPI error to the caller
                raise _mpi.as_failure(exc, ctx.comm,
                                      f"checkpoint {job.ckpt_id}: L{lv} post-processing") from exc
            except (FtkitError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            error = error or settle_primary(job)  # the primary file is durable before any level is agreed
            agree(ctx, error, f"checkpoint {job.ckpt_id}: L{lv} post-processing")
            done[lv] = True
    except BaseException:
        _abort_pending(job)
        raise
    return done


def commit(ctx: PipelineContext, job: CheckpointJob, levels: dict[int, bool]) -> list[CheckpointEntry]:
    """Add ``job`` to the manifest with per-level completion ``levels``, settle the ``unsynced`` levels of
    the earlier checkpoints ``job.settle`` names (cleared when durable on every rank, else marked
    incomplete), prune, and commit (collective): one manifest write.

    Returns the pruned entries; the caller removes their files (after this returned, i.e. after the commit).

    Raises
    ------
    CheckpointError
        On every rank if the manifest could not be written; the in-memory manifest is then unchanged.
    """
    if job.pending is not None and not job.pending.finished:  # never reached: post_process settles it
        raise CheckpointError(f"checkpoint {job.ckpt_id}: internal error: the primary file is not committed")
    entry = CheckpointEntry(id=job.ckpt_id, seq=job.seq, level=job.level, time=time.time(),
                            levels={lv: bool(levels.get(lv, False)) for lv in job.levels},
                            nodes=list(job.nodes), files=list(job.files), extra=dict(job.extra))

    def change() -> None:
        _settle_unsynced(ctx, job.settle)
        ctx.store.add(entry)

    return _change_and_commit(ctx, change, f"checkpoint {job.ckpt_id}: manifest commit")


def commit_levels(ctx: PipelineContext, ckpt_id: int, levels: dict[int, bool]) -> list[CheckpointEntry]:
    """Record levels of checkpoint ``ckpt_id`` completed later (e.g. by background work), prune, commit.

    Collective over ``ctx.comm``; returns the pruned entries (remove their files afterwards). On failure the
    in-memory manifest is unchanged.
    """
    return _change_and_commit(ctx, lambda: ctx.store.set_levels(ckpt_id, levels),
                              f"checkpoint {ckpt_id}: manifest update")


def _settle_unsynced(ctx: PipelineContext, durable: Mapping[int, bool]) -> None:
    """In the in-memory manifest: clear the ``unsynced`` levels of checkpoints ``durable`` (id → whether every
    rank saw their files durable, agreed) when durable, else mark those levels incomplete."""
    for ckpt_id, ok in durable.items():
        try:
            entry = ctx.store.manifest.entry(ckpt_id)
        except KeyError:  # pruned meanwhile: nothing left to settle
            continue
        for lv in entry.unsynced_levels:
            entry.levels[lv] = entry.levels.get(lv, False) and ok
        entry.extra.pop("unsynced", None)


def commit_gate(ctx: PipelineContext, job: CheckpointJob) -> bool | None:
    """Decide, the same on every survivor, whether ``job`` may be committed (collective, bounded).

    The agreements before the commit are plain collectives: after a process failure the last one can complete
    on rank 0 (which would then commit ``job`` and prune the previous checkpoint) and fail on another rank
    (which then deletes its files of ``job``: both checkpoints lost). So the ranks that passed every step
    meet in one ULFM agreement before rank 0 writes the manifest, and ``job`` is committed only if every live
    rank took part: a rank that saw a failure before the gate never enters it (it calls
    :func:`leave_commit_gate` instead), so nobody passes without it, and its files of ``job`` are garbage.

    Returns
    -------
    bool or None
        True: commit. False: surely not committed, on every survivor (a failure struck during the gate). None:
        the answer could not be learnt (a peer revoked the communicator or did not come within
        ``failure_timeout``): commit nothing and keep this rank's files, the manifest on disk decides. Without
        ULFM (no agreement possible): True, the plain collectives before decide. A rank interrupted inside
        the gate (a ``KeyboardInterrupt`` after its yes: its peers may commit) is a None too: the caller keeps
        its files (``tests/test_interrupted_checkpoint.py``; the fault-injection stage ``"gate_agreed"``
        follows the agreement).
    """
    if ctx.nranks < 2 or not probe_ulfm().available:
        return True
    try:
        agreed = agree_within(ctx.comm, 1, ctx.timeout, f"checkpoint {job.ckpt_id}: commit decision") == 1
    except (ProcessFailure, TimeoutFailure):
        return None
    ctx.hook("gate_agreed")  # tests interrupt a rank here: its peers may have committed already
    return agreed


def leave_commit_gate(ctx: PipelineContext, exc: BaseException) -> None:
    """Called by a rank whose checkpoint work failed before :func:`commit_gate` (a failed or silent peer):
    revoke ``ctx.comm`` so the ranks waiting at the gate learn at once that this rank will not come.

    Only a process failure revokes: a :class:`CheckpointError` is raised alike on every rank at the same
    agreement (nobody waits at the gate), and after a :class:`TimeoutFailure` (a peer stuck, not dead) the
    others time out too and report it as such.
    """
    failed = isinstance(exc, ProcessFailure | MPI.Exception) and not isinstance(exc, TimeoutFailure)
    if not failed or ctx.nranks < 2 or not probe_ulfm().available:
        return
    with contextlib.suppress(Exception):
        revoke(ctx.comm)


def commit_manifest(ctx: PipelineContext, what: str) -> None:
    """Write the in-memory manifest on rank 0 and agree on the outcome (collective).

    Raises
    ------
    CheckpointError
        On every rank, with rank 0's cause (e.g. ``ENOSPC``), if the write failed.
    """
    error = None
    if ctx.rank == 0:
        try:
            ctx.store.commit()
        except (FtkitError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
    error = _mpi.bcast(ctx.comm, error, 0, what, ctx.timeout)
    if error:
        raise CheckpointError(f"{what} failed on rank 0: {error}")


def _change_and_commit(ctx: PipelineContext, change: Callable[[], None], what: str) -> list[CheckpointEntry]:
    """Apply ``change`` to the in-memory manifest, prune and commit (collective) as one transaction: if
    anything fails, the in-memory manifest is restored exactly as it was, on every rank. Returns the pruned
    entries."""
    with ctx.store.lock:
        saved = copy.deepcopy(ctx.store.manifest)
        try:
            change()
            return _prune_and_write(ctx, what)
        except BaseException:
            ctx.store.manifest = saved
            raise


def _prune_and_write(ctx: PipelineContext, what: str) -> list[CheckpointEntry]:
    ids = plan_prune(ctx.store.manifest, keep_all_l4=bool(ctx.config.keep_l4_ckpt))
    pruned = [e for e in ctx.store.manifest.checkpoints if e.id in ids]
    ctx.store.drop(ids)
    ctx.hook("before_commit")
    commit_manifest(ctx, what)
    ctx.hook("after_commit")
    return pruned


def remove_checkpoints(ctx: PipelineContext, entries: Sequence[CheckpointEntry]) -> None:
    """Delete this rank's files of ``entries`` at every level (not collective; missing files are fine).

    A checkpoint written by another rank count (before an elastic restart) has its old ranks' files removed
    by ranks ``r, r + nranks, ...``. The fault-injection stage ``"removed_level"`` follows each level's
    removal (tests kill a rank with the removal half done)."""
    for e in entries:
        for lv in table.numbers():
            for old in range(ctx.rank, max(len(e.nodes), ctx.rank + 1), ctx.nranks):
                try:
                    ctx.level(lv, e.nodes).remove(e.id, old)
                except (FtkitError, OSError, IndexError):
                    pass  # best effort: an unremovable old file must not fail a good checkpoint
            ctx.hook("removed_level")


def remove_job_files(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Delete this rank's files of ``job``, a checkpoint that failed before its commit (not collective)."""
    remove_checkpoints(ctx, [CheckpointEntry(id=job.ckpt_id, seq=job.seq, level=job.level, time=0.0,
                                             levels={}, nodes=job.nodes, files=[])])


def remove_run_dir(root: Path, exec_id: str, what: str) -> None:
    """Remove the run's directory ``root/exec_id`` after checking it is a plain name strictly inside ``root``.

    Raises
    ------
    UnsafePathError
        If ``exec_id`` is not a plain name or the directory resolves outside ``root`` (nothing is removed).
    """
    path = inside(root, check_plain_name(exec_id, "exec_id"), what=what)
    check_removable(path, root, what)
    shutil.rmtree(path, ignore_errors=True)
