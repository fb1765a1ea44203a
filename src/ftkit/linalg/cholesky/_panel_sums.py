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
sums and restores it from its row sum before the product uses it (:func:`repair_rows`), reading them where
they arrived (:class:`TrailingRows`: the parts received and, for the block rows of its own process row, its
own received rows, all of which are then checked and restored: they are every product's left operand). A
value changed in a process's other received rows (the product's left operand only) needs no such check: the
checksums are carried with the segment sums its sender took, so the elements it spoils are located and
corrected when their block column is verified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..._wait import wait_requests
from ._kernels import pack_rows
from ._lookahead import PanelFlight
from ._steps import CholeskySteps
from ._trailing import TrailingRows

if TYPE_CHECKING:
    from ._abft import UpdateChecks

__all__ = ["panel_buffer", "panel_views", "share_panel", "gathered_part", "gather_panel", "direct_part"]


def _unpack(ext: np.ndarray, nloc: int, w: int) -> tuple[np.ndarray, ...]:
    """The views of an encoded panel buffer: ``(flag, rows of P (F order), their row sums, sums of squares,
    column sums, segment sums)``; the segment sums (``2 x`` trailing segments rows, F order) come last and
    travel only along the process row."""
    m = 1 + nloc * w
    sums = ext[m + 2 * nloc + w:]
    return (ext[:1], ext[1:m].reshape((nloc, w), order="F"), ext[m:m + nloc], ext[m + nloc:m + 2 * nloc],
            ext[m + 2 * nloc:m + 2 * nloc + w], sums.reshape((sums.size // w if w else 0, w), order="F"))


def panel_buffer(steps: CholeskySteps, k: int,
                 checks: UpdateChecks) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """An empty encoded buffer of panel ``k`` for this process row; return ``(buffer, its views)``
    (:func:`panel_views`)."""
    g, (s, e) = steps.grid, steps.panels[k]
    below = steps.rows.range_on(g.myrow, e, steps.rows.n)
    nloc, w = below.stop - below.start, e - s
    nsums = 2 * (len(checks.rblk) - int(checks.seg0[k + 1]))
    ext = np.empty(1 + nloc * (w + 2) + w + nsums * w)
    return ext, _unpack(ext, nloc, w)


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
    runs, m = _selected_runs(steps, k, q)
    w = rows.shape[1]
    if m == rows.shape[0]:
        return ext[:1 + m * (w + 2) + w]
    _, _, rs, sq, _, _ = panel_views(ext, rows)
    out = np.empty(1 + m * (w + 2) + w)
    flag, sel, sel_rs, sel_sq, sel_cs, _ = _unpack(out, m, w)
    flag[0] = ext[0]
    pack_rows(rows, rs, sq, runs, sel, sel_rs, sel_sq, sel_cs)
    return out


def _selected_runs(steps: CholeskySteps, k: int, q: int) -> tuple[np.ndarray, int]:
    """The runs ``(first row, rows)`` of this process's rows of panel ``k``'s ``P`` that process column
    ``q``'s trailing columns multiply (:meth:`CholeskySteps.select_rows`' rows, in its order), adjacent
    runs merged, and their number of rows; made once per layout (:meth:`CholeskySteps.per_layout`)."""
    return steps.per_layout(("runs", k, q), lambda: _make_runs(steps, k, q))


def _make_runs(steps: CholeskySteps, k: int, q: int) -> tuple[np.ndarray, int]:
    """:func:`_selected_runs`, made."""
    g = steps.grid
    first = steps.rows.range_on(g.myrow, steps.panels[k][1], steps.rows.n).start
    runs: list[list[int]] = []
    for ca, cb, p, r0 in steps.trailing_blocks(k, q):
        if p != g.myrow:
            continue
        if runs and runs[-1][0] + runs[-1][1] == r0 - first:
            runs[-1][1] += cb - ca
        else:
            runs.append([r0 - first, cb - ca])
    table = np.array(runs, np.int64).reshape((-1, 2))
    table.flags.writeable = False
    return table, int(table[:, 1].sum())


class _Layout(NamedTuple):
    """What :func:`gather_panel` needs of panel ``k``'s shape on this process: ``rows_of[p]``, process row
    ``p``'s rows of ``P`` (their global indices) whole, or (``"direct"``) those it selected for
    this process column (:meth:`CholeskySteps.selected_indices`; this process row's whole); ``counts[p]``
    their number; :class:`TrailingRows`' ``table`` over those pieces and ``panels``. Read-only arrays."""

    rows_of: list[np.ndarray]
    counts: list[int]
    table: np.ndarray
    panels: list[int]




def _layout(steps: CholeskySteps, k: int, mode: str) -> _Layout:
    """Panel ``k``'s :class:`_Layout` on this process for ``mode`` ``"gather"`` (every process row's rows
    whole, a piece each), ``"own"`` (``"gather"``'s, but the table's pieces are the one of process row
    ``mycol``: a square grid's) or ``"direct"``, made once per shape (the maps' keys, the grid's shape and
    this process's coordinates: :meth:`CholeskySteps.per_layout`): per panel, the same index work on every
    call otherwise."""
    return steps.per_layout(("layout", k, mode), lambda: _make_layout(steps, k, mode))


def _make_layout(steps: CholeskySteps, k: int, mode: str) -> _Layout:
    """:func:`_layout`, made."""
    g = steps.grid
    direct = mode == "direct"
    e, n = steps.panels[k][1], steps.rows.n
    first = [steps.rows.range_on(p, e, n).start for p in range(g.nprow)]
    whole = [steps.row_indices[p][steps.rows.range_on(p, e, n)] for p in range(g.nprow)]
    counts = steps.selected_counts(k) if direct else [len(i) for i in whole]
    rows_of = [whole[p] if not direct or p == g.myrow else steps.selected_indices(k, p) + e
               for p in range(g.nprow)]
    blocks = steps.trailing_blocks(k)
    table = np.empty((len(blocks), 3), np.int64)
    taken = [0] * g.nprow
    for j, (ca, cb, p, r0) in enumerate(blocks):
        if not direct or p == g.myrow:
            table[j] = 0 if mode == "own" else p, r0 - first[p], cb - ca
        else:
            table[j] = p, taken[p], cb - ca
            taken[p] += cb - ca
    panels = [big_j for big_j in range(k + 1, len(steps.panels))
              if int(steps.cols.owners[steps.panels[big_j][0]]) == g.mycol]
    for x in (table, *rows_of):
        x.flags.writeable = False
    return _Layout(rows_of, counts, table, panels)


def gather_panel(steps: CholeskySteps, k: int, ext: np.ndarray, flight: PanelFlight | None = None,
                 views: tuple[np.ndarray, ...] | None = None) -> tuple[TrailingRows, list, bool]:
    """Gather the encoded pieces (without their segment sums) down the process column (or take them from
    ``flight``, once arrived); return ``(colp, squares, flagged)``: ``colp`` the rows of ``P`` this
    process's trailing columns multiply where they arrived (:class:`TrailingRows`), ``squares`` the
    ``(global rows, sums of squares)`` of :meth:`UpdateChecks.update`, ``flagged`` whether any process of the
    panel's process column has block column rows to recompute (every process gets the same answer).

    A flight with ``columns="own"`` (a square grid) brought only the piece of the process row that holds
    this process's columns' rows (with its sums, everything the checks of ``colp`` read) and the flags'
    maximum; the sums of squares of this process's own rows are in ``ext``. One with ``"direct"`` brought
    every other process row's :func:`direct_part`; this process's own rows (in ``ext``, ``views``:
    :func:`panel_views`) are the piece of its process row, checked with the others before any product reads
    them (:meth:`UpdateChecks.update`)."""
    if flight is not None and not flight.own:
        assert views is not None
        return _direct_parts(steps, k, views, flight)
    g, lay = steps.grid, _layout(steps, k, "gather" if flight is None else "own")
    w = steps.panels[k][1] - steps.panels[k][0]

    def piece(p: int, buf: np.ndarray) -> tuple[np.ndarray, ...]:
        return (lay.rows_of[p], *_unpack(buf, lay.counts[p], w)[:5])

    if flight is not None:
        idx, _, got, rs, sq, cs = piece(g.mycol, flight.own_piece())
        squares = [(idx, sq)]
        if g.myrow != g.mycol:
            assert views is not None
            squares.append((lay.rows_of[g.myrow], views[3]))
        # process row mycol's piece: its rows in the order of this process's columns
        colp = TrailingRows((got,), (rs,), (cs,), (idx,), lay.table, lay.panels, contiguous=True)
        return colp, squares, flight.column_flag() > 0
    sent, per_row, extra = gathered_part(steps, k)
    pieces, flagged = [], False
    for p, buf in enumerate(steps.gather(ext[:sent], k, per_row, extra)):
        idx, flag, *rest = piece(p, buf)
        flagged |= bool(flag[0])
        pieces.append((idx, *rest))
    colp = TrailingRows.of(pieces, lay.table, lay.panels)
    return colp, [(pc[0], pc[3]) for pc in pieces], flagged


def _direct_parts(steps: CholeskySteps, k: int, views: tuple[np.ndarray, ...],
                  flight: PanelFlight) -> tuple[TrailingRows, list, bool]:
    """:func:`gather_panel` from a ``"direct"`` flight of :func:`direct_part`'s parts: the rows where they
    arrived, this process's own rows (``views``' rows) for the block rows of its process row."""
    g, (s, e), lay = steps.grid, steps.panels[k], _layout(steps, k, "direct")
    w, (flag0, rows, rs, sq, cs, _) = e - s, views
    pieces: list[tuple[Any, ...]] = []
    flagged = flag0[0] > 0
    for p, (idx, cnt, part) in enumerate(zip(lay.rows_of, lay.counts, flight.parts(), strict=True)):
        if p == g.myrow:
            pieces.append((idx, rows, rs, sq, cs))
            continue
        flag, sel, prs, psq, pcs, _ = _unpack(part, cnt, w)
        flagged |= flag[0] > 0
        pieces.append((idx, sel, prs, psq, pcs))
    colp = TrailingRows.of(pieces, lay.table, lay.panels, whole=g.myrow)
    return colp, [(pc[0], pc[3]) for pc in pieces], bool(flagged)
