"""Recovery: find, on every rank, a verified copy of the newest checkpoint every rank can read, then read it.

For each checkpoint of the manifest, newest first, the *recovery chain*
(:func:`ftkit.checkpoint.levels.recovery_chain`: the level table's recovery steps, cheapest first) is walked:
each step is a level able to supply a rank's checkpoint file. A rank that already has a verified file
passes; the others ask the next step. Steps are collective (every rank calls every applicable step while any
rank still needs one), so a step may exchange data within a group (L3 decode) or with a partner (L2): L1
(the node-local file), L2 and L3 (rebuild a missing or damaged L1 file from the redundancy), then L4 (the
PFS copy, rebuilt first from its block store when it was written differentially).

Any error a reader raises for bad data (see :data:`ftkit.checkpoint.contract.DAMAGED`) means "this copy is
damaged": the next copy, level or older checkpoint is tried. Every exchange has the ``failure_timeout``
deadline.

A checkpoint is used only when every rank has a verified file; otherwise the reasons are kept and the next
older checkpoint is tried. Before any byte is read into a protected array, every rank checks names, shapes and
dtypes; a mismatch anywhere raises :class:`ShapeMismatchError` on every rank with the arrays untouched.

*Elastic recovery*: when every rank protects every array with a global layout and the checkpoint was
written by another rank count, or the stored layouts differ from the new ones, :func:`.reshard.restore`
fills the new boxes from the old files instead (no chain: the old ranks' files are read where they are).
On as many ranks, the arrays with a layout are resharded whenever some rank's boxes changed, and the arrays
without one (a per-rank counter) are read from each rank's own file as usual. Without layouts a rank-count
change is a :class:`RecoveryError` saying how to add them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

from ..errors import ProcessFailure, RecoveryError, ShapeMismatchError
from ..storage.format.container import Header
from ..storage.format.global_layout import Layout
from ..storage.manifest import CheckpointEntry
from ..storage.repair.copies import RunCopies
from ..storage.repair.holders import fetch
from . import _mpi, reshard
from .contract import DAMAGED, Located, PipelineContext, RecoveryStep
from .levels import recovery_chain

__all__ = ["RecoveryInfo", "recover_newest", "check_targets", "TargetAdapter"]


@dataclass(frozen=True)
class RecoveryInfo:
    """Outcome of :meth:`Checkpointer.recover`.

    Attributes
    ----------
    checkpoint_id
        Id of the checkpoint recovered.
    level
        Highest level any rank had to use (1: every rank read its local file; 4: some rank used the PFS copy).
    source_level
        Level this rank read its data from (or rebuilt its file from).
    skipped
        For each newer checkpoint that could not be used, why.
    reshard
        For an elastic recovery (other rank count or decomposition): bytes read and needed on this rank and
        the level each old rank's file was read from; None otherwise.
    resized
        The resizable arrays replaced by arrays of their stored shape (get them with ``ckpt.array(name)``).
    """

    checkpoint_id: int
    level: int
    source_level: int
    skipped: tuple[str, ...] = ()
    reshard: reshard.ReshardStats | None = None
    resized: tuple[str, ...] = ()


class TargetAdapter(Protocol):
    """Fits the targets to a located checkpoint and checks what was read into them (see :mod:`.appstate`)."""

    def fit(self, header: Header, targets: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """The targets to read ``header``'s sections into (resizable ones replaced where shapes differ)."""

    def decode(self, targets: Mapping[str, np.ndarray]) -> str | None:
        """Why what was read into ``targets`` is unusable (a damaged state record), or None."""


def check_targets(header: Header, targets: Mapping[str, np.ndarray],
                  shapes_of: Collection[str] | None = None) -> str | None:
    """Return why ``targets`` (name → protected array) cannot receive ``header``'s sections, or None;
    ``shapes_of``: check shape and dtype of these names only (default: all; the others are resharded)."""
    stored = [s.name for s in header.sections]
    missing = [n for n in targets if n not in stored]
    extra = [n for n in stored if n not in targets]
    if missing or extra:
        return (f"the checkpoint holds arrays {stored} but {sorted(targets)} are protected"
                + (f" (not in the checkpoint: {missing})" if missing else "")
                + (f" (not protected: {extra})" if extra else "")
                + ": protect the same names as the run that checkpointed")
    for s in header.sections:
        if shapes_of is not None and s.name not in shapes_of:
            continue
        arr = targets[s.name]
        if tuple(arr.shape) != s.shape or arr.dtype.str != s.dtype:
            return (f"array {s.name!r}: the checkpoint holds shape {s.shape} dtype {s.dtype} but the "
                    f"protected array is shape {tuple(arr.shape)} dtype {arr.dtype.str}: protect an array "
                    "of the stored "
                    "shape and dtype")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            return f"array {s.name!r} is not C-contiguous and writeable"
    return None


def _summarise(ctx: PipelineContext, entry: CheckpointEntry, reasons: list[str] | None) -> str:
    """Collective: one line naming the ranks that had no usable file of ``entry`` and why."""
    gathered = _mpi.allgather(ctx.comm, "; ".join(reasons) if reasons is not None else None,
                              "recovery diagnosis", ctx.timeout)
    bad = [(r, why) for r, why in enumerate(gathered) if why is not None]
    levels = "/".join(f"L{lv}" for lv in entry.complete_levels) or "none"
    parts = [f"rank {r} (node {entry.nodes[r]}): {why or 'no level holds its file'}" for r, why in bad[:3]]
    more = f" ... and {len(bad) - 3} more rank(s)" if len(bad) > 3 else ""
    return (f"checkpoint {entry.id} (level {entry.level}, complete at {levels}): {len(bad)} rank(s) have no "
            f"usable copy: " + "; ".join(parts) + more)


#: What a rank with a damaged state record, or a failed read, sends in the last agreement (more than any
#: level; a failed read outranks a damaged record: it raises).
_DAMAGED_RECORD = 1 << 30
_READ_FAILED = 1 << 31


def recover_newest(ctx: PipelineContext, targets: Mapping[str, np.ndarray],
                   steps: list[RecoveryStep] | None = None,
                   layouts: Mapping[str, Layout] | None = None,
                   adapt: TargetAdapter | None = None) -> tuple[RecoveryInfo, CheckpointEntry]:
    """Recover the newest checkpoint every rank can read into ``targets`` (collective); ``layouts`` are the
    global layouts of the arrays protected with one (see :mod:`.reshard`); ``adapt`` fits resizable targets
    to the stored shapes and checks state records after reading (a damaged record: the next older one).

    Raises
    ------
    ShapeMismatchError
        On every rank, before anything is overwritten, if a protected array differs from the stored one.
    RecoveryError
        On every rank, naming each checkpoint tried and what each rank was missing, if none is usable.
    ProcessFailure
        If a peer failed during recovery.
    """
    steps = recovery_chain() if steps is None else steps
    candidates = [e for e in ctx.store.manifest.newest_first() if e.complete_levels]
    if not candidates:
        raise RecoveryError(f"{ctx.config.meta_dir}/manifest.json lists no complete checkpoint of run "
                            f"{ctx.exec_id}: nothing to recover (remove {ctx.config.meta_dir} to start "
                            "fresh)")
    skipped: list[str] = []
    lays = layouts or {}
    protected = _mpi.allgather(ctx.comm, [sorted(targets), sorted(set(targets) & set(lays))],
                               "recovery layouts", ctx.timeout)
    elastic = all(set(names) <= set(laid) for names, laid in protected)
    laid_everywhere = set.intersection(*(set(laid) for _, laid in protected))
    for entry in candidates:
        if len(entry.files) != ctx.nranks:
            if not elastic:
                _refuse_other_count(ctx, entry, targets, lays)
            try:
                return _restore(ctx, entry, targets, lays, skipped)
            except reshard.MissingCopyError as exc:
                skipped.append(str(exc))
                continue
        found = Located()
        reasons: list[str] = []
        everywhere = False  # every rank located its file (agreed)
        for step in steps:
            if not step.applies(entry):
                continue
            need = not found.ok
            if not _mpi.any_true(ctx.comm, need, ctx.timeout, "recovery"):
                everywhere = True
                break
            answer = step.locate(ctx, entry, need)
            if need:
                if answer.ok:
                    found = answer
                else:
                    reasons.append(f"L{step.level}: {answer.reason or 'no copy'}")
        everywhere = everywhere or _mpi.all_true(ctx.comm, found.ok, ctx.timeout, "recovery")
        if not everywhere:
            found = _fetch(ctx, entry, found, reasons)
            everywhere = _mpi.all_true(ctx.comm, found.ok, ctx.timeout, "recovery")
        if not everywhere:
            skipped.append(_summarise(ctx, entry, None if found.ok else reasons))
            continue
        assert found.header is not None and found.storage is not None
        moved = _mpi.any_true(ctx.comm, _moved(found.header, targets, lays), ctx.timeout, "recovery layouts")
        fitted = targets  # resizable arrays of another stored shape replaced (see .appstate)
        if adapt is not None:
            try:
                fitted = adapt.fit(found.header, targets)
            except DAMAGED:
                pass  # a stored shape this machine cannot hold: the shape check below reports it
        # Boxes moved on as many ranks: the arrays with a layout (on every rank) are resharded; the others
        # still come from this rank's own file, the per-rank path.
        per_rank = {n: a for n, a in fitted.items() if not moved or n not in laid_everywhere}
        stats = None
        try:
            if moved and elastic:
                return _restore(ctx, entry, targets, lays, skipped)
            _check_located(ctx, entry, found.header, fitted, per_rank)
            if moved:
                stats = reshard.restore(ctx.comm, ctx.config, ctx.exec_id, entry,
                                        {n: a for n, a in targets.items() if n not in per_rank}, lays,
                                        partial=True)
        except reshard.MissingCopyError as exc:
            skipped.append(str(exc))
            continue
        error = _read_located(found, entry.id, ctx.rank, per_rank)
        bad_record = None if adapt is None or error is not None else adapt.decode(fitted)
        level = _agree_read(ctx, entry, error, bad_record,
                            max((found.level, *(stats.source_levels if stats else ()))))
        if level == _DAMAGED_RECORD:
            skipped.append(_summarise(ctx, entry, None if bad_record is None else [bad_record]))
            continue
        return RecoveryInfo(entry.id, level, found.level, tuple(skipped), stats), entry
    raise RecoveryError(f"no checkpoint of run {ctx.exec_id} can be recovered: " + " | ".join(skipped))


def _fetch(ctx: PipelineContext, entry: CheckpointEntry, found: Located, reasons: list[str]) -> Located:
    """Collective, after the chain left some rank without a file: the locate-and-rebuild engine
    (:func:`ftkit.storage.repair.holders.fetch`) brings each such rank its file from the rank whose host holds
    a node-local copy of it (a relaunch whose nodes hold other nodes' directories: on a cluster every disk is
    its host's). Returns this rank's answer (unchanged where it had one)."""
    need = _mpi.allgather(ctx.comm, not found.ok, "recovery: fetch", ctx.timeout)
    lost = [r for r, n in enumerate(need) if n]
    config = ctx.config
    copies = RunCopies(config.ckpt_dir, config.glbl_dir, ctx.exec_id, entry, config.io_chunk_bytes)
    try:
        where, rebuilt = fetch(ctx.comm, copies, lost, ctx.timeout, min(config.io_chunk_bytes, 16 << 20))
    except MPI.Exception as exc:
        raise _mpi.as_failure(exc, ctx.comm, "recovery: fetch") from exc
    if found.ok:
        return found
    holder = where.holders[ctx.rank]
    if holder is None:
        reasons.append("elsewhere: " + "; ".join(where.why[ctx.rank]))
        return found
    storage = ctx.level(1, entry.nodes)
    level = 3 if ctx.rank in rebuilt else holder.level
    try:
        header = storage.verify(entry.id, ctx.rank, entry.files[ctx.rank].digest)
    except ProcessFailure:
        raise
    except DAMAGED as exc:
        reasons.append(f"L{level} copy fetched from rank {holder.rank}: {exc}")
        return found
    return Located(storage, header, level=level)


def _check_located(ctx: PipelineContext, entry: CheckpointEntry, header: Header,
                   targets: Mapping[str, np.ndarray], per_rank: Mapping[str, np.ndarray]) -> None:
    """Collective: the stored names are the protected ones, and the arrays read from this rank's own file
    (``per_rank``) have the stored shapes and dtypes; else raise on every rank, nothing overwritten."""
    try:
        problem = check_targets(header, targets, shapes_of=per_rank)
    except DAMAGED as exc:
        problem = f"the stored header is damaged: {exc}"
    if not _mpi.all_true(ctx.comm, problem is None, ctx.timeout, "recovery shape check"):
        problems = _mpi.allgather(ctx.comm, problem, "recovery shape check", ctx.timeout)
        bad = [f"rank {r}: {p}" for r, p in enumerate(problems) if p]
        raise ShapeMismatchError(f"cannot recover checkpoint {entry.id} into the protected arrays (nothing "
                                 "was overwritten): " + "; ".join(bad[:3]))


def _read_located(found: Located, ckpt_id: int, rank: int, targets: Mapping[str, np.ndarray]) -> str | None:
    """Read ``targets`` from this rank's located file (local); return the error, None if it was read. The
    caller agrees on it (:func:`_agree_read`)."""
    assert found.storage is not None
    try:
        found.storage.read_into(ckpt_id, rank, targets, found.header)
    except ProcessFailure:
        raise
    except DAMAGED as exc:
        return str(exc)
    return None


def _agree_read(ctx: PipelineContext, entry: CheckpointEntry, error: str | None, bad_record: str | None,
                used: int) -> int:
    """Collective, one round: the highest level used on any rank (``used``: this rank's), or
    :data:`_DAMAGED_RECORD` when some rank's state record is damaged; when some rank's read failed
    (``error``), raise on every rank, naming the ranks and their errors.

    Raises
    ------
    RecoveryError
        On every rank, if the read failed on some rank.
    """
    mine = _READ_FAILED if error is not None else _DAMAGED_RECORD if bad_record is not None else used
    level = _mpi.allreduce_int(ctx.comm, mine, "max", ctx.timeout, "recovery read")
    if level == _READ_FAILED:
        errors = _mpi.allgather(ctx.comm, error, "recovery read", ctx.timeout)
        bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
        raise RecoveryError(f"checkpoint {entry.id} verified but could not be read (was it changed during "
                            "recovery?): " + "; ".join(bad[:3]))
    return level


def _moved(header: Header, targets: Mapping[str, np.ndarray], layouts: Mapping[str, Layout]) -> bool:
    """Whether this rank's stored boxes differ from its new ones (a re-decomposition on as many ranks)."""
    for s in header.sections:
        if s.name in targets and s.layout is not None and (
                s.layout != layouts.get(s.name) or s.shape != tuple(targets[s.name].shape)):
            return True
    return False


def _restore(ctx: PipelineContext, entry: CheckpointEntry, targets: Mapping[str, np.ndarray],
             layouts: Mapping[str, Layout], skipped: list[str]) -> tuple[RecoveryInfo, CheckpointEntry]:
    """Elastic recovery of ``entry``; later checkpoints are written by this run's rank count."""
    stats = reshard.restore(ctx.comm, ctx.config, ctx.exec_id, entry, targets, layouts)
    ctx.store.manifest.nranks = ctx.nranks
    level = max(stats.source_levels)
    return RecoveryInfo(entry.id, level, level, tuple(skipped), stats), entry


def _refuse_other_count(ctx: PipelineContext, entry: CheckpointEntry, targets: Mapping[str, Any],
                        layouts: Mapping[str, Layout]) -> None:
    """Raise on every rank: the arrays without a layout cannot be recovered by another rank count."""
    bare = sorted({n for names in _mpi.allgather(ctx.comm, sorted(set(targets) - set(layouts)),
                                                 "recovery layouts", ctx.timeout) for n in names})
    raise RecoveryError(f"checkpoint {entry.id} was written by {len(entry.files)} ranks, this run has "
                        f"{ctx.nranks}: " + reshard.layout_hint(bare) + f" (or relaunch with -n "
                        f"{len(entry.files)})")
