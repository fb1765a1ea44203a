"""Recovery: find, on every rank, a verified copy of the newest checkpoint every rank can read, then read it.

For each checkpoint of the manifest, newest first, the *recovery chain* (:func:`default_steps`) is walked:
each step is a level able to supply a rank's checkpoint file. A rank that already has a verified file
passes; the others ask the next step. Steps are collective (every rank calls every applicable step while any
rank still needs one), so a step may exchange data within a group (L3 decode) or with a partner (L2). Here:
L1 (the node-local file) then L4 (the PFS copy). The node-loss work inserts L2 and L3 steps before L4, which
rebuild a missing or damaged L1 file from the redundancy.

A checkpoint is used only when every rank has a verified file; otherwise the reasons are kept and the next
older checkpoint is tried. Before any byte is read into a protected array, every rank checks names, shapes and
dtypes; a mismatch anywhere raises :class:`ShapeMismatchError` on every rank with the arrays untouched.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import FtkitError, ProcessFailure, RecoveryError, ShapeMismatchError
from ..storage.base import StorageLevel
from ..storage.format import Header
from ..storage.manifest import CheckpointEntry
from . import _mpi
from .pipeline import PipelineContext

__all__ = ["RecoveryInfo", "Located", "RecoveryStep", "LevelFileStep", "LocalStep", "PFSStep",
           "default_steps", "recover_newest", "check_targets"]


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
    """

    checkpoint_id: int
    level: int
    source_level: int
    skipped: tuple[str, ...] = ()


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
        except (FtkitError, OSError) as exc:
            return Located(reason=str(exc), level=self.level)
        return Located(storage, header, level=self.level)


class LocalStep(LevelFileStep):
    """L1: the rank's node-local file."""

    level = 1


class PFSStep(LevelFileStep):
    """L4: the rank's file on the parallel file system."""

    level = 4


def default_steps() -> list[RecoveryStep]:
    """The recovery chain, cheapest level first: L1, L2 partner copy, L3 group decode, L4."""
    from .redundancy import EncodedStep, PartnerStep

    return [LocalStep(), PartnerStep(), EncodedStep(), PFSStep()]


def check_targets(header: Header, targets: Mapping[str, np.ndarray]) -> str | None:
    """Return why ``targets`` (name → protected array) cannot receive ``header``'s sections, or None."""
    stored = [s.name for s in header.sections]
    missing = [n for n in targets if n not in stored]
    extra = [n for n in stored if n not in targets]
    if missing or extra:
        return (f"the checkpoint holds arrays {stored} but {sorted(targets)} are protected"
                + (f" (not in the checkpoint: {missing})" if missing else "")
                + (f" (not protected: {extra})" if extra else "")
                + ": protect the same names as the run that checkpointed")
    for s in header.sections:
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
                              "recovery diagnosis")
    bad = [(r, why) for r, why in enumerate(gathered) if why is not None]
    levels = "/".join(f"L{lv}" for lv in entry.complete_levels) or "none"
    parts = [f"rank {r} (node {entry.nodes[r]}): {why or 'no level holds its file'}" for r, why in bad[:3]]
    more = f" ... and {len(bad) - 3} more rank(s)" if len(bad) > 3 else ""
    return (f"checkpoint {entry.id} (level {entry.level}, complete at {levels}): {len(bad)} rank(s) have no "
            f"usable copy: " + "; ".join(parts) + more)


def recover_newest(ctx: PipelineContext, targets: Mapping[str, np.ndarray],
                   steps: list[RecoveryStep] | None = None) -> tuple[RecoveryInfo, CheckpointEntry]:
    """Recover the newest checkpoint every rank can read into ``targets`` (collective).

    Raises
    ------
    ShapeMismatchError
        On every rank, before anything is overwritten, if a protected array differs from the stored one.
    RecoveryError
        On every rank, naming each checkpoint tried and what each rank was missing, if none is usable.
    ProcessFailure
        If a peer failed during recovery.
    """
    steps = default_steps() if steps is None else steps
    candidates = [e for e in ctx.store.manifest.newest_first() if e.complete_levels]
    if not candidates:
        raise RecoveryError(f"{ctx.config.meta_dir}/manifest.json lists no complete checkpoint of run "
                            f"{ctx.exec_id}: nothing to recover (remove {ctx.config.meta_dir} to start "
                            "fresh)")
    skipped: list[str] = []
    for entry in candidates:
        found = Located()
        reasons: list[str] = []
        for step in steps:
            if not step.applies(entry):
                continue
            need = not found.ok
            if not _mpi.any_true(ctx.comm, need, ctx.timeout, "recovery"):
                break
            answer = step.locate(ctx, entry, need)
            if need:
                if answer.ok:
                    found = answer
                else:
                    reasons.append(f"L{step.level}: {answer.reason or 'no copy'}")
        if not _mpi.all_true(ctx.comm, found.ok, ctx.timeout, "recovery"):
            skipped.append(_summarise(ctx, entry, None if found.ok else reasons))
            continue
        assert found.header is not None and found.storage is not None
        problem = check_targets(found.header, targets)
        if not _mpi.all_true(ctx.comm, problem is None, ctx.timeout, "recovery shape check"):
            problems = _mpi.allgather(ctx.comm, problem, "recovery shape check")
            bad = [f"rank {r}: {p}" for r, p in enumerate(problems) if p]
            raise ShapeMismatchError(f"cannot recover checkpoint {entry.id} into the protected arrays "
                                     "(nothing "
                                     "was overwritten): " + "; ".join(bad[:3]))
        error = None
        try:
            found.storage.read_into(entry.id, ctx.rank, targets, found.header)
        except ProcessFailure:
            raise
        except (FtkitError, OSError) as exc:
            error = str(exc)
        if not _mpi.all_true(ctx.comm, error is None, ctx.timeout, "recovery read"):
            errors = _mpi.allgather(ctx.comm, error, "recovery read")
            bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
            raise RecoveryError(f"checkpoint {entry.id} verified but could not be read (was it changed "
                                "during "
                                "recovery?): " + "; ".join(bad[:3]))
        level = _mpi.allreduce_int(ctx.comm, found.level, "max", ctx.timeout, "recovery")
        return RecoveryInfo(entry.id, level, found.level, tuple(skipped)), entry
    raise RecoveryError(f"no checkpoint of run {ctx.exec_id} can be recovered: " + " | ".join(skipped))
