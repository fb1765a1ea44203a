"""The two things :func:`~ftkit.linalg.abft.ft_pdgemm` decides once per call and uses everywhere after: how
its C is cut into checked blocks (:class:`BlockSegmentation`) and which threshold checks them
(:class:`Threshold`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import checksums
from ..matrix import DistributedMatrix
from .report import BlockEvent

__all__ = ["BlockSegmentation", "Threshold"]


@dataclass(frozen=True)
class Threshold:
    """A parsed ``tol``: ``None`` (rigorous bound), ``"statistical"``, or a relative tolerance (a float).

    Build it with :meth:`parse`, which validates ``tol`` once; the argument checks of the public routines
    (:func:`~ftkit.linalg.abft.report.check_ft_args`) give the PBLAS-style error before that.
    """

    tol: float | str | None

    @classmethod
    def parse(cls, tol: float | str | None) -> Threshold:
        """Return the threshold of ``tol``.

        Raises
        ------
        ABFTArgumentError
            If ``tol`` is neither ``None``, ``"statistical"`` nor a finite number >= 0.
        """
        if tol is None or tol == "statistical":
            return cls(tol)
        checksums.thresholds(np.zeros((0, 0)), 0, np.zeros(0), np.zeros(0), tol=tol)  # validates
        return cls(float(tol))

    @property
    def name(self) -> str:
        """``"rigorous"``, ``"statistical"`` or ``"tol=<x>"`` (as reports show it)."""
        if self.tol is None:
            return "rigorous"
        return "statistical" if self.tol == "statistical" else f"tol={float(self.tol):g}"

    @property
    def kinds(self) -> int:
        """Checksum kinds it needs (:func:`ftkit.linalg.checksums.checksum_kinds`)."""
        return checksums.checksum_kinds(self.tol)

    def bounds(self, pred: checksums.Prediction, seg: BlockSegmentation, alpha: float, beta: float,
               csq: np.ndarray | None = None, *, rigorous: bool = False) -> np.ndarray:
        """Per-block thresholds of ``seg``'s blocks for prediction ``pred`` (the rigorous ones if asked)."""
        return pred.thresholds(seg.rb, seg.cb, None if rigorous else self.tol, alpha, beta, csq=csq)


@dataclass
class BlockSegmentation:
    """How this process's part of C's submatrix (``m x n`` at ``(ic, jc)``) is cut into checked blocks.

    Attributes
    ----------
    rows_here, cols_here
        Submatrix row / column indices of this process's local rows / columns, increasing.
    rb, cb
        Segment bounds (local positions) of its row and column segments (:func:`checksums.segment_bounds`).
    """

    rows_here: np.ndarray
    cols_here: np.ndarray
    rb: np.ndarray
    cb: np.ndarray
    ic: int
    jc: int
    m: int
    n: int
    mb: int
    nb: int
    bs: int
    _global: list[np.ndarray] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, C: DistributedMatrix, ic: int, jc: int, m: int, n: int, bs: int) -> BlockSegmentation:
        """The segmentation of this process's part of ``C(ic:ic+m, jc:jc+n)`` into ``bs``-blocks (local)."""
        g = C.grid
        rows = C.row_map(ic, m).indices_on(g.myrow)
        cols = C.col_map(jc, n).indices_on(g.mycol)
        d = C.desc
        rb, cb = checksums.segment_bounds(rows, ic, d.mb, bs), checksums.segment_bounds(cols, jc, d.nb, bs)
        return cls(rows, cols, rb, cb, ic, jc, m, n, d.mb, d.nb, bs)

    @property
    def nr(self) -> int:
        """Number of row segments."""
        return len(self.rb) - 1

    @property
    def nc(self) -> int:
        """Number of column segments."""
        return len(self.cb) - 1

    def to_global(self, i: int, j: int) -> tuple[int, int]:
        """Global ``(row, col)`` of local submatrix position ``(i, j)``."""
        return self.ic + int(self.rows_here[i]), self.jc + int(self.cols_here[j])

    def block(self, c: np.ndarray, bi: int, bj: int) -> np.ndarray:
        """View of block ``(bi, bj)`` of the local submatrix ``c``."""
        return c[self.rb[bi] : self.rb[bi + 1], self.cb[bj] : self.cb[bj + 1]]

    def event(self, bi: int, bj: int, rank: int, action: str,
              element: tuple[int, int] | None = None) -> BlockEvent:
        """The report event of local block ``(bi, bj)`` (global block coordinates, submatrix origin)."""
        if not self._global:  # segments depend only on global indices: the same cut on every process
            self._global.append(checksums.segment_bounds(np.arange(self.m), self.ic, self.mb, self.bs))
            self._global.append(checksums.segment_bounds(np.arange(self.n), self.jc, self.nb, self.bs))
        r0, c0 = int(self.rows_here[self.rb[bi]]), int(self.cols_here[self.cb[bj]])
        gbi, gbj = int(np.searchsorted(self._global[0], r0)), int(np.searchsorted(self._global[1], c0))
        rows, cols = int(self.rb[bi + 1] - self.rb[bi]), int(self.cb[bj + 1] - self.cb[bj])
        return BlockEvent(gbi, gbj, r0, c0, rows, cols, rank, action, element)
