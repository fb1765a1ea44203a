"""The blocked right-looking Cholesky factorization behind PDPOTRF, one diagonal block (panel) at a time.

The matrix is factored as ``W = L L.T`` in a work array ``W`` whose rows follow ``rows`` (over the process
rows) and columns ``cols`` (over the process columns), two maps with one block partition, so diagonal block
``k`` is a square block of one process. Panel ``k`` (columns ``[s, e)``):

1. the owner of the diagonal block factors it (LAPACK's ``potrf`` through numpy) and broadcasts ``L_kk`` (or
   the order of the leading minor that is not positive definite) to every process;
2. the processes of the panel's process column solve their rows below it: ``P = W_{e:,k} L_kk^{-T}``;
3. ``P`` is broadcast along the process rows and gathered down the process columns (each process keeps the
   rows its columns multiply: :meth:`CholeskySteps.column_rows`; every wait sleeps), and every process
   updates its trailing block columns on and below the diagonal: ``W_{e:,e:} -= P P.T`` (lower block
   trapezoid: diagonal blocks are updated whole, their strict upper part is scratch).

``W`` is a work copy: the caller copies back only the lower triangle, so the triangle the user's ``uplo``
excludes is never written. The state between panels is ``W`` plus the panel index: :class:`CholeskySteps`
can be resumed at any panel from a saved ``W`` (what ``ft_pdpotrf`` checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..._wait import wait_requests
from .._blas import gemm_update, trsm_right_lower_t
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ..pblas._tri_sweep import diagonal_blocks

__all__ = ["CholeskySteps", "first_bad_minor", "HOLD"]

#: What :meth:`CholeskySteps.factor_diagonal` broadcasts instead of a minor when told to hold.
HOLD = -2


def first_bad_minor(a: np.ndarray) -> int:
    """Return the 0-based index ``j`` such that the leading ``j+1`` minor of ``a`` (lower triangle read) is
    not positive definite (a pivot <= 0 or not finite), or ``-1`` if all are."""
    n = a.shape[0]
    low = np.zeros((n, n))
    a = a.astype(np.float64)
    for j in range(n):
        d = a[j, j] - low[j, :j] @ low[j, :j]
        if not d > 0.0 or not np.isfinite(d):
            return j
        low[j, j] = np.sqrt(d)
        low[j + 1:, j] = (a[j + 1:, j] - low[j + 1:, :j] @ low[j, :j]) / low[j, j]
    return -1


class CholeskySteps:
    """Factor ``W`` panel by panel (collective on ``grid``; every process calls :meth:`step` in order).

    Parameters
    ----------
    grid
        The process grid.
    w
        This process's piece of the ``n x n`` symmetric matrix (lower triangle read), laid out by ``rows`` x
        ``cols``; overwritten in place with ``L`` (lower triangle).
    rows, cols
        Maps over process rows / columns with the same ``n``, block size and offset.
    """

    def __init__(self, grid: ProcessGrid, w: np.ndarray, rows: BlockCyclic1D, cols: BlockCyclic1D) -> None:
        self.grid, self.w, self.rows, self.cols = grid, w, rows, cols
        self.panels = diagonal_blocks(rows)
        self.square = rows.aligned_with(cols)  # process row p holds the rows of process column p's columns
        #: the global indices of every process row's rows and of this process's columns (increasing)
        self.row_indices = [rows.indices_on(p) for p in range(grid.nprow)]
        self.col_indices = cols.indices_on(grid.mycol)
        self._blocks: list[tuple[int, int, int, int] | None] | None = None  # column_rows' table (lazy)

    def owns_diagonal(self, k: int) -> bool:
        """Whether this process holds diagonal block ``k``."""
        s, g = self.panels[k][0], self.grid
        return (g.myrow, g.mycol) == (int(self.rows.owners[s]), int(self.cols.owners[s]))

    def diagonal_block(self, k: int) -> np.ndarray:
        """The view of diagonal block ``k`` in ``w`` (on its owner)."""
        s, e = self.panels[k]
        g = self.grid
        return self.w[self.rows.range_on(g.myrow, s, e), self.cols.range_on(g.mycol, s, e)]

    def factor_diagonal(self, k: int, hold: bool = False) -> tuple[int, np.ndarray | None]:
        """Factor diagonal block ``k`` on its owner and broadcast ``(bad, L_kk)``: ``bad`` is the 0-based
        submatrix index of the failing minor (``-1`` if none), ``L_kk`` is ``None`` when ``bad >= 0``.

        ``hold`` (read on the owner): factor nothing and broadcast ``(HOLD, None)`` instead, so every process
        learns, in the same message, that block column ``k`` must be recomputed first (``ft_pdpotrf``)."""
        g, (s, e) = self.grid, self.panels[k]
        pk, qk = int(self.rows.owners[s]), int(self.cols.owners[s])
        # one flat buffer (the minor, then L_kk in F order) broadcast without pickling, waited by sleeping
        flat = np.empty(1 + (e - s) ** 2, self.w.dtype)
        low = flat[1:].reshape((e - s, e - s), order="F")
        if hold and self.owns_diagonal(k):
            flat[0] = HOLD
        elif self.owns_diagonal(k):
            blk = self.diagonal_block(k)
            try:
                chol = np.linalg.cholesky(blk)  # reads the lower triangle only
                ok = bool(np.all(np.isfinite(chol)))
            except np.linalg.LinAlgError:
                ok = False
            if ok:
                blk[...] = chol
                flat[0], low[...] = -1, chol
            else:
                j = first_bad_minor(blk)
                flat[0] = s + (j if j >= 0 else 0)
        if g.size > 1:
            wait_requests([g.comm.Ibcast(flat, root=g.rank_of(pk, qk))])
        bad = int(flat[0])
        return bad, (low if bad == -1 else None)

    def solve_panel(self, k: int, low: np.ndarray, broadcast: bool = True,
                    check: Callable[[np.ndarray, np.ndarray, np.ndarray], object] | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
        """Overwrite panel ``k`` below the diagonal with ``P = W_{e:,k} L_kk^{-T}`` (its process column) and
        return this process's rows of ``P`` (global rows ``>= e`` of its process row), broadcast along the
        process row (unless not ``broadcast``: then only the panel's process column has them). The rows are
        solved in place in the returned array (F order, the panel's own layout: no transposed copies).
        ``check``, if given, is called on the panel's process column as ``check(before, p, low)`` after the
        solve and before the panel is overwritten: ``before`` is the panel (``W_{e:,k}``, unchanged), ``p``
        the solution (the returned rows), which ``check`` may solve again in place. ``out`` (with
        ``broadcast`` false): the array the rows are solved in and returned as (``ft_pdpotrf``'s encoded
        buffer)."""
        g, (s, e) = self.grid, self.panels[k]
        qk = int(self.cols.owners[s])
        below = self.rows.range_on(g.myrow, e, self.rows.n)
        nloc = below.stop - below.start
        flat = np.empty(nloc * (e - s) if out is None else 0, self.w.dtype)
        mine = flat.reshape((nloc, e - s), order="F") if out is None else out
        if g.mycol == qk:
            panel = self.w[below, self.cols.range_on(qk, s, e)]
            if nloc:
                mine[...] = panel
                trsm_right_lower_t(low, mine)  # P = W_{e:,k} L^{-T}
                if check is not None:
                    check(panel, mine, low)
                panel[...] = mine  # same layout: a plain copy
        if broadcast and g.npcol > 1 and flat.size:
            wait_requests([g.row_comm.Ibcast(flat, root=qk)])  # sleeping: a blocking Bcast busy-polls
        return mine

    def update(self, k: int, mine: np.ndarray) -> None:
        """Subtract ``P P.T`` from this process's trailing block columns, on and below the diagonal."""
        w = mine.shape[1]
        pieces = self.gather(mine.reshape(-1, order="F"), k, w)
        self.apply_update(k, mine, self.column_rows(k, [pc.reshape((pc.size // w, w), order="F")
                                                        for pc in pieces]))

    def gather(self, flat: np.ndarray, k: int, per_row: int, extra: int = 0) -> list[np.ndarray]:
        """Return every process row's flat buffer ``flat`` (gathered down the process column, one
        ``Iallgatherv`` waited by sleeping): process row ``p``'s holds ``per_row`` values per row of it
        below panel ``k`` plus ``extra``."""
        g, e, n = self.grid, self.panels[k][1], self.rows.n
        if g.nprow == 1:
            return [flat]
        spans = [self.rows.range_on(p, e, n) for p in range(g.nprow)]
        counts = [per_row * (r.stop - r.start) + extra for r in spans]
        displs = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        out = np.empty(sum(counts), flat.dtype)
        wait_requests([g.col_comm.Iallgatherv(flat, [out, (counts, displs)])])
        return [out[d:d + c] for d, c in zip(displs, counts, strict=True)]

    def column_rows(self, k: int, pieces: list[np.ndarray]) -> np.ndarray:
        """Return the rows of ``P`` (panel ``k`` below its diagonal block) that this process's trailing
        columns multiply, in the order of those columns (F order), from the process rows' ``pieces``: on a
        grid whose process row ``p`` holds the rows of process column ``p``'s columns, that piece itself (no
        copy); else the rows copied out of the pieces (never all of ``P``), one slice per trailing block
        column: rows and columns share one block partition, so block column ``J``'s rows are one contiguous
        run of the piece of the process row that holds block row ``J``."""
        g, e, n = self.grid, self.panels[k][1], self.rows.n
        if self.square:
            return pieces[g.mycol]
        if self._blocks is None:  # (first local column, last + 1, process row, its first local row) per block
            self._blocks = [(*self.cols.range_on(g.mycol, cs, ce).indices(n)[:2], int(self.rows.owners[cs]),
                             self.rows.range_on(int(self.rows.owners[cs]), cs, ce).start)
                            if int(self.cols.owners[cs]) == g.mycol else None for cs, ce in self.panels]
        trail = self.cols.range_on(g.mycol, e, n)
        c0 = trail.start
        out = np.empty((trail.stop - c0, pieces[0].shape[1]), pieces[0].dtype, order="F")
        first = [self.rows.range_on(p, e, n).start for p in range(g.nprow)]  # each piece's first local row
        for blk in self._blocks[k + 1:]:
            if blk is not None:
                ca, cb, p, r0 = blk
                out[ca - c0:cb - c0] = pieces[p][r0 - first[p]:r0 - first[p] + cb - ca]
        return out

    def apply_update(self, k: int, mine: np.ndarray, colp: np.ndarray) -> None:
        """``W_{e:,e:} -= P P.T`` on this process's trailing block columns (lower block trapezoid), with
        ``mine`` its rows of ``P`` and ``colp`` the rows of its trailing columns (:meth:`column_rows`)."""
        g, e = self.grid, self.panels[k][1]
        n = self.rows.n
        below0 = self.rows.range_on(g.myrow, e, n).start
        c0 = self.cols.range_on(g.mycol, e, n).start
        for cs, ce in self.panels[k + 1:]:
            if int(self.cols.owners[cs]) != g.mycol:
                continue
            r = self.rows.range_on(g.myrow, cs, n)
            if r.stop > r.start:
                cl = self.cols.range_on(g.mycol, cs, ce)
                gemm_update(-1.0, mine[r.start - below0:], colp[cl.start - c0:cl.stop - c0].T, self.w[r, cl])

    def step(self, k: int) -> int:
        """Factor panel ``k`` and update the trailing matrix; return ``-1``, or the 0-based index of the
        failing minor (every process returns the same; ``W`` is then left partly factored)."""
        bad, low = self.factor_diagonal(k)
        if bad >= 0:
            return bad
        assert low is not None
        mine = self.solve_panel(k, low)
        self.update(k, mine)
        return -1
