"""The rows of a Cholesky panel's ``P`` that a process's trailing columns multiply, read where they arrived,
and their repair: a value changed between its sender and the product is found by the row sums the rows travel
with (equal unless a value changed: both sides add in :func:`._kernels.row_sums`' order), its column located
by the sent column sums of its piece (:func:`._kernels.col_sums`' order) and restored from its row sum
(:func:`repair_rows`), before the checksums' carry (:meth:`._abft.UpdateChecks.update`) and the product read
it. How the rows travel: :mod:`ftkit.linalg.cholesky._panel_sums`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .. import checksums
from ._kernels import col_sums, row_sums

__all__ = ["TrailingRows", "repair_rows"]


@dataclasses.dataclass
class TrailingRows:
    """The rows of a panel's ``P`` this process's trailing columns multiply, where they arrived (no copy of
    them into one array): trailing block column ``j`` (``panels[j]``, in the order of this process's
    columns) has rows ``table[j, 1]:table[j, 1] + table[j, 2]`` of ``pieces[table[j, 0]]`` (F order, unit
    row stride). Each piece comes with its senders' row sums ``sums`` and column sums ``col_sums`` (in
    :func:`col_sums`' order) and its rows' global indices ``rows_of``.
    ``whole``: the piece that is this process's own rows of ``P`` (every product's left operand), repaired
    whole when one of its blocks changed, or -1; ``contiguous``: the blocks are one piece's rows in order
    (what :meth:`CholeskySteps.apply_update` then takes as one array)."""

    pieces: tuple[np.ndarray, ...]
    sums: tuple[np.ndarray, ...]
    col_sums: tuple[np.ndarray, ...]
    rows_of: tuple[np.ndarray, ...]
    table: np.ndarray
    panels: list[int]
    whole: int = -1
    contiguous: bool = False

    @classmethod
    def of(cls, pieces: list[tuple[np.ndarray, ...]], table: np.ndarray, panels: list[int],
           whole: int = -1) -> TrailingRows:
        """The rows of ``pieces``, each ``(global indices, rows, row sums, sums of squares, column sums)``."""
        idx, rows, rs, _, cs = zip(*pieces, strict=True)
        return cls(rows, rs, cs, idx, table, panels, whole)

    def block(self, j: int) -> np.ndarray:
        """Trailing block column ``j``'s rows of ``P`` (a view)."""
        p, r0, m = (int(v) for v in self.table[j])
        return self.pieces[p][r0:r0 + m]

    def operand(self) -> np.ndarray | dict[int, np.ndarray]:
        """The rows as :meth:`CholeskySteps.apply_update` takes them: one array, or views by panel index."""
        if self.contiguous:
            return self.pieces[0]
        pieces = self.pieces  # table.tolist(): Python ints at once (block()'s per-row conversion: ~6x this)
        return {big_j: pieces[p][r0:r0 + m]
                for big_j, (p, r0, m) in zip(self.panels, self.table.tolist(), strict=True)}

    def stacked(self) -> np.ndarray:
        """A copy of the rows, block column after block column, in one array (F order)."""
        return _stack([self.block(j) for j in range(len(self.panels))], self.pieces[0].shape[1])

    def put(self, stacked: np.ndarray) -> None:
        """Write :meth:`stacked`'s layout back into the rows where they are."""
        at = 0
        for j in range(len(self.panels)):
            blk = self.block(j)
            blk[...] = stacked[at:at + blk.shape[0]]
            at += blk.shape[0]

    def changed(self, j: int) -> bool:
        """Whether block column ``j``'s rows' sums differ from the sent ones (:func:`row_sums`' order)."""
        p, r0, m = (int(v) for v in self.table[j])
        got = np.empty(m)
        row_sums(self.pieces[p][r0:r0 + m], got)
        return not np.array_equal(got, self.sums[p][r0:r0 + m])

    def repair(self, j: int) -> list[tuple[int, int, bool]]:
        """Restore the changed values of block column ``j``'s rows (of all of :attr:`whole`'s, if they are
        its) from their row sums, each one's column located by its piece's column sums
        (:func:`repair_rows`); return ``(global row, column of the panel, restored)`` per repair."""
        p, r0, m = (int(v) for v in self.table[j])
        piece = self.pieces[p]
        if p == self.whole:
            r0, m = 0, piece.shape[0]

        def present(_i: int) -> tuple[np.ndarray, np.ndarray]:
            now = np.empty(piece.shape[1])
            col_sums(piece, now)
            return self.col_sums[p], now

        return [(int(self.rows_of[p][r0 + i]), t, ok)
                for i, t, ok in repair_rows(piece[r0:r0 + m], self.sums[p][r0:r0 + m], present)]


def _stack(blocks: list[np.ndarray], w: int) -> np.ndarray:
    """``blocks`` (row blocks of ``w`` columns) one under the other in one array, F order."""
    out = np.empty((sum(b.shape[0] for b in blocks), w), order="F")
    if blocks:
        np.concatenate(blocks, axis=0, out=out)
    return out


def repair_rows(x: np.ndarray, rs: np.ndarray,
                col_sums: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int, bool]]:
    """Compare ``x``'s row sums with the sent ones ``rs``; restore a changed element from its row sum.

    The sums are taken in the same order as the sender's, so they differ only if a value changed (a
    difference within rounding of a reordered sum is accepted). The column comes from ``col_sums(i)`` (sent
    and present column sums of the piece holding row ``i``). Returns ``(row, column, restored)`` per repair.
    """
    got = np.empty(x.shape[0])
    row_sums(x, got)
    out = []
    for i in np.flatnonzero(~(got == rs)):
        row = x[i]
        with np.errstate(invalid="ignore", over="ignore"):
            slack = 4.0 * checksums.gamma(len(row) + 2) * np.abs(row).sum() + 16 * len(row) * checksums.ETA
            if np.isnan(rs[i]) or abs(got[i] - rs[i]) <= slack:
                continue  # not finite at the sender (reported by the panel check), or a reordered sum
            sent, now = col_sums(int(i))
            diff = np.abs(now - sent)
            diff[~np.isfinite(diff)] = np.inf
            t = int(np.argmax(diff))
            x[i, t] = rs[i] - (row[:t].sum() + row[t + 1:].sum())
            ok = bool(abs(row.sum() - rs[i]) <= 4.0 * checksums.gamma(len(row) + 2) * np.abs(row).sum()
                      + 16 * len(row) * checksums.ETA)
        out.append((int(i), t, ok))
    return out
