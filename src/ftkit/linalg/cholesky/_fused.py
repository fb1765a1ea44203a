"""FT_PDPOTRF's trailing update with its checks, block column by block column, while each block column's rows
of ``P`` are in cache.

For every trailing block column ``j`` of this process: its received rows of ``P`` are compared with their
senders' row sums (:func:`._kernels.row_sums`' order; a changed one is repaired before anything reads it),
then block column ``j`` is updated by the plain GEMM (the call :meth:`CholeskySteps.apply_update` makes, same
operands: the factor stays ``pdpotrf``'s bit for bit), then its checksums are carried by the product
:func:`._kernels.carry_blocks` makes (same call, same operands: the same bits). The rows are read from memory
once for the three, not once by the check and the carry over all block columns and again by the GEMMs.

A piece of rows that is also every GEMM's left operand (this process's own rows of ``P``) is checked whole
before the first GEMM, as before: a GEMM reads its rows of every later block row. Block column ``k+1`` goes
first (panel ``k+1`` reads it and its checksums); the rest after panel ``k+1`` is launched, returning to
Python every :data:`STEP` block columns to progress its messages until they have all arrived here, then in
one call. Needs CBLAS and unit row strides (:func:`supports_fused`); otherwise the caller checks and carries
first (:meth:`UpdateChecks.update`) and updates after, as ``pdpotrf`` does.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from .. import _blas
from .._blas import KERNEL_DGEMM, call_dgemm
from ._abft import UpdateChecks
from ._kernels import carry_product, rows_changed
from ._steps import CholeskySteps
from ._trailing import TrailingRows

__all__ = ["FusedUpdate", "supports_fused", "fused_blocks", "check_pieces", "STEP"]

#: Block columns updated per compiled call after panel ``k+1`` is launched (its messages progress between).
STEP = 2


def supports_fused(steps: CholeskySteps, checks: UpdateChecks, mine: np.ndarray, colp: TrailingRows,
                   sums: np.ndarray) -> bool:
    """Whether :class:`FusedUpdate` can run here: CBLAS, every operand float64 with unit row stride and
    every piece of rows F-contiguous (read flat, where it is: a repair must reach what the GEMMs read)."""
    return (_blas._dgemm is not None and steps.w.dtype == np.float64 and steps.w.strides[0] == 8
            and mine.dtype == np.float64 and mine.strides[0] == 8 and sums.strides[0] == 8
            and checks.chk_t.strides[0] == 8
            and all(pc.dtype == np.float64 and pc.flags.f_contiguous for pc in colp.pieces))


class FusedUpdate:
    """Panel ``k``'s update of this process's trailing block columns with the checks of their rows and the
    carry of their checksums (module docstring).

    Parameters
    ----------
    steps, checks
        The factorization's panel engine and its carried checksums.
    k
        The panel.
    mine
        This process's rows of ``P`` below panel ``k`` (every GEMM's left operand, F order).
    colp
        The rows of ``P`` this process's trailing columns multiply, where they arrived.
    sums
        The segment sums of this process's rows of ``P`` (:meth:`UpdateChecks.encode`).
    repair
        ``repair(j)`` restores trailing block column ``j``'s changed rows (called before anything reads
        them).
    """

    def __init__(self, steps: CholeskySteps, checks: UpdateChecks, k: int, mine: np.ndarray,
                 colp: TrailingRows, sums: np.ndarray, repair: Callable[[int], object]) -> None:
        self.k, self.colp, self.repair = k, colp, repair
        ii0, _, _, firsts = checks.carry_at(k)
        wrow, lrow, nrow, ccol = steps.per_layout(("fused", k), lambda: _gemm_table(steps, k, colp.panels))
        self._flat = tuple(pc.reshape(-1, order="F") for pc in colp.pieces)  # F-contiguous: views
        lds = np.array([pc.shape[0] for pc in colp.pieces], np.int64)
        # the pieces that are also the GEMMs' left operand: checked whole first
        self._early = np.array([np.may_share_memory(pc, mine) for pc in colp.pieces], np.bool_)
        self._args = (lds, colp.sums, colp.table, sums, checks.chk_t, firsts, ii0, steps.w,
                      mine, wrow, lrow, nrow, ccol)
        self._width = sums.shape[1]
        self._next = 0  # the first trailing block column not yet updated

    def check_early(self) -> None:
        """Check the rows of the pieces that are the GEMMs' left operand too, repairing changed ones."""
        lds, piece_rs, table = self._args[:3]
        j, trusted = (0 if self._early.any() else -1), -1
        while j >= 0:
            j = check_pieces(self._flat, lds, piece_rs, table, self._early, self._width, j, trusted)
            if j >= 0:
                self.repair(j)
                trusted = j

    def run(self, stop: int | None = None, between: Callable[[], object] | None = None) -> None:
        """Check, update and carry the trailing block columns from the next one not done up to panel ``stop``
        (excluded; default: all), calling ``between()`` after every :data:`STEP` of them until it returns
        true (the messages have all arrived: the rest in one compiled call)."""
        panels = self.colp.panels
        end = len(panels) if stop is None else bisect_left(panels, stop)
        while self._next < end:
            j1 = min(end, self._next + STEP) if between is not None else end
            j, trusted = self._next, -1
            while j >= 0:
                j = fused_blocks(KERNEL_DGEMM, self._flat, *self._args, self._early, j, j1, trusted)
                if j >= 0:
                    self.repair(j)
                    trusted = j
            self._next = j1
            if between is not None and between():
                between = None


def _gemm_table(steps: CholeskySteps, k: int, panels: list[int]) -> tuple[np.ndarray, ...]:
    """Per trailing block column of this process (``panels``, global indices): its update GEMM's first row in
    ``w``, that row in this process's rows of ``P`` (the left operand), the GEMM's rows and its first local
    column (:meth:`CholeskySteps.apply_update`'s operands)."""
    g, n, e = steps.grid, steps.rows.n, steps.panels[k][1]
    below0 = steps.rows.range_on(g.myrow, e, n).start
    wrow, lrow, nrow, ccol = (np.zeros(len(panels), np.int64) for _ in range(4))
    for j, big_j in enumerate(panels):
        cs, ce = steps.panels[big_j]
        r, cl = steps.rows.range_on(g.myrow, cs, n), steps.cols.range_on(g.mycol, cs, ce)
        wrow[j], lrow[j], nrow[j], ccol[j] = r.start, r.start - below0, r.stop - r.start, cl.start
    for a in (wrow, lrow, nrow, ccol):
        a.setflags(write=False)
    return wrow, lrow, nrow, ccol


@njit(cache=True, nogil=True)
def check_pieces(pieces: Any, lds: np.ndarray, piece_rs: Any, table: np.ndarray, early: np.ndarray, w: int,
                 j0: int, trusted: int) -> int:  # pragma: no cover - compiled
    """Compare the row sums of every block column ``j >= j0`` whose piece is ``early`` (``w`` columns) with
    the sent ones (not for ``j == trusted``); return the first ``j`` where one differs, or -1."""
    most = 1
    for j in range(table.shape[0]):
        most = max(most, table[j, 2])
    got = np.empty(most)
    for j in range(j0, table.shape[0]):
        p, r0, m = table[j, 0], table[j, 1], table[j, 2]
        if m <= 0 or not early[p] or j == trusted:
            continue
        ld = lds[p]
        rows = pieces[p][:ld * w].reshape((w, ld)).T
        if rows_changed(rows[r0:r0 + m], piece_rs[p][r0:r0 + m], got[:m]):
            return j
    return -1


@njit(cache=True, nogil=True)
def fused_blocks(dgemm: Any, pieces: Any, lds: np.ndarray, piece_rs: Any, table: np.ndarray,
                 sums: np.ndarray, chk_t: np.ndarray, firsts: np.ndarray, ii0: int, w: np.ndarray,
                 mine: np.ndarray, wrow: np.ndarray, lrow: np.ndarray, nrow: np.ndarray, ccol: np.ndarray,
                 early: np.ndarray, j0: int, j1: int, trusted: int) -> int:  # pragma: no cover - compiled
    """For trailing block columns ``j0 .. j1 - 1`` (rows of ``table`` as in :func:`._kernels.carry_blocks`):
    unless its piece is ``early`` or ``j == trusted``, compare its rows' sums with the sent ones and return
    ``j`` where one differs, before anything reads them; then ``w[wrow:wrow + nrow, ccol:ccol + m] -=
    mine[lrow:lrow + nrow] @ rows.T`` (:func:`ftkit.linalg._blas.gemm_update`'s call) and ``chk_t[ccol:ccol
    + m, 2 firsts[j]:] -= rows @ sums[2 (firsts[j] - ii0):].T`` (:func:`._kernels.carry_blocks`' call), both
    by ``dgemm`` (CBLAS, as ``carry_blocks`` takes it). Returns -1 when all are done. Column major, every
    operand with unit row stride."""
    wd = sums.shape[1]
    ldw, ldm = w.strides[1] // 8, mine.strides[1] // 8
    most = 1
    for j in range(j0, j1):
        most = max(most, table[j, 2])
    got = np.empty(most)
    for j in range(j0, j1):
        p, r0, m = table[j, 0], table[j, 1], table[j, 2]
        ld = lds[p]
        if m <= 0:
            continue
        rows = pieces[p][:ld * wd].reshape((wd, ld)).T
        if j != trusted and not early[p] and rows_changed(rows[r0:r0 + m], piece_rs[p][r0:r0 + m], got[:m]):
            return j
        if nrow[j] > 0 and wd > 0:
            call_dgemm(dgemm, 102, 111, 112, nrow[j], m, wd, -1.0, mine.ctypes.data + 8 * lrow[j], ldm,
                       rows.ctypes.data + 8 * r0, ld, 1.0, w.ctypes.data + 8 * (wrow[j] + ldw * ccol[j]), ldw)
        carry_product(dgemm, rows, r0, m, sums, chk_t, ccol[j], firsts[j], ii0)
    return -1
