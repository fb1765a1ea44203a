"""The checks of FT_PDPOTRF's trailing updates: checksums carried through the factorization, verified when a
block column is read.

Every trailing update ``W_{e:,e:} -= P P.T`` is the plain one (:meth:`CholeskySteps.apply_update`, the same
BLAS calls as ``pdpotrf``, so an error-free ``ft_pdpotrf`` returns ``pdpotrf``'s factor bit for bit). Beside
it, each process keeps, for every segment ``I`` of its rows (at most ``bs`` rows of one block row) and every
one of its columns, the plain and the index-weighted column sums of the lower block trapezoid, ``e^T W_IJ``
and ``w^T W_IJ`` (``w = 1, 2, ...``), and carries them through each update with the panel's own sums:
``(e^T; w^T) W_IJ -= (e^T P_I; w^T P_I) P_J.T``: the segment sums of ``P`` are taken once, where the panel
is solved (those its solve check takes), and travel with it; the checksums are stored transposed, so one
product per panel carries them all, with the received rows of ``P`` of the process's columns as its left
operand (no copy on a square grid), in four parts that skip most of the segments above the block diagonal
(about ``1.25 / nb`` of the update's flops). Sums are linear, so the relation holds after any number of
updates: block column ``J`` is verified once, when panel ``J`` reads it (an error made by any earlier
update is still there, and nothing read the block before), never by recomputation. Its diagonal block is
verified before its owner factors it, by one pass over it (plain, weighted and absolute segment sums in one
kernel, :meth:`UpdateChecks.verify`); the rows below are not read for the check: the panel's solve check
(:meth:`UpdateChecks.check_solve`) compares the segment sums of the solution times ``L_JJ^T`` (``= e^T W_I``,
whatever the values were) with the checksums, so it finds a wrong value of the block column as well as a
wrong solve, and only a flagged segment is then read (:meth:`UpdateChecks.verify_segments`: wrong values
are located there; none means the solve was wrong). In each flagged column the
ratio of the weighted to the plain residual locates the wrong element (a non-finite element locates itself),
which is set from the column's expected sum; a wrong row (an operand corrupted inside the product) is a
located element in every column. Anything else is reported ``"uncorrected"`` (``ft_pdpotrf`` then
recomputes the block column, :mod:`ftkit.linalg.cholesky._column_recompute`, and raises
:class:`~ftkit.errors.ABFTError` only if that does not agree either).

The bound is rigorous (Higham's ``gamma``): an element of ``W`` after the updates is a sum of at most ``n +
1`` products, so it errs by at most ``gamma_{n+1} (|A| + sum_t |L_it| |L_jt|)`` and, as ``|A| <= |W| + sum
|L||L| + err``, by ``gamma (|W| + 2 sqrt(nu_i nu_j))`` (Cauchy-Schwarz), where ``nu_i`` is the sum of squares
of row ``i``'s factored part, carried as a vector (the panel sends its rows' sums of squares). With the
checksums' own rounding, the threshold of a segment column is ``4 gamma_{len + 2 n + panels + 8} (e^T |W| +
2 sum_I sqrt(nu_i) sqrt(nu_j))`` (``len`` times that for the weighted sum) plus an underflow term: a correct
factorization is never flagged, at any scale. The solve check uses the same bound with ``e^T |W_I|``
bounded by the solution's rows instead of read from ``W``: ``|W_it| <= (1 + gamma_w) |P_i| |L_t|`` (the
solve's backward error, Cauchy-Schwarz), plus the solve's and the sums' own rounding. A numeric ``tol`` ``t``
makes it ``t`` times the magnitudes; ``"statistical"`` uses the rigorous bound here.

The panel travels with its row sums, sums of squares, column sums, segment sums and a flag (rows of its
block column that its sender could not correct: :func:`panel_buffer`, :meth:`UpdateChecks.encode`, one
compiled pass over the solved panel, :func:`share_panel`, :func:`gather_panel`; on a square grid only the
diagonal process's part goes down each process column, as ``pdpotrf``'s rows do, and the flags' maximum
beside it; elsewhere every part): each process compares the
row sums of the rows of ``P`` its columns multiply (the product's right operand, and the carry's) with the
senders' (same summation order, :mod:`._kernels`: equal unless a value changed), locates a changed
element's column from its piece's column sums and restores it from its row sum before the product uses it
(:func:`repair_rows`). A value changed in a process's own received rows (the product's left operand) needs
no such check: the checksums are carried with the segment sums its sender took, so the elements it spoils
are located and corrected when their block column is verified.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..._wait import wait_requests
from .. import checksums
from .._blas import gemm_update
from ..abft.report import BlockEvent
from ..checksums._kernels import encode_rows_into
from ._kernels import col_sums, panel_pass, row_sums, segment_flags, solve_flags
from ._steps import CholeskySteps, PanelFlight

__all__ = ["UpdateChecks", "panel_buffer", "panel_views", "share_panel", "gathered_part",
           "gather_panel", "select_part", "piece_col_sums", "repair_rows"]


class UpdateChecks:
    """This process's carried checksums of the lower block trapezoid of ``steps.w`` and their checks.

    Parameters
    ----------
    steps
        The factorization's panel engine (its work matrix, maps and panels).
    tol
        ``None`` / ``"statistical"`` (rigorous bound) or a relative tolerance.
    bs
        Height of a checksum segment (rows; ``None``: the block size): each local row block is cut into
        segments of at most ``bs`` rows, each with its own plain and weighted column sums.
    """

    def __init__(self, steps: CholeskySteps, tol: float | str | None, bs: int | None = None) -> None:
        self.steps, self.tol = steps, tol
        g, panels, rows = steps.grid, steps.panels, steps.rows
        self.rank, self.bs = g.rank, int(bs) if bs else rows.nb
        segs = [(k, lo, min(lo + self.bs, rows.range_on(g.myrow, s, e).stop))
                for k, (s, e) in enumerate(panels) if rows.owners[s] == g.myrow
                for lo in range(*rows.range_on(g.myrow, s, e).indices(rows.n)[:2], self.bs)]
        self.rblk = np.array([k for k, _, _ in segs], int)  # panel index of each local row segment
        self.rlo = np.array([lo for _, lo, _ in segs] + [steps.w.shape[0]], int)  # first local rows (+ end)
        self.cblk = np.array([k for k, (s, _) in enumerate(panels) if steps.cols.owners[s] == g.mycol], int)
        self.clo = np.array([steps.cols.range_on(g.mycol, *panels[k]).start for k in self.cblk], int)
        self.rglob, self.cglob = steps.row_indices[g.myrow], steps.col_indices
        # the weight of every local row: its 1-based index in its segment
        self.wts = np.zeros(steps.w.shape[0])
        for _, lo, hi in segs:
            self.wts[lo:hi] = np.arange(1, hi - lo + 1)
        # e^T W_IJ and w^T W_IJ, stored transposed (local columns x segment sums, F order) so that an update
        # carries them by one product with P's rows of this process's columns as its left operand
        self.chk_t = np.zeros((steps.w.shape[1], 2 * len(segs)), order="F")
        self.chk = self.chk_t.T
        self.nu = np.zeros(rows.n)  # sum of squares of each row's factored part (bounds sum |P||P.T|)
        self.gam_extra = 2 * rows.n + len(panels) + 8
        self.eta = 16.0 * (rows.n + 8) * checksums.ETA
        self.seglen = np.diff(self.rlo)  # rows of each local segment
        # 4 gamma_{len + 2n + panels + 8} per segment: the verification bound's factor (fixed per segment)
        self._gam_verify = 4.0 * np.asarray(checksums.gamma(self.seglen + self.gam_extra))
        self._gam_solve: dict[int, np.ndarray] = {}  # 4 gamma_{len + w + 8} per segment, by panel width w
        rigorous = tol is None or isinstance(tol, str)  # the verification bound: fac * magnitude + add
        self._fac = self._gam_verify if rigorous else np.full(len(segs), float(tol))  # type: ignore[arg-type]
        self._add = self.eta if rigorous else 0.0
        self._enc = np.empty((self.bs, 2), order="F")  # the segment encoder: plain and index-weighted sums
        self._enc[:, 0], self._enc[:, 1] = 1.0, np.arange(1, self.bs + 1)
        self.seg0 = np.searchsorted(self.rblk, np.arange(len(panels) + 1))  # first segment of each block row

    def arrays(self) -> dict[str, np.ndarray]:
        """The carried state (checkpointed with the work matrix: a resumed run continues to check)."""
        return {"chk": self.chk_t, "nu": self.nu}

    def init(self, start: int) -> None:
        """Take the checksums of the block columns from panel ``start`` on from the current ``W``."""
        st = self.steps
        for jj, big_j in enumerate(self.cblk):
            if big_j < start:
                continue
            cs, ce = st.panels[big_j]
            r = st.rows.range_on(st.grid.myrow, cs, st.rows.n)
            cl = slice(self.clo[jj], self.clo[jj] + ce - cs)
            ii0 = 2 * int(np.searchsorted(self.rblk, big_j))
            if r.stop > r.start:
                self.chk[ii0:, cl] = self._sums(st.w[r, cl], ii0 // 2, len(self.rblk))

    def encode(self, k: int, pt: np.ndarray, views: tuple[np.ndarray, ...]) -> None:
        """Fill panel ``k``'s encoded buffer (``views``: :func:`panel_views`) from ``pt``, this process's rows
        of ``P.T``: the rows, their sums and sums of squares, the column sums and the segment sums of its
        trailing segments (block rows ``> k``), in one pass (:func:`._kernels.panel_pass`)."""
        below0 = int(self.rlo[self.seg0[k + 1]])
        _, rows, rs, sq, cs, segs = views
        panel_pass(pt, self.rlo[self.seg0[k + 1]:] - below0, self.wts[below0:], rows, segs, rs, sq, cs)

    def update(self, k: int, sums: np.ndarray, colp: np.ndarray,
               squares: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Carry the checksums through panel ``k``'s update: ``sums`` are the segment sums of this process's
        rows of ``P`` (:meth:`encode`, taken where the panel was solved), ``colp`` the rows of ``P``
        of this process's trailing columns in their order (:meth:`CholeskySteps.column_rows`), ``squares``
        ``(rows of P (global - e), their sums of squares)``, no row twice, covering at least this process's
        rows and columns (the only ones whose ``nu`` the bounds read). One product for all trailing columns
        and segments."""
        st = self.steps
        e = st.panels[k][1]
        for idx, sq in squares:
            self.nu[e + idx] += sq
        ii0, jj0 = int(self.seg0[k + 1]), int(np.searchsorted(self.cblk, k + 1))
        if ii0 == len(self.rblk) or jj0 == len(self.cblk):
            return
        c0 = int(self.clo[jj0])  # the trailing block columns' local columns run from c0 to the end
        left = colp
        # the segments on and below each block column's diagonal: four products (each quarter of the block
        # columns needs only the segments from its first block row on; each element is one product's, so
        # the split changes no sum), not the whole rectangle: 5/8 of it instead of 1/2 (two parts: 3/4)
        nj = len(self.cblk) - jj0
        cuts = sorted({jj0 + nj * p // 4 for p in range(4)} | {len(self.cblk)})
        for ja, jb in zip(cuts[:-1], cuts[1:], strict=True):
            cb = int(self.clo[jb]) if jb < len(self.cblk) else len(self.cglob)
            ca, cb = int(self.clo[ja]) - c0, cb - c0
            sa = int(self.seg0[self.cblk[ja]])
            if sa < len(self.rblk):
                gemm_update(-1.0, left[ca:cb], sums[2 * (sa - ii0):].T, self.chk_t[c0 + ca:c0 + cb, 2 * sa:])

    def verify(self, k: int, part: str = "all") -> tuple[int, list[BlockEvent]]:
        """Check (and correct) this process's blocks of block column ``k`` before panel ``k`` reads them:
        ``part`` ``"all"`` of its rows, ``"diagonal"`` those of diagonal block ``k`` only (what its owner
        needs before it factors the block) or ``"below"`` the others.

        Returns the number of segments checked and the events (local; gathered by the caller).
        """
        if int(self.steps.cols.owners[self.steps.panels[k][0]]) != self.steps.grid.mycol:
            return 0, []
        i0 = int(self.seg0[k + 1] if part == "below" else self.seg0[k])
        i1 = int(self.seg0[k + 1]) if part == "diagonal" else len(self.rblk)
        return self.verify_segments(k, i0, i1)

    def verify_segments(self, k: int, i0: int, i1: int) -> tuple[int, list[BlockEvent]]:
        """:meth:`verify` of this process's segments ``i0:i1`` of block column ``k`` (on its process column):
        one pass over them (plain, weighted and absolute sums), each flagged column's element located and
        corrected."""
        st = self.steps
        s, e = st.panels[k]
        if i1 == i0:
            return 0, []
        jj = int(np.searchsorted(self.cblk, k))
        r = slice(int(self.rlo[i0]), int(self.rlo[i1]))
        cl = slice(self.clo[jj], self.clo[jj] + e - s)
        blk = st.w[r, cl]
        flag, unchecked = self._flags(blk, r, cl, i0, i1)
        events = []
        for i in np.flatnonzero(flag.any(axis=1) | unchecked):
            lo, hi = self.rlo[i0 + i] - r.start, self.rlo[i0 + i + 1] - r.start
            seg = slice(self.rlo[i0 + i], self.rlo[i0 + i + 1])
            event = BlockEvent(int(self.rblk[i0 + i]), k, int(self.rglob[seg.start]),
                               int(self.cglob[cl.start]), hi - lo, e - s, self.rank,
                               "unchecked" if unchecked[i] else "uncorrected")
            if not unchecked[i]:
                event = self._fix(blk[lo:hi], seg, cl, int(i0 + i), np.flatnonzero(flag[i]), event)
            events.append(event)
        return i1 - i0, events

    def unchecked_event(self, k: int, i: int) -> BlockEvent:
        """The ``"unchecked"`` event of this process's segment ``i`` of block column ``k`` (a bound that is
        not finite: non-finite values)."""
        s, e = self.steps.panels[k]
        jj = int(np.searchsorted(self.cblk, k))
        return BlockEvent(int(self.rblk[i]), k, int(self.rglob[self.rlo[i]]), int(self.cglob[self.clo[jj]]),
                          int(self.rlo[i + 1] - self.rlo[i]), e - s, self.rank, "unchecked")

    def check_solve(self, k: int, pt: np.ndarray, low: np.ndarray,
                    views: tuple[np.ndarray, ...]) -> tuple[int, np.ndarray, np.ndarray]:
        """Check panel ``k``'s solve ``P L_kk^T = W_{e:,k}`` and the panel's values against block column
        ``k``'s carried checksums.

        ``pt`` is this process's ``P.T`` (its rows ``>= e`` of the panel; the transposed view of the rows in
        the encoded buffer, where the panel is solved, costs no copy). The segment sums of the
        solution times ``L_kk^T`` must give the checksums: ``(e^T P_I) L^T = e^T W_I`` (plain and
        index-weighted), O(nb) per segment column, no pass over ``W``: the bound is the verification's
        (:meth:`verify`) with the magnitudes ``e^T |W_I|`` bounded from the solution's rows' norms, plus the
        solve's and the sums' rounding (``gamma``, Cauchy-Schwarz), so a wrong value of the panel (an
        update's error) and a wrong solve are both flagged, and a correct one never is. The sums are those
        the panel travels with: ``views`` (:func:`panel_views`) is filled first (:meth:`encode`). Returns
        the number of segments checked, which of them disagree and which have a bound that is not finite
        (non-finite values: not checked).
        """
        self.encode(k, pt, views)
        ii1 = int(self.seg0[k + 1])
        nseg, w = len(self.rblk) - ii1, low.shape[0]
        flag, unchecked = np.zeros(nseg, bool), np.zeros(nseg, bool)
        if nseg == 0 or pt.shape[1] == 0:
            return 0, flag, unchecked
        jj = int(np.searchsorted(self.cblk, k))
        cl = slice(self.clo[jj], self.clo[jj] + w)
        if self.tol is None or isinstance(self.tol, str):
            if w not in self._gam_solve:
                self._gam_solve[w] = 4.0 * np.asarray(checksums.gamma(self.seglen + w + 8))
            fac = self._gam_solve[w][ii1:]
        else:
            fac = self._fac[ii1:]  # the numeric tolerance per segment
        with np.errstate(invalid="ignore", over="ignore"):
            prod = views[5] @ low.T
        r0 = int(self.rlo[ii1])
        solve_flags(prod, self.chk[2 * ii1:, cl], views[3], self.rlo[ii1:] - r0, low, fac, self._fac[ii1:],
                    self.nu, self.rglob[r0:], self.cglob[cl], self._add, self.eta, flag, unchecked)
        return nseg, flag, unchecked

    def _sums(self, x: np.ndarray, i0: int, i1: int) -> np.ndarray:
        """``(e^T x_I; w^T x_I)`` of segments ``i0:i1`` (rows interleaved: plain, weighted), ``x`` holding
        exactly their local rows: one pass over ``x`` (one small product when the segments are all ``bs``
        rows, segment reductions otherwise)."""
        lo, nseg, w = self.rlo[i0], i1 - i0, x.shape[1]
        out = np.empty((2 * nseg, w), order="F")
        if nseg == 0:
            return out
        if x.shape[0] == nseg * self.bs:  # every segment bs rows: (w x bs) (bs x 2) products, no copy of x
            both = np.matmul(x.reshape((self.bs, nseg, w), order="F").transpose(1, 2, 0), self._enc)
            out[::2], out[1::2] = both[:, :, 0], both[:, :, 1]
            return out
        starts = self.rlo[i0:i1] - lo
        out[::2] = np.add.reduceat(x, starts, axis=0)
        out[1::2] = np.add.reduceat(x * self.wts[lo:lo + x.shape[0], None], starts, axis=0)
        return out

    def _flags(self, blk: np.ndarray, r: slice, cl: slice, i0: int, i1: int) -> tuple[np.ndarray, np.ndarray]:
        """Flagged columns of segments ``i0:i1`` (rows ``r`` of the block column ``cl``) and the segments
        whose bound is not finite."""
        nr, bounds = i1 - i0, self.rlo[i0:i1 + 1] - self.rlo[i0]
        got = np.empty((3 * nr, blk.shape[1]))  # plain, weighted and absolute sums: one pass over blk
        encode_rows_into(blk, bounds, self.wts[r], got, False, 3)
        flag, thr = np.empty((nr, blk.shape[1]), bool), np.empty((nr, blk.shape[1]))
        unchecked = np.empty(nr, bool)
        segment_flags(got, self.chk[2 * i0:2 * i1, cl], bounds, self.nu, self.rglob[r], self.cglob[cl],
                      self._fac[i0:i1], self._add, flag, thr, unchecked)
        return flag, unchecked

    def _fix(self, b: np.ndarray, seg: slice, cl: slice, i: int, cols: np.ndarray,
             event: BlockEvent) -> BlockEvent:
        """Locate the wrong element of each flagged column of segment ``i`` (rows ``seg``, view ``b``) from
        its plain and weighted residuals, set it from the column's expected sum, and re-verify."""
        with np.errstate(over="ignore", invalid="ignore"):  # a huge wrong value: its sums may overflow
            got = self._sums(b[:, cols], i, i + 1)
            res = got - self.chk[2 * i:2 * i + 2, cl][:, cols]
        where = None
        for c, (r_e, r_w) in zip(cols, res.T, strict=True):
            bad = np.flatnonzero(~np.isfinite(b[:, c]))
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                ratio = r_w / r_e
                pos = int(bad[0]) if len(bad) == 1 else int(np.rint(ratio)) - 1 if np.isfinite(ratio) else -1
            if not 0 <= pos < b.shape[0]:
                return event
            b[pos, c] = self.chk[2 * i, cl][c] - (b[:pos, c].sum() + b[pos + 1:, c].sum())
            where = (int(self.rglob[seg.start + pos]), int(self.cglob[cl.start + c]))
        flag, _ = self._flags(b, seg, cl, i, i + 1)
        return event if flag.any() else dataclasses.replace(event, action="located", element=where)


# ---------------------------------------------------------------- the panel, encoded
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
    column (all but the segment sums; :meth:`CholeskySteps.gather`'s ``per_row`` and ``extra``)."""
    s, e = steps.panels[k]
    mine = steps.rows.range_on(steps.grid.myrow, e, steps.rows.n)
    return 1 + (mine.stop - mine.start) * (e - s + 2) + e - s, e - s + 2, e - s + 1


def gather_panel(steps: CholeskySteps, k: int, ext: np.ndarray,
                 flight: PanelFlight | None = None) -> tuple[np.ndarray, np.ndarray, list, list, bool]:
    """Gather the encoded pieces (without their segment sums) down the process column (or take them from
    ``flight``, once arrived); return ``(colp, its row sums, squares, pieces, flagged)``: ``colp`` the rows of
    ``P`` this process's trailing columns multiply (:meth:`CholeskySteps.column_rows`), ``squares`` the
    ``(rows, sums of squares)`` of :meth:`UpdateChecks.update`, each piece ``(global row indices - e, rows,
    row sums, sums of squares, column sums)``, ``flagged`` whether any process of the panel's process column
    has block column rows to recompute (every process gets the same answer).

    A flight with ``columns="own"`` (a square grid) brought only the piece of the process row that holds
    this process's columns' rows (with its sums, everything the checks of ``colp`` read) and the flags'
    maximum; the sums of squares of this process's own rows are in ``ext``."""
    s, e = steps.panels[k]
    w, n, g = e - s, steps.rows.n, steps.grid

    def piece(p: int, buf: np.ndarray) -> tuple[np.ndarray, ...]:
        idx = steps.row_indices[p][steps.rows.range_on(p, e, n)] - e
        return (idx, *_unpack(buf, len(idx), w)[:5])

    if flight is not None and flight.own:
        idx, _, rows, rs, sq, cs = piece(g.mycol, flight.own_piece())
        squares = [(idx, sq)]
        if g.myrow != g.mycol:
            mine = piece(g.myrow, ext)
            squares.append((mine[0], mine[4]))
        return rows, rs, squares, [(idx, rows, rs, sq, cs)], flight.column_flag() > 0
    if flight is not None and flight.selected:
        return _selected_parts(steps, k, ext, flight)
    if flight is not None:
        gathered = flight.pieces()
    else:
        sent, per_row, extra = gathered_part(steps, k)
        gathered = steps.gather(ext[:sent], k, per_row, extra)
    pieces, flagged = [], False
    for p, buf in enumerate(gathered):
        idx, flag, *rest = piece(p, buf)
        flagged |= bool(flag[0])
        pieces.append((idx, *rest))
    colp = steps.column_rows(k, [pc[1] for pc in pieces])
    col_rs = steps.column_rows(k, [pc[2][:, None] for pc in pieces])[:, 0]
    return colp, col_rs, [(pc[0], pc[3]) for pc in pieces], pieces, flagged


def select_part(steps: CholeskySteps, k: int, rows: np.ndarray, record: Callable[[int, int, bool], object],
                ext: np.ndarray) -> np.ndarray:
    """What this process sends down its process column of panel ``k``'s encoded buffer ``ext`` (``rows``: its
    rows of P) on a grid that is not square: the rows its process column's trailing columns multiply
    (:meth:`CholeskySteps.select_rows`), their row sums and sums of squares, and the column sums of those rows
    (in :func:`col_sums`' order: the receivers locate a changed value with them). The selected rows are
    first compared with the row sums taken where the panel was solved; if one changed, the whole part is
    checked against them and the changed values restored (:func:`repair_rows`, ``record(row of P, column,
    restored)`` per repair), so that the column sums taken here are of the panel's values. (On the panel's
    process column the buffer may still be broadcast along the process row, only read: a repair there writes
    into it only if a value changed after it was encoded.)
    """
    g, (s, e) = steps.grid, steps.panels[k]
    _, _, rs, sq, cs, _ = panel_views(ext, rows)
    m, w = steps.selected_counts(k)[g.myrow], rows.shape[1]
    out = np.empty(m * (w + 2) + w)  # the rows, their sums and sums of squares, the column sums
    sel = out[:m * w].reshape((m, w), order="F")
    sel_rs = out[m * w:m * w + m]
    steps.select_rows(k, rows, sel)
    steps.select_rows(k, rs[:, None], sel_rs[:, None])
    got = np.empty(m)
    row_sums(sel, got)
    if not np.array_equal(got, sel_rs):
        def present(_i: int) -> tuple[np.ndarray, np.ndarray]:
            now = np.empty(w)
            col_sums(rows, now)
            return cs, now

        idx = steps.row_indices[g.myrow][steps.rows.range_on(g.myrow, e, steps.rows.n)]
        for i, t, ok in repair_rows(rows, rs, present):
            record(int(idx[i]), s + t, ok)
        steps.select_rows(k, rows, sel)
    steps.select_rows(k, sq[:, None], out[m * w + m:m * w + 2 * m, None])
    col_sums(sel, out[m * (w + 2):])
    return out


def _selected_parts(steps: CholeskySteps, k: int, ext: np.ndarray,
                    flight: PanelFlight) -> tuple[np.ndarray, np.ndarray, list, list, bool]:
    """:func:`gather_panel` from a flight of :func:`select_part`'s parts."""
    g, (s, e) = steps.grid, steps.panels[k]
    w, n = e - s, steps.rows.n
    out, at, pieces = flight.gathered(), 0, []
    for p, cnt in enumerate(steps.selected_counts(k)):
        rows = out[at:at + cnt * w].reshape((cnt, w), order="F")
        at += cnt * w
        rs, sq, cs = out[at:at + cnt], out[at + cnt:at + 2 * cnt], out[at + 2 * cnt:at + 2 * cnt + w]
        at += 2 * cnt + w
        pieces.append((steps.selected_indices(k, p), rows, rs, sq, cs))
    colp = steps.merge_rows(k, [pc[1] for pc in pieces])
    col_rs = steps.merge_rows(k, [pc[2][:, None] for pc in pieces])[:, 0]
    mine = steps.row_indices[g.myrow][steps.rows.range_on(g.myrow, e, n)] - e
    own_sq = _unpack(ext, len(mine), w)[3]
    squares = [(mine, own_sq)] + [(pc[0], pc[3]) for p, pc in enumerate(pieces) if p != g.myrow]
    return colp, col_rs, squares, pieces, flight.column_flag() > 0


def piece_col_sums(colp: np.ndarray, need: np.ndarray, pieces: list,
                   row: int) -> tuple[np.ndarray, np.ndarray]:
    """The sent and the present column sums of the piece holding ``row`` of ``P`` (``colp`` holds the rows
    ``need``; the piece's rows not among them as received), in the sender's summation order."""
    for idx, rows, _, _, cs in pieces:
        if row in idx:
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
