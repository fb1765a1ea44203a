"""What :func:`~ftkit.linalg.abft.ft_pdgemm` reports (:class:`ABFTReport`, :class:`BlockEvent`) and the checks
of its ABFT arguments (``bs``, ``tol``, ``mode``, ``inject``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import PBLASArgumentError
from ...inject import InjectionPlan
from ..pblas.gemm import _is_int

__all__ = ["MODES", "BlockEvent", "ABFTReport", "check_ft_args", "threshold_name"]

MODES = ("correct", "detect")


@dataclass(frozen=True)
class BlockEvent:
    """One flagged C block: global block coordinates ``(row_block, col_block)`` (the block's index among C's
    row / column segments), its first row/column in C's submatrix,
    size, the grid rank owning it, and what happened: ``"located"`` (single element fixed in O(1) at
    ``element``, submatrix coordinates), ``"recomputed"``, ``"rounding"`` (statistical alarm cleared by the
    rigorous bound after recomputation), ``"uncorrected"``, ``"detected"`` (``mode="detect"``) or
    ``"unchecked"`` (its checksums or bound are not finite, so it could not be checked at all)."""

    row_block: int
    col_block: int
    row0: int
    col0: int
    rows: int
    cols: int
    rank: int
    action: str
    element: tuple[int, int] | None = None


@dataclass
class ABFTReport:
    """Outcome of one checked product; identical on every process of the grid.

    Attributes
    ----------
    blocks_checked
        Number of C blocks verified (over all processes); never includes an unchecked block.
    unchecked
        Number of C blocks that could not be checked: their expected sums or threshold are not finite (an
        ``Inf``, ``NaN`` or overflowing value such as ``1e300`` in op(A) or op(B) poisons the checksums of its
        whole block row or column). Each has an event with action ``"unchecked"``; with
        ``unchecked_is_error=True`` they raise :class:`~ftkit.errors.ABFTError`.
    detected
        Blocks whose checksums disagreed (excluding rounding alarms).
    corrected
        Detected blocks made consistent again (located or recomputed).
    rounding_alarms
        Blocks flagged by the statistical threshold that the rigorous bound cleared after recomputation.
    events
        One :class:`BlockEvent` per flagged block, sorted by ``(row_block, col_block)``.
    max_ratio
        Largest ``|residual| / threshold`` over the blocks that passed (final state): how far below the
        threshold the observed rounding residuals are (its inverse is the threshold's tightness).
    correct_seconds
        Wall time of the correction phase (locating, recomputing, re-verifying; slowest process), seconds.
    threshold
        ``"rigorous"``, ``"statistical"`` or ``"tol=<x>"``.
    bs
        Checksum block size used.
    failed_ranks
        Ranks lost to process failures (filled by the failure-aware path; empty here).
    result
        The failure-tolerant path's result object, if that path ran (after failures the product lives on a
        new grid of the survivors: ``result.C`` / ``result.grid``); ``None`` otherwise.
    """

    blocks_checked: int = 0
    detected: int = 0
    corrected: int = 0
    rounding_alarms: int = 0
    events: tuple[BlockEvent, ...] = ()
    max_ratio: float = 0.0
    correct_seconds: float = 0.0
    threshold: str = "rigorous"
    bs: int = 0
    failed_ranks: tuple[int, ...] = field(default_factory=tuple)
    result: Any = None
    unchecked: int = 0

    @property
    def uncorrected(self) -> int:
        """Detected blocks left inconsistent."""
        return sum(e.action in ("uncorrected", "detected") for e in self.events)

    @property
    def detected_blocks(self) -> list[tuple[int, int]]:
        """Global block coordinates ``(row_block, col_block)`` of the detected blocks."""
        return [(e.row_block, e.col_block) for e in self.events if e.action not in ("rounding", "unchecked")]

    @property
    def unchecked_blocks(self) -> list[tuple[int, int]]:
        """Global block coordinates ``(row_block, col_block)`` of the blocks that could not be checked."""
        return [(e.row_block, e.col_block) for e in self.events if e.action == "unchecked"]


# ---------------------------------------------------------------- argument checks
def check_ft_args(routine: str, pos: int, bs: object, tol: object, mode: object, inject: object) -> None:
    if bs is not None and (not _is_int(bs) or int(bs) < 1):  # type: ignore[call-overload]
        raise PBLASArgumentError(routine, pos, f"bs={bs!r}; must be a positive integer or None (automatic)")
    if tol is not None and tol != "statistical":
        if (
            isinstance(tol, str)
            or not isinstance(tol, (int, float))
            or not (float(tol) >= 0.0 and np.isfinite(tol))
        ):
            raise PBLASArgumentError(
                routine,
                pos + 1,
                f"tol={tol!r}; use None (rigorous bound), 'statistical', or a finite relative tolerance >= 0",
            )
    if mode not in MODES:
        raise PBLASArgumentError(routine, pos + 2, f"mode={mode!r}; use 'correct' or 'detect'")
    if inject is not None and not isinstance(inject, InjectionPlan):
        raise PBLASArgumentError(
            routine, pos + 3, f"inject must be an ftkit.inject.InjectionPlan, got {type(inject).__name__}"
        )


def threshold_name(tol: float | str | None) -> str:
    return "rigorous" if tol is None else ("statistical" if tol == "statistical" else f"tol={float(tol):g}")
