"""A Cholesky panel encoded with its sums for FT_PDPOTRF's checks (:mod:`ftkit.linalg.cholesky._abft`), how
it travels, and the repair of its rows on arrival.

The panel travels with its row sums, sums of squares, column sums, segment sums and a flag (rows of its block
column that its sender could not correct: :func:`panel_buffer`, :meth:`._abft.UpdateChecks.encode`, one
compiled pass over the solved panel, :func:`share_panel`, :func:`gather_panel`): along the process rows the
whole buffer; down the process columns, on a square grid, the diagonal process's part, as ``pdpotrf``'s rows
go, and the flags' maximum beside it; elsewhere, straight from the panel's process column (as ``pdpotrf``'s
``"direct"``), to each process the rows its columns multiply with their sums, the column sums of those rows
and the flag (:func:`direct_part`). Each process compares the row sums of the rows of ``P`` its columns
multiply (the product's right operand, and the carry's) with the senders' (same summation order,
:mod:`._kernels`: equal unless a value changed), locates a changed element's column from its piece's column
sums and restores it from its row sum before the product uses it (:func:`repair_rows`); those of its own
process row it checks on arrival, restoring them in its received rows (:func:`gather_panel`). A value changed
in a process's other received rows (the product's left operand) needs no such check: the checksums are
carried with the segment sums its sender took, so the elements it spoils are located and corrected when
their block column is verified.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._wait import wait_requests
from .. import checksums
from ._kernels import col_sums, row_sums
from ._lookahead import PanelFlight
from ._steps import CholeskySteps

if TYPE_CHECKING:
    from ._abft import UpdateChecks

__all__ = ["panel_buffer", "panel_views", "share_panel", "gathered_part", "gather_panel", "direct_part",
           "piece_col_sums", "repair_rows"]


def _unpack(ext: np.ndarray, nloc: int, w: int) -> tuple[np.ndarray, ...]:
    """The views of an encoded panel buffer: ``(flag, rows of P (F order), their row sums, sums of squares,
    column sums, segment sums)``; the segment sums (``2 x`` trailing segments rows, F order) come last and
    travel only along the process row."""
    m = 1 + nloc * w
    sums = ext[m + 2 * nloc + w:]
    return (ext[:1], ext[1:m].reshape((nloc, w), order="F"), ext[m:m + nloc], ext[m + nloc:m + 2 * nloc],
            ext[m + 2 * nloc:m + 2 * nloc + w], sums.reshape((sums.size // w if w else 0, w), order="F"))


def panel_buffer(steps: CholeskySteps, k: int, checks: UpdateChecks) -> tuple[np.ndarray, np.ndarray]:
    """An empty encoded buffer of panel ``k`` for this process row; return ``(buffer, its rows of P)``."""
    g, (s, e) = steps.grid, steps.panels[k]
    below = steps.rows.range_on(g.myrow, e, steps.rows.n)
    nloc, w = below.stop - below.start, e - s
    nsums = 2 * (len(checks.rblk) - int(checks.seg0[k + 1]))
    ext = np.empty(1 + nloc * (w + 2) + w + nsums * w)
    return ext, _unpack(ext, nloc, w)[1]


def panel_views(ext: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """The views of an encoded buffer (``rows``: its view of P): ``(flag, rows, row sums, sums of squares,
    column sums, segment sums)``."""
    return _unpack(ext, *rows.shape)


def share_panel(steps: CholeskySteps, k: int, ext: np.ndarray) -> None:
    """Broadcast the encoded panel buffer from the panel's process column along the process row."""
    g = steps.grid
    if g.npcol > 1 and ext.size:
        wait_requests([g.row_comm.Ibcast(ext, root=int(steps.cols.owners[steps.panels[k][0]]))])


def gathered_part(steps: CholeskySteps, k: int) -> tuple[int, int, int]:
    """``(values, per row, extra)`` of this process's encoded panel buffer that travel down the process
    column (all but the segment sums; :meth:`CholeskySteps.gather`'s ``per_row`` and ``extra``; a
    :func:`direct_part` has the same layout)."""
    s, e = steps.panels[k]
    mine = steps.rows.range_on(steps.grid.myrow, e, steps.rows.n)
    return 1 + (mine.stop - mine.start) * (e - s + 2) + e - s, e - s + 2, e - s + 1


def direct_part(steps: CholeskySteps, k: int, ext: np.ndarray, rows: np.ndarray, q: int) -> np.ndarray:
    """What a process of panel ``k``'s process column sends of its encoded buffer ``ext`` (``rows``: its rows
    of P) to the processes of process column ``q`` in the other process rows (:class:`PanelFlight`'s
    ``"direct"`` ``pack``): in :func:`gathered_part`'s layout, the flag, the rows that column's trailing
    columns multiply (:meth:`CholeskySteps.select_rows`), their row sums and sums of squares, and the column
    sums of those rows (in :func:`col_sums`' order: the receivers locate a changed value with them); when it
    multiplies them all, the buffer's own first values (no copy)."""
    m, w = steps.selected_counts(k, q)[steps.grid.myrow], rows.shape[1]
    if m == rows.shape[0]:
        return ext[:1 + m * (w + 2) + w]
    _, _, rs, sq, _, _ = panel_views(ext, rows)
    out = np.empty(1 + m * (w + 2) + w)
    flag, sel, sel_rs, sel_sq, sel_cs, _ = _unpack(out, m, w)
    flag[0] = ext[0]
    steps.select_rows(k, rows, sel, column=q)
    steps.select_rows(k, rs[:, None], sel_rs[:, None], column=q)
    steps.select_rows(k, sq[:, None], sel_sq[:, None], column=q)
    col_sums(sel, sel_cs)
    return out


def gather_panel(steps: CholeskySteps, k: int, ext: np.ndarray, flight: PanelFlight | None = None,
                 rows: np.ndarray | None = None,
                 record: Callable[[int, int, bool], object] | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                                    list, list, bool]:
    """Gather the encoded pieces (without their segment sums) down the process column (or take them from
    ``flight``, once arrived); return ``(colp, its row sums, squares, pieces, flagged)``: ``colp`` the rows of
    ``P`` this process's trailing columns multiply (:meth:`CholeskySteps.column_rows`), ``squares`` the
    ``(rows, sums of squares)`` of :meth:`UpdateChecks.update`, each piece ``(global row indices - e, rows,
    row sums, sums of squares, column sums)`` (:func:`piece_col_sums`), ``flagged`` whether any process of
    the panel's process column has block column rows to recompute (every process gets the same answer).

    A flight with ``columns="own"`` (a square grid) brought only the piece of the process row that holds
    this process's columns' rows (with its sums, everything the checks of ``colp`` read) and the flags'
    maximum; the sums of squares of this process's own rows are in ``ext``. One with ``"direct"`` brought
    every other process row's :func:`direct_part`; this process's own rows its columns multiply are first
    checked against their row sums, a changed value restored in ``rows`` (this process's rows of P in
    ``ext``) and reported to ``record(row of P, column, restored)`` (:func:`_check_own`)."""
    s, e = steps.panels[k]
    w, n, g = e - s, steps.rows.n, steps.grid

    def piece(p: int, buf: np.ndarray) -> tuple[np.ndarray, ...]:
        idx = steps.row_indices[p][steps.rows.range_on(p, e, n)] - e
        return (idx, *_unpack(buf, len(idx), w)[:5])

    if flight is not None and flight.own:
        idx, _, got, rs, sq, cs = piece(g.mycol, flight.own_piece())
        squares = [(idx, sq)]
        if g.myrow != g.mycol:
            mine = piece(g.myrow, ext)
            squares.append((mine[0], mine[4]))
        return got, rs, squares, [(idx, got, rs, sq, cs)], flight.column_flag() > 0
    if flight is not None:
        assert rows is not None and record is not None
        return _direct_parts(steps, k, ext, rows, record, flight)
    sent, per_row, extra = gathered_part(steps, k)
    pieces, flagged = [], False
    for p, buf in enumerate(steps.gather(ext[:sent], k, per_row, extra)):
        idx, flag, *rest = piece(p, buf)
        flagged |= bool(flag[0])
        pieces.append((idx, *rest))
    colp = steps.column_rows(k, [pc[1] for pc in pieces])
    col_rs = steps.column_rows(k, [pc[2][:, None] for pc in pieces])[:, 0]
    return colp, col_rs, [(pc[0], pc[3]) for pc in pieces], pieces, flagged


def _direct_parts(steps: CholeskySteps, k: int, ext: np.ndarray, rows: np.ndarray,
                  record: Callable[[int, int, bool], object],
                  flight: PanelFlight) -> tuple[np.ndarray, np.ndarray, list, list, bool]:
    """:func:`gather_panel` from a ``"direct"`` flight of :func:`direct_part`'s parts: ``colp`` and its row
    sums copied once, block column by block column, out of the parts and this process's own rows (no copy
    of a selection of them first), which are checked on arrival (:func:`_check_own`)."""
    g, (s, e) = steps.grid, steps.panels[k]
    w, (_, _, rs, sq, _, _) = e - s, panel_views(ext, rows)
    mine = steps.row_indices[g.myrow][steps.rows.range_on(g.myrow, e, steps.rows.n)] - e
    # this process row's piece: all its rows, their column sums taken when a repair needs them
    pieces: list[tuple[Any, ...]] = []
    flagged = ext[0] > 0
    for p, (cnt, part) in enumerate(zip(steps.selected_counts(k), flight.parts(), strict=True)):
        if p == g.myrow:
            pieces.append((mine, rows, rs, sq, None))
            continue
        flag, sel, prs, psq, pcs, _ = _unpack(part, cnt, w)
        flagged |= flag[0] > 0
        pieces.append((steps.selected_indices(k, p), sel, prs, psq, pcs))
    blocks = steps.column_blocks(k, rows, [pc[1] for pc in pieces])
    sums_of = steps.column_blocks(k, rs[:, None], [pc[2][:, None] for pc in pieces])
    colp, col_rs = _stack(list(blocks.values()), w), _stack(list(sums_of.values()), 1)[:, 0]
    if _check_own(steps, k, ext, rows, record, blocks, colp, col_rs):
        colp = _stack(list(blocks.values()), w)  # views of rows: repaired there
    squares = [(mine, sq)] + [(pc[0], pc[3]) for p, pc in enumerate(pieces) if p != g.myrow]
    return colp, col_rs, squares, pieces, bool(flagged)


def _stack(blocks: list[np.ndarray], w: int) -> np.ndarray:
    """``blocks`` (row blocks of ``w`` columns) one under the other in one array, F order."""
    out = np.empty((sum(b.shape[0] for b in blocks), w), order="F")
    if blocks:
        np.concatenate(blocks, axis=0, out=out)
    return out


def _check_own(steps: CholeskySteps, k: int, ext: np.ndarray, rows: np.ndarray,
               record: Callable[[int, int, bool], object], blocks: dict[int, np.ndarray], colp: np.ndarray,
               col_rs: np.ndarray) -> bool:
    """Compare the rows of ``colp`` that came from this process's own rows of panel ``k`` (``blocks``: the
    block columns' rows, by panel index, in ``colp``'s order) with the row sums taken where the panel was
    solved; if one changed, check all of ``rows`` against them and restore the changed values there
    (:func:`repair_rows`, ``record(row of P, column, restored)`` per repair), before any product or carry
    reads them; return whether any did."""
    g, (s, e) = steps.grid, steps.panels[k]
    _, _, rs, _, cs, _ = panel_views(ext, rows)
    at, changed = 0, False
    for j, blk in blocks.items():
        if int(steps.rows.owners[steps.panels[j][0]]) == g.myrow:
            got = np.empty(blk.shape[0])
            row_sums(colp[at:at + blk.shape[0]], got)
            changed |= not np.array_equal(got, col_rs[at:at + blk.shape[0]])
        at += blk.shape[0]
    if not changed:
        return False

    def present(_i: int) -> tuple[np.ndarray, np.ndarray]:
        now = np.empty(rows.shape[1])
        col_sums(rows, now)
        return cs, now

    idx = steps.row_indices[g.myrow][steps.rows.range_on(g.myrow, e, steps.rows.n)]
    for i, t, ok in repair_rows(rows, rs, present):
        record(int(idx[i]), s + t, ok)
    return True


def piece_col_sums(colp: np.ndarray, need: np.ndarray, pieces: list,
                   row: int) -> tuple[np.ndarray, np.ndarray]:
    """The sent and the present column sums of the piece holding ``row`` of ``P`` (``colp`` holds the rows
    ``need``; the piece's rows not among them as received), in the sender's summation order."""
    for idx, rows, _, _, cs in pieces:
        if row in idx:
            if cs is None:  # this process's own rows, as checked on arrival (_check_own)
                cs = np.empty(rows.shape[1])
                col_sums(rows, cs)
            now = np.array(rows, order="F")
            sel = np.isin(need, idx)
            now[np.searchsorted(idx, need[sel])] = colp[sel]
            got = np.empty(now.shape[1])
            col_sums(now, got)
            return cs, got
    raise AssertionError(f"row {row} is in no piece")  # pragma: no cover - the pieces cover P


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
