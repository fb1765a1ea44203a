"""The blocked right-looking Cholesky factorization behind PDPOTRF, one diagonal block (panel) at a time.

The matrix is factored as ``W = L L.T`` in a work array ``W`` whose rows follow ``rows`` (over the process
rows) and columns ``cols`` (over the process columns), two maps with one block partition, so diagonal block
``k`` is a square block of one process. Panel ``k`` (columns ``[s, e)``):

1. the owner of the diagonal block factors it (LAPACK's ``potrf`` through numpy) and broadcasts ``L_kk`` (or
   the order of the leading minor that is not positive definite) to every process;
2. the processes of the panel's process column solve their rows below it: ``P = W_{e:,k} L_kk^{-T}``;
3. ``P`` is broadcast along the process rows and sent down the process columns (only the rows each
   process's trailing columns multiply: :class:`._lookahead.PanelFlight`'s ``columns``; on a grid that is
   not square both go straight from the panel's process column), and every process
   updates its trailing block columns on and below the diagonal: ``W_{e:,e:} -= P P.T`` (lower block
   trapezoid: diagonal blocks are updated whole, their strict upper part is scratch).

The look-ahead schedule that runs these steps is :mod:`ftkit.linalg.cholesky._lookahead`.

``W`` is a work copy: the caller copies back only the lower triangle, so the triangle the user's ``uplo``
excludes is never written. The state between panels is ``W`` plus the panel index: when the schedule has
finished panel ``k``'s update, the columns ``< e_k`` are final and the trailing matrix is what the updates of
panels ``0 .. k`` leave (block column ``k+1`` may already be factored as panel ``k+1``: it is not part of
that state, and a resume at ``k+1`` recomputes it), so :class:`CholeskySteps` can be resumed at any panel
from a saved ``W`` (what ``ft_pdpotrf`` checkpoints). A leading minor that is not positive definite in panel
``k+1`` (found by the look-ahead) is reported after panel ``k``'s update has finished, with the same minor on
every process, leaving ``W`` as the sequential schedule leaves it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from mpi4py import MPI

from ..._wait import deadline_after, poll_until, wait_requests
from .._blas import gemm_update, trsm_right_lower_t
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ..pblas._redistribute import displacements
from ..pblas._tri_sweep import diagonal_blocks

__all__ = ["CholeskySteps", "DiagonalMessage", "first_bad_minor", "HOLD", "WAIT_TIMEOUT"]

#: What :meth:`CholeskySteps.factor_diagonal` broadcasts instead of a minor when told to hold.
HOLD = -2
#: Seconds a process waits for one panel's messages before it gives up (a peer that died or hangs).
WAIT_TIMEOUT = 600.0
#: The tag of ``column_only``'s messages of the diagonal block (on the process row and column
#: communicators).
TAG_DIAGONAL = 605



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


class _Layout:
    """What :class:`CholeskySteps` derives from its maps alone, made once per layout and process
    (:func:`_layout`): every call on the same shape reuses it (the maps' index tables included)."""

    def __init__(self, rows: BlockCyclic1D, cols: BlockCyclic1D, myrow: int, mycol: int) -> None:
        self.rows, self.cols = rows, cols
        self.panels = diagonal_blocks(rows)
        self.square = rows.aligned_with(cols)  # process row p holds the rows of process column p's columns
        self.row_indices = [rows.indices_on(p) for p in range(rows.nprocs)]
        self.col_indices = cols.indices_on(mycol)
        for a in (*self.row_indices, self.col_indices):
            a.setflags(write=False)  # shared by every call
        #: CholeskySteps._block_table's tables and selected_counts' counts by process column (lazy)
        self.tables: dict[int, list[tuple[int, int, int, int] | None]] = {}
        self.counts: dict[int, list[list[int]]] = {}
        # apply_update's GEMMs: (block column, its rows here, its local columns) of this process's block
        # columns with rows here, in order, and their block column indices (for bisect)
        n = rows.n
        self.updates = [(j, rows.range_on(myrow, cs, n), cols.range_on(mycol, cs, ce))
                        for j, (cs, ce) in enumerate(self.panels) if int(cols.owners[cs]) == mycol]
        self.updates = [u for u in self.updates if u[1].stop > u[1].start]
        self.update_keys = [u[0] for u in self.updates]
        #: what other modules derive from this layout alone (:meth:`CholeskySteps.per_layout`), by their key
        self.derived: dict[tuple, Any] = {}


@lru_cache(maxsize=16)
def _layout(rows: tuple[int, ...], cols: tuple[int, ...], myrow: int, mycol: int) -> _Layout:
    """The :class:`_Layout` of the maps with :attr:`~ftkit.linalg.descriptor.BlockCyclic1D.key` ``rows`` and
    ``cols`` on process ``(myrow, mycol)``."""
    return _Layout(BlockCyclic1D(*rows), BlockCyclic1D(*cols), myrow, mycol)


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
        lay = _layout(rows.key, cols.key, grid.myrow, grid.mycol)  # the same maps, their tables made once
        self.grid, self.w, self.rows, self.cols = grid, w, lay.rows, lay.cols
        self.panels, self.square = lay.panels, lay.square
        #: the global indices of every process row's rows and of this process's columns (increasing)
        self.row_indices, self.col_indices = lay.row_indices, lay.col_indices
        self._tables, self._counts = lay.tables, lay.counts
        self._updates, self._update_keys = lay.updates, lay.update_keys
        self._derived = lay.derived

    def per_layout(self, what: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, made once per layout and process (kept with this class's own per-shape tables) and
        shared by every factorization on it: it must depend only on the maps, this process's place in the
        grid and ``what`` (which names it), and hold only read-only arrays."""
        got = self._derived.get(what)
        if got is None:
            got = self._derived[what] = make()
        return got

    def owns_diagonal(self, k: int) -> bool:
        """Whether this process holds diagonal block ``k``."""
        s, g = self.panels[k][0], self.grid
        return (g.myrow, g.mycol) == (int(self.rows.owners[s]), int(self.cols.owners[s]))

    def diagonal_block(self, k: int) -> np.ndarray:
        """The view of diagonal block ``k`` in ``w`` (on its owner)."""
        s, e = self.panels[k]
        g = self.grid
        return self.w[self.rows.range_on(g.myrow, s, e), self.cols.range_on(g.mycol, s, e)]

    def start_diagonal(self, k: int, hold: bool = False, column_only: bool = False) -> DiagonalMessage:
        """Factor diagonal block ``k`` on its owner and start broadcasting ``(bad, L_kk)`` to every process
        (:meth:`factor_diagonal` waits for it): ``bad`` is the 0-based submatrix index of the failing minor
        (``-1`` if none).

        ``hold`` (read on the owner): factor nothing and broadcast ``(HOLD, None)`` instead, so every process
        learns, in the same message, that block column ``k`` must be recomputed first (``ft_pdpotrf``).
        ``column_only``: ``L_kk`` goes only down the panel's process column (the processes that solve with
        it), straight from the owner; the others get ``bad`` alone (:meth:`DiagonalMessage.result` gives
        them no ``L_kk``), along their process row from its process of the panel's column, which passes it
        on as soon as it has it (the owner at once, the others when their column's message has arrived:
        :meth:`DiagonalMessage.arrived`). A broadcast to every process passes its data on through
        processes that need none of it, each of which forwards it only when it next tests its messages
        (between its GEMMs, or when the system next runs it on a loaded machine): the panel's solve, the
        critical path, waited for them, and so did the processes that need ``bad`` to receive the panel."""
        g, (s, e) = self.grid, self.panels[k]
        pk, qk = int(self.rows.owners[s]), int(self.cols.owners[s])
        # one flat buffer (the minor, then L_kk in F order) broadcast without pickling, waited by sleeping
        flat = np.empty(1 + (e - s) ** 2 if g.mycol == qk or not column_only else 1, self.w.dtype)
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
                flat[0] = -1
                flat[1:].reshape((e - s, e - s), order="F")[...] = chol
            else:
                j = first_bad_minor(blk)
                flat[0] = s + (j if j >= 0 else 0)
        if g.size == 1:
            return DiagonalMessage(flat, e - s, [])
        if not column_only:
            request = g.comm.Ibcast(flat, root=g.rank_of(pk, qk))
            return DiagonalMessage(flat, e - s, [request], None if self.owns_diagonal(k) else request)
        # column_only: point-to-point messages (a nonblocking broadcast among 2 or 3 processes costs more
        # to set up and to progress than the messages it sends); in order per sender, so one tag serves
        if g.mycol != qk:  # bad alone, from this process row's process of the panel's column
            request = g.row_comm.Irecv(flat, source=qk, tag=TAG_DIAGONAL)
            return DiagonalMessage(flat, e - s, [request], request)
        forward = (lambda: [g.row_comm.Isend(flat[:1], dest=q, tag=TAG_DIAGONAL)
                            for q in range(g.npcol) if q != qk]) if g.npcol > 1 else None
        if self.owns_diagonal(k):  # bad is here: along the row at once
            reqs = [g.col_comm.Isend(flat, dest=p, tag=TAG_DIAGONAL) for p in range(g.nprow) if p != pk]
            return DiagonalMessage(flat, e - s, reqs if forward is None else [*reqs, *forward()])
        column = g.col_comm.Irecv(flat, source=pk, tag=TAG_DIAGONAL)
        return DiagonalMessage(flat, e - s, [column], column, forward)

    def factor_diagonal(self, k: int, hold: bool = False) -> tuple[int, np.ndarray | None]:
        """Factor diagonal block ``k`` on its owner and broadcast ``(bad, L_kk)`` (:meth:`start_diagonal`),
        waiting for it; ``L_kk`` is ``None`` when ``bad >= 0``."""
        msg = self.start_diagonal(k, hold)
        msg.wait(deadline_after(WAIT_TIMEOUT))
        return msg.result()

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
            self.solve_rows(k, low, mine, check)
        if broadcast and g.npcol > 1 and flat.size:
            wait_requests([g.row_comm.Ibcast(flat, root=qk)])  # sleeping: a blocking Bcast busy-polls
        return mine

    def solve_rows(self, k: int, low: np.ndarray, mine: np.ndarray,
                   check: Callable[[np.ndarray, np.ndarray, np.ndarray], object] | None) -> None:
        """On panel ``k``'s process column: solve this process's rows of the panel below its diagonal block
        into ``mine`` and copy them into ``w`` (:meth:`solve_panel`). Without ``check`` they are solved in
        ``w`` and copied into ``mine``: one copy instead of two, and the same bits (BLAS's solve packs its
        operand: its leading dimension does not change the result)."""
        g, (s, e) = self.grid, self.panels[k]
        if not mine.shape[0]:
            return
        panel = self.w[self.rows.range_on(g.myrow, e, self.rows.n), self.cols.range_on(g.mycol, s, e)]
        if check is None:
            trsm_right_lower_t(low, panel)
            mine[...] = panel
            return
        mine[...] = panel
        trsm_right_lower_t(low, mine)  # P = W_{e:,k} L^{-T}
        check(panel, mine, low)
        panel[...] = mine  # same layout: a plain copy

    def rows_of(self, k: int, flat: np.ndarray) -> np.ndarray:
        """The rows of panel ``k`` in a flat buffer of them (F order, as they are solved and sent)."""
        w = self.panels[k][1] - self.panels[k][0]
        return flat.reshape((flat.size // w, w), order="F")

    def gather_counts(self, k: int, per_row: int, extra: int = 0) -> tuple[list[int], list[int]]:
        """The counts and displacements of a gather down the process columns (:meth:`gather`)."""
        e, n = self.panels[k][1], self.rows.n
        counts = [per_row * (r.stop - r.start) + extra
                  for r in (self.rows.range_on(p, e, n) for p in range(self.grid.nprow))]
        return counts, displacements(counts)

    def gather(self, flat: np.ndarray, k: int, per_row: int, extra: int = 0) -> list[np.ndarray]:
        """Return every process row's flat buffer ``flat`` (gathered down the process column, one
        ``Iallgatherv`` waited by sleeping): process row ``p``'s holds ``per_row`` values per row of it
        below panel ``k`` plus ``extra``."""
        g = self.grid
        if g.nprow == 1:
            return [flat]
        counts, displs = self.gather_counts(k, per_row, extra)
        out = np.empty(sum(counts), flat.dtype)
        wait_requests([g.col_comm.Iallgatherv(flat, [out, (counts, displs)])], deadline_after(WAIT_TIMEOUT),
                      "the panel's gather")
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
        trail = self.cols.range_on(g.mycol, e, n)
        c0 = trail.start
        out = np.empty((trail.stop - c0, pieces[0].shape[1]), pieces[0].dtype, order="F")
        first = [self.rows.range_on(p, e, n).start for p in range(g.nprow)]  # each piece's first local row
        for ca, cb, p, r0 in self.trailing_blocks(k):
            out[ca - c0:cb - c0] = pieces[p][r0 - first[p]:r0 - first[p] + cb - ca]
        return out

    def trailing_blocks(self, k: int, column: int | None = None) -> list[tuple[int, int, int, int]]:
        """``(first local column, last + 1, process row, its first local row)`` of each of this process's
        block columns after panel ``k`` (of process column ``column``'s, if given), in order."""
        table = self._block_table(self.grid.mycol if column is None else column)
        return [blk for blk in table[k + 1:] if blk is not None]

    def _block_table(self, q: int) -> list[tuple[int, int, int, int] | None]:
        """:meth:`trailing_blocks`' table of process column ``q`` (made once): an entry per panel, ``None``
        for the block columns of other process columns."""
        if q not in self._tables:
            n = self.rows.n
            self._tables[q] = [(*self.cols.range_on(q, cs, ce).indices(n)[:2], int(self.rows.owners[cs]),
                                self.rows.range_on(int(self.rows.owners[cs]), cs, ce).start)
                               if int(self.cols.owners[cs]) == q else None for cs, ce in self.panels]
        return self._tables[q]

    def column_blocks(self, k: int, mine: np.ndarray, pieces: list[np.ndarray]) -> dict[int, np.ndarray]:
        """The rows of ``P`` (panel ``k``) each of this process's trailing block columns ``J`` multiplies, by
        ``J``, as views, no copy (what :meth:`apply_update` takes instead of a copy of them in one array): of
        ``mine`` (this process's rows of ``P``) for the block rows its process row holds, else of
        ``pieces[p]``, process row ``p``'s :meth:`select_rows` (F order; this process row's is not read)."""
        g, e = self.grid, self.panels[k][1]
        first = self.rows.range_on(g.myrow, e, self.rows.n).start
        table = self._block_table(g.mycol)
        out, taken = {}, [0] * g.nprow
        for j in range(k + 1, len(self.panels)):
            blk = table[j]
            if blk is None:
                continue
            ca, cb, p, r0 = blk
            if p == g.myrow:
                out[j] = mine[r0 - first:r0 - first + cb - ca]
            else:
                out[j] = pieces[p][taken[p]:taken[p] + cb - ca]
                taken[p] += cb - ca
        return out

    def selected_counts(self, k: int, column: int | None = None) -> list[int]:
        """How many rows of panel ``k``'s ``P`` each process row holds for this process column's trailing
        columns (process column ``column``'s, if given) (:meth:`select_rows`; the same on every process of
        the column)."""
        q = self.grid.mycol if column is None else column
        if q not in self._counts:  # every panel's counts at once, summed from the last block column back
            table, acc = self._block_table(q), [0] * self.grid.nprow
            self._counts[q] = [[]] * len(table)
            for j in range(len(table) - 1, -1, -1):
                self._counts[q][j] = list(acc)
                blk = table[j]
                if blk is not None:
                    acc[blk[2]] += blk[1] - blk[0]
        return list(self._counts[q][k])

    def select_rows(self, k: int, mine: np.ndarray, out: np.ndarray | None = None,
                    column: int | None = None) -> np.ndarray:
        """The rows of ``mine`` (this process's rows of panel ``k``'s ``P``) that its process column's
        trailing columns (process column ``column``'s, if given) multiply, in their order (F order): what
        it sends down its process column (into ``out`` if given)."""
        g, e = self.grid, self.panels[k][1]
        first = self.rows.range_on(g.myrow, e, self.rows.n).start
        if out is None:
            out = np.empty((self.selected_counts(k, column)[g.myrow], mine.shape[1]), mine.dtype, order="F")
        at = 0
        for ca, cb, p, r0 in self.trailing_blocks(k, column):
            if p == g.myrow:
                out[at:at + cb - ca] = mine[r0 - first:r0 - first + cb - ca]
                at += cb - ca
        return out

    def selected_indices(self, k: int, p: int) -> np.ndarray:
        """The global indices, minus panel ``k``'s end, of the rows :meth:`select_rows` takes from process row
        ``p``'s rows for this process column (increasing)."""
        e = self.panels[k][1]
        got = [self.row_indices[p][r0:r0 + cb - ca] for ca, cb, q, r0 in self.trailing_blocks(k) if q == p]
        return (np.concatenate(got) if got else np.empty(0, int)) - e

    def apply_update(self, k: int, mine: np.ndarray, colp: np.ndarray | Mapping[int, np.ndarray],
                     blocks: range | None = None, between: Callable[[], object] | None = None) -> None:
        """``W_{e:,e:} -= P P.T`` on this process's trailing block columns (lower block trapezoid), with
        ``mine`` its rows of ``P`` and ``colp`` the rows of its trailing columns (:meth:`column_rows`), or
        those of each block column by its panel index (:meth:`column_blocks`, the same values): one GEMM per
        block column, of the block columns ``blocks`` (panel indices; default all after ``k``), calling
        ``between()`` after each (to progress messages under way)."""
        g, e = self.grid, self.panels[k][1]
        n = self.rows.n
        below0 = self.rows.range_on(g.myrow, e, n).start
        c0 = self.cols.range_on(g.mycol, e, n).start
        blocks = blocks if blocks is not None else range(k + 1, len(self.panels))
        by_block = isinstance(colp, Mapping)
        w, updates = self.w, self._updates
        for i in range(bisect_left(self._update_keys, blocks.start), len(updates)):
            big_j, r, cl = updates[i]
            if big_j >= blocks.stop:
                break
            right = colp[big_j] if by_block else colp[cl.start - c0:cl.stop - c0]  # type: ignore[index]
            gemm_update(-1.0, mine[r.start - below0:], right.T, w[r, cl])
            if between is not None:
                between()


class DiagonalMessage:
    """A diagonal block's broadcast of ``(bad, L_kk)`` under way (:meth:`CholeskySteps.start_diagonal`).

    ``requests`` are this process's messages of it (receives and sends); ``incoming``, the one that brings
    the values here (``None``: they are here from the start, on the owner); ``forward``, if given, starts
    passing them on (returns the requests) once they have arrived: :meth:`arrived` and :meth:`test` do."""

    def __init__(self, flat: np.ndarray, w: int, requests: list[Any], incoming: Any = None,
                 forward: Callable[[], list[Any]] | None = None) -> None:
        self.flat, self.w, self.requests = flat, w, requests
        self._incoming, self._forward = incoming, forward

    def arrived(self) -> bool:
        """Whether ``(bad, L_kk)`` is here (:meth:`result` may be read; progresses the messages, and starts
        passing the values on once they are here)."""
        if self._incoming is not None:
            if not self._incoming.Test():
                return False
            self.requests = [r for r in self.requests if r is not self._incoming]  # completed: a null one
            self._incoming = None
        if self._forward is not None:
            self.requests += self._forward()
            self._forward = None
        return True

    def test(self) -> bool:
        """Whether every message has completed here, the values arrived and passed on (progresses them)."""
        if not self.arrived():
            return False
        if self.requests and MPI.Request.Testall(self.requests):
            self.requests = []
        return not self.requests

    def wait(self, deadline: float | None) -> None:
        """Wait until every message has completed here, sleeping, until ``deadline``
        (:func:`ftkit._wait.poll_until`)."""
        poll_until(self.test, deadline, "the diagonal block's broadcast")

    def wait_arrival(self, deadline: float | None) -> None:
        """Wait until ``(bad, L_kk)`` is here (:meth:`arrived`), sleeping, until ``deadline``; the messages
        that pass it on are left under way (:meth:`test` finishes them)."""
        poll_until(self.arrived, deadline, "the diagonal block's broadcast")

    def result(self) -> tuple[int, np.ndarray | None]:
        """``(bad, L_kk)`` once arrived: ``L_kk`` is ``None`` when ``bad >= 0`` (or :data:`HOLD`), and outside
        the panel's process column when only that column was sent it (``column_only``)."""
        bad = int(self.flat[0])
        return bad, (self.flat[1:].reshape((self.w, self.w), order="F") if bad == -1 and self.flat.size > 1
                     else None)
