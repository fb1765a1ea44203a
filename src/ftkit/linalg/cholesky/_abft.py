"""The checks of FT_PDPOTRF's trailing updates: checksums carried through the factorization, verified when a
block column is read.

Every trailing update ``W_{e:,e:} -= P P.T`` is the plain one (:meth:`CholeskySteps.apply_update`, the same
BLAS calls as ``pdpotrf``, so an error-free ``ft_pdpotrf`` returns ``pdpotrf``'s factor bit for bit). Beside
it, each process keeps, for every segment ``I`` of its rows (at most ``bs`` rows of one block row) and every
one of its columns, the plain and the index-weighted column sums of the lower block trapezoid, ``e^T W_IJ``
and ``w^T W_IJ`` (``w = 1, 2, ...``), and carries them through each update with the panel's own sums:
``(e^T; w^T) W_IJ -= (e^T P_I; w^T P_I) P_J.T``: the segment sums of ``P`` are taken once, where the panel
is solved (those its solve check takes), and travel with it; the checksums are stored transposed, so one
product per trailing block column carries them, with the received rows of ``P`` of that block column as its
left operand (where they arrived: no copy), over the segments on and below its diagonal only (about ``1 / nb``
of the update's flops), all called from one compiled loop that first compares each block column's rows of
``P`` with their senders' row sums (:func:`._kernels.carry_blocks`: the rows read once for both, a changed
one repaired before anything reads it; without CBLAS, the whole check, then four numpy products that skip
most of the segments above the block diagonal; ``ft_pdpotrf`` itself, given CBLAS, makes the same check and
product per block column right after its update GEMM instead: :mod:`._fused`). Sums are linear, so the
relation holds after any number of updates: block column ``J`` is verified once, when panel ``J`` reads it
(an error made by any earlier update is still there, and nothing read the block before), never by
recomputation. Its diagonal block is
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

The panel itself, encoded with its sums, and how it travels: :mod:`ftkit.linalg.cholesky._panel_sums`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .. import _blas, checksums
from .._blas import KERNEL_DGEMM, gemm_update
from ..abft.report import BlockEvent
from ._flag_kernels import add_squares, block_flags, solve_check, solve_flags
from ._kernels import carry_blocks, copy_checksums, exact_sums, panel_pass, take_checksums
from ._steps import CholeskySteps
from ._trailing import TrailingRows

__all__ = ["UpdateChecks"]

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
        self._solve_at: dict[int, tuple] = {}  # check_solve's layout of each panel (_solve_layout)
        self._verify_at: dict[tuple[int, int, int], tuple] = {}  # verify_segments' rows, columns, arguments
        rigorous = tol is None or isinstance(tol, str)  # the verification bound: fac * magnitude + add
        self._fac = self._gam_verify if rigorous else np.full(len(segs), float(tol))  # type: ignore[arg-type]
        self._add = self.eta if rigorous else 0.0
        self._enc = np.empty((self.bs, 2), order="F")  # the segment encoder: plain and index-weighted sums
        self._enc[:, 0], self._enc[:, 1] = 1.0, np.arange(1, self.bs + 1)
        self._enc_t = np.asfortranarray(self._enc.T)  # as the left operand of encode's product (no transpose)
        self.seg0 = np.searchsorted(self.rblk, np.arange(len(panels) + 1))  # first segment of each block row
        self._cend = np.append(self.clo, len(self.cglob))  # local block columns' first columns (+ end)
        self._cseg = self.seg0[self.cblk]  # each local block column's first segment on or below its diagonal
        self._update_at = self._shared(("update",), self._update_table)

    def arrays(self) -> dict[str, np.ndarray]:
        """The carried state (checkpointed with the work matrix: a resumed run continues to check)."""
        return {"chk": self.chk_t, "nu": self.nu}

    def init(self, start: int, save: np.ndarray | None = None) -> bool:
        """Take the checksums of the block columns from panel ``start`` on from the current ``W``; with
        ``save`` (an array of ``W``'s shape, unit row stride), copy the values they sum (this process's part
        of the lower block trapezoid of those block columns) into it in the same pass. Returns whether it
        did (``False``: the caller copies them)."""
        st = self.steps
        mine = self.cblk >= start
        if save is not None and save.strides[0] == 8 and st.w.strides[0] == 8 and st.w.dtype == np.float64:
            copy_checksums(st.w, save, self.chk_t, self.rlo, self.clo[mine], self._cend[1:][mine],
                           self._cseg[mine], self.wts)
            return True
        if _blas._dgemm is not None and st.w.strides[0] == 8 and st.w.dtype == np.float64:
            # one small product per segment and block column, from compiled code (~2x the batched numpy
            # products of _sums with their interleaving copies, standalone)
            take_checksums(KERNEL_DGEMM, st.w, self._enc, self.chk_t, self.rlo, self.clo[mine],
                           self._cend[1:][mine], self._cseg[mine])
            return False
        for jj, big_j in enumerate(self.cblk):
            if big_j < start:
                continue
            cs, ce = st.panels[big_j]
            r = st.rows.range_on(st.grid.myrow, cs, st.rows.n)
            cl = slice(self.clo[jj], self.clo[jj] + ce - cs)
            ii0 = 2 * int(np.searchsorted(self.rblk, big_j))
            if r.stop > r.start:
                self.chk[ii0:, cl] = self._sums(st.w[r, cl], ii0 // 2, len(self.rblk))
        return False

    def encode(self, k: int, pt: np.ndarray, views: tuple[np.ndarray, ...]) -> None:
        """Fill panel ``k``'s encoded buffer (``views``: :func:`._panel_sums.panel_views`) from ``pt``, this
        process's rows of ``P.T``: the rows, their sums and sums of squares, the column sums and the segment
        sums of its trailing segments (block rows ``> k``), in one pass (:func:`._kernels.panel_pass`)."""
        below0 = int(self.rlo[self.seg0[k + 1]])
        _, rows, rs, sq, cs, segs = views
        nseg = len(self.rlo) - 1 - int(self.seg0[k + 1])
        if (rows.shape[0] == nseg * self.bs and rows.ctypes.data == pt.ctypes.data and rows.flags.f_contiguous
                and segs.flags.f_contiguous):
            # solved in place and every segment bs rows: the segment sums are one product, the rows seen as
            # bs x (segments * columns) against the encoder, written in segs' own layout (2-3x the compiled
            # pass: the sums' bound holds for any order of the additions)
            exact_sums(rows, rs, sq, cs)
            gemm_update(1.0, self._enc_t, rows.reshape((self.bs, -1), order="F"),
                        segs.reshape((2, -1), order="F"), beta=0.0)
            return
        panel_pass(pt, self.rlo[self.seg0[k + 1]:] - below0, self.wts[below0:], rows, segs, rs, sq, cs)

    def update(self, k: int, sums: np.ndarray, colp: TrailingRows,
               squares: list[tuple[np.ndarray, np.ndarray]], repair: Callable[[int], object]) -> None:
        """Carry the checksums through panel ``k``'s update: ``sums`` are the segment sums of this process's
        rows of ``P`` (:meth:`encode`, taken where the panel was solved), ``colp`` the rows of ``P``
        of this process's trailing columns, block column by block column, where they arrived
        (:func:`._panel_sums.gather_panel`), ``squares`` ``(global rows of P, their sums of squares)``,
        no row twice, covering at least this process's rows and columns (the only ones whose
        ``nu`` the bounds read). One product per trailing block column, over its own segments.

        Each block column's rows are first compared with their senders' row sums (same summation order:
        equal unless a value changed); where one differs, ``repair(j)`` is called for trailing block column
        ``j`` before it is carried, so the checksums are carried with the repaired rows (and so is the
        update, after this call)."""
        self.take_squares(squares)
        ii0, jj0, c0, firsts = self._update_at[k]  # c0: the trailing block columns' first local column
        if jj0 == len(self.cblk):
            return
        if _blas._dgemm is not None and sums.strides[0] == 8 and self.chk_t.strides[0] == 8:
            # compiled, per trailing block column: its rows checked, then one product over its own segments
            # only (1/2 of the rectangle), while those rows are in cache: no per-call Python cost, products
            # small enough that BLAS skips packing, the rows read from memory once for both, where they
            # arrived (a copy of them into one array cost more than the carry on 2 x 3)
            flat = tuple(pc.reshape(-1, order="F") for pc in colp.pieces)  # F-contiguous: views
            lds = np.array([pc.shape[0] for pc in colp.pieces], np.int64)
            j, trusted = 0, -1
            while j >= 0:
                j = carry_blocks(KERNEL_DGEMM, flat, lds, colp.sums, colp.table, sums, self.chk_t, c0, firsts,
                                 ii0, j, trusted)
                if j >= 0:
                    repair(j)
                    trusted = j
            return
        for j in range(len(colp.panels)):
            if colp.changed(j):
                repair(j)
        if ii0 == len(self.rblk):
            return
        left = colp.stacked()
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

    def take_squares(self, squares: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add a panel's rows' sums of squares to :attr:`nu` (``(global rows, their sums of squares)``)."""
        for idx, sq in squares:
            add_squares(self.nu, idx, sq)

    def carry_at(self, k: int) -> tuple[int, int, int, np.ndarray]:
        """Panel ``k``'s carry indices: its first trailing segment, first trailing local block column, that
        block column's first local column and each trailing block column's first segment (read-only)."""
        return self._update_at[k]

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
        s, e = self.steps.panels[k]
        if i1 == i0:
            return 0, []
        at = self._verify_at.get((k, i0, i1))
        if at is None:  # made once per factorization (the diagonal block's): reused, overwritten by each call
            r, cl = self._shared(("block", k, i0, i1), lambda: self._block_of(k, i0, i1))
            at = self._verify_at[(k, i0, i1)] = (r, cl, self.steps.w[r, cl], self._flag_args(r, cl, i0, i1))
        r, cl, blk, args = at
        if not block_flags(blk, *args):  # error-free: one compiled call
            return i1 - i0, []
        flag, unchecked = args[9], args[11]
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
        the panel travels with: ``views`` (:func:`._panel_sums.panel_views`) is filled first
        (:meth:`encode`). Returns the number of segments checked, which of them disagree and which have a
        bound that is not finite (non-finite values: not checked).
        """
        at = self._solve_at.get(k)
        if at is None:  # this factorization's: the layout, the checksums' view, product and flag buffers
            w = low.shape[0]
            ii1, nseg, cl, bounds, fac, vfac, rglob, cglob, whole = self._shared(
                ("solve", k, w), lambda: self._solve_layout(k, w))
            flags = np.zeros((2, nseg), bool)
            at = self._solve_at[k] = (nseg, whole and _blas._dgemm is not None, self.chk[2 * ii1:, cl],
                                      np.empty((2 * nseg, w), order="F"), bounds, fac, vfac, rglob, cglob,
                                      flags[0], flags[1])
        nseg, compiled, chk, prod, bounds, fac, vfac, rglob, cglob, flag, unchecked = at
        # error-free, the whole check is one compiled call (encode's sums, the product, the flags)
        if compiled and solve_check(KERNEL_DGEMM, pt, views[1], views[2], views[3], views[4], views[5],
                                    self._enc_t, low, prod, chk, bounds, fac, vfac, self.nu, rglob, cglob,
                                    self._add, self.eta, flag, unchecked) >= 0:
            return nseg, flag, unchecked
        self.encode(k, pt, views)
        flag[:], unchecked[:] = False, False
        if nseg == 0 or pt.shape[1] == 0:
            return 0, flag, unchecked
        with np.errstate(invalid="ignore", over="ignore"):
            prod[...] = views[5] @ low.T
        solve_flags(prod, chk, views[3], bounds, low, fac, vfac, self.nu, rglob, cglob, self._add, self.eta,
                    flag, unchecked)
        return nseg, flag, unchecked

    def _solve_layout(self, k: int, w: int) -> tuple:
        """What :meth:`check_solve` reads of panel ``k`` (width ``w``) besides the panel and the checksums
        (:meth:`_shared`): its first trailing segment, their number, the panel's local columns, the segments'
        bounds (from 0), the bounds' factors (solve's, verification's), the global rows and columns and
        whether every segment is ``bs`` rows (the compiled check's case)."""
        ii1 = int(self.seg0[k + 1])
        nseg = len(self.rblk) - ii1
        jj = int(np.searchsorted(self.cblk, k))
        cl = slice(int(self.clo[jj]), int(self.clo[jj]) + w)
        if self.tol is None or isinstance(self.tol, str):
            if w not in self._gam_solve:
                self._gam_solve[w] = 4.0 * np.asarray(checksums.gamma(self.seglen + w + 8))
            fac = self._gam_solve[w][ii1:]
        else:
            fac = self._fac[ii1:]  # the numeric tolerance per segment
        r0 = int(self.rlo[ii1])
        whole = nseg > 0 and w > 0 and int(self.rlo[-1]) - r0 == nseg * self.bs
        return (ii1, nseg, cl, self.rlo[ii1:] - r0, fac, self._fac[ii1:], self.rglob[r0:], self.cglob[cl],
                whole)

    def _update_table(self) -> tuple[tuple[int, int, int, np.ndarray], ...]:
        """:meth:`update`'s indices of each panel ``k`` (:meth:`_shared`): its first trailing segment, its
        first trailing local block column (``len(cblk)``: none), that block column's first local column and
        the first segment of each trailing local block column (a read-only view)."""
        out = []
        for k in range(len(self.steps.panels)):
            jj0 = int(np.searchsorted(self.cblk, k + 1))
            c0 = int(self.clo[jj0]) if jj0 < len(self.cblk) else len(self.cglob)
            firsts = self._cseg[jj0:]
            firsts.flags.writeable = False
            out.append((int(self.seg0[k + 1]), jj0, c0, firsts))
        return tuple(out)

    def _shared(self, what: tuple, make: Callable[[], tuple]) -> tuple:
        """``make()``, made once per layout and process, work piece's shape, ``bs`` and ``tol``
        (:meth:`CholeskySteps.per_layout`) and shared by every factorization of it (the per-panel index
        work was most of the checks' remaining Python on 2 x 2): it must hold only what these and ``what``
        determine, read-only."""
        return self.steps.per_layout(("checks", self.steps.w.shape, self.bs, self.tol, what), make)

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
        args = self._flag_args(r, cl, i0, i1)
        block_flags(blk, *args)
        return args[9], args[11]

    def _flag_args(self, r: slice, cl: slice, i0: int, i1: int) -> tuple:
        """:func:`._flag_kernels.block_flags`' arguments after the block, for segments ``i0:i1`` (rows ``r``
        of the block column ``cl``), its buffers new: bounds, weights, the sums' buffer (plain, weighted and
        absolute: one pass over the block), checksums, ``nu``, global rows and columns, the bound's factors,
        and the flags, thresholds and unchecked segments it fills (``[9]``, ``[10]``, ``[11]``)."""
        nr, w = i1 - i0, cl.stop - cl.start
        bounds, wts, rglob, cglob, fac = self._shared(
            ("flags", r.start, r.stop, cl.start, cl.stop, i0, i1),
            lambda: (self.rlo[i0:i1 + 1] - self.rlo[i0], self.wts[r], self.rglob[r], self.cglob[cl],
                     self._fac[i0:i1]))
        return (bounds, wts, np.empty((3 * nr, w)), self.chk[2 * i0:2 * i1, cl], self.nu, rglob, cglob, fac,
                self._add, np.empty((nr, w), bool), np.empty((nr, w)), np.empty(nr, bool))

    def _block_of(self, k: int, i0: int, i1: int) -> tuple[slice, slice]:
        """The local rows of segments ``i0:i1`` and the local columns of block column ``k``."""
        s, e = self.steps.panels[k]
        c0 = int(self.clo[np.searchsorted(self.cblk, k)])
        return slice(int(self.rlo[i0]), int(self.rlo[i1])), slice(c0, c0 + e - s)

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
