"""The checks of FT_PDPOTRF's trailing updates: checksums carried through the factorization, verified when a
block column is read.

Every trailing update ``W_{e:,e:} -= P P.T`` is the plain one (:meth:`CholeskySteps.apply_update`, the same
BLAS calls as ``pdpotrf``, so an error-free ``ft_pdpotrf`` returns ``pdpotrf``'s factor bit for bit). Beside
it, each process keeps, for each of its blocks ``W_IJ`` of the lower block trapezoid (``I``, ``J`` panel
indices, ``I >= J``), the block's column sums ``e^T W_IJ`` (array ``chk``) and its row sums ``W_IJ e``
(``rchk``), and updates them with the panel's own checksums: ``e^T W_IJ -= (e^T P_I) P_J.T`` and ``W_IJ e -=
P_I (P_J.T e)`` -- small products (``1/nb`` of the update's flops). Sums are linear, so the relation holds
after any number of updates: block column ``J`` is verified once, just before panel ``J`` reads it (an error
made by any earlier update is still there, and nothing read the block before). A block is checked by O(its
size) reductions, never by recomputation. Errors:

- one wrong element (one flagged row and one flagged column): set from its row's expected sum in O(nb);
- one wrong row (an operand element corrupted inside the product) or one wrong column: each element of it
  set from its column's (row's) expected sum;
- anything else is reported ``"uncorrected"`` (``ft_pdpotrf`` then raises :class:`~ftkit.errors.ABFTError`).

The bound is rigorous (Higham's ``gamma``): an element of ``W`` after the updates is a sum of at most
``n + 1`` products, so it errs by at most ``gamma_{n+1} (|A| + sum |P||P.T|)`` and, as ``|A| <= |W| +
sum |P||P.T| + err``, by ``gamma (|W| + 2 M)``, where ``M = sum_k (e^T |P_I|) |P_J|.T`` is carried like the
checksums; the sums add ``gamma_{len}`` each. The threshold is ``4 gamma_{len + 2 n + panels + 8} (e^T |W_IJ| +
2 M)`` plus an underflow term: a correct factorization is never flagged, at any scale. A numeric ``tol``
``t`` makes it ``t (e^T |W_IJ| + 2 M)``; ``"statistical"`` uses the rigorous bound here.

The panel itself travels with its row sums and column sums (:meth:`UpdateChecks.encode`): after the row
broadcast and after the gather down the columns, each process compares the row sums of what it received with
the sender's (same summation order: equal unless a value changed), locates a wrong element's column from the
column sums, and restores it from its row sum before the product uses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .. import checksums
from .._blas import gemm_update
from ..abft.report import BlockEvent
from ._steps import CholeskySteps

__all__ = ["UpdateChecks", "share_panel", "gather_panel", "piece_col_sums", "repair_rows"]


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
        segments of at most ``bs`` rows, each with its own column sums.
    """

    def __init__(self, steps: CholeskySteps, tol: float | str | None, bs: int | None = None) -> None:
        self.steps, self.tol = steps, tol
        g, panels = steps.grid, steps.panels
        self.rank, self.bs = g.rank, int(bs) if bs else steps.rows.nb
        segs = [(k, lo) for k, (s, e) in enumerate(panels) if steps.rows.owners[s] == g.myrow
                for lo in range(steps.rows.range_on(g.myrow, s, e).start, steps.rows.range_on(g.myrow, s, e).stop,
                                self.bs)]
        self.rblk = np.array([k for k, _ in segs], int)  # panel index of each local row segment
        self.rlo = np.array([lo for _, lo in segs], int)  # its first local row
        self.cblk = np.array([k for k, (s, _) in enumerate(panels) if steps.cols.owners[s] == g.mycol], int)
        self.clo = np.array([steps.cols.range_on(g.mycol, *panels[k]).start for k in self.cblk], int)
        self.rglob, self.cglob = steps.rows.indices_on(g.myrow), steps.cols.indices_on(g.mycol)
        nr, nc = steps.w.shape
        self.chk = np.zeros((len(self.rblk), nc), order="F")  # e^T W_IJ, per local row block I
        self.chk_m = np.zeros_like(self.chk)  # carried magnitudes M
        self.rchk = np.zeros((nr, len(self.cblk)), order="F")  # W_IJ e, per local column block J
        self.rchk_m = np.zeros_like(self.rchk)
        n = steps.rows.n
        self.gam_extra = 2 * n + len(panels) + 8
        self.eta = 16.0 * (n + 8) * checksums.ETA

    def arrays(self) -> dict[str, np.ndarray]:
        """The carried state (checkpointed with the work matrix: a resumed run continues to check)."""
        return {"chk": self.chk, "chk_m": self.chk_m, "rchk": self.rchk, "rchk_m": self.rchk_m}

    def init(self, start: int) -> None:
        """Take the checksums of the block columns from panel ``start`` on from the current ``W``."""
        st = self.steps
        for jj, big_j in enumerate(self.cblk):
            if big_j < start:
                continue
            cs, ce = st.panels[big_j]
            r = st.rows.range_on(st.grid.myrow, cs, st.rows.n)
            cl = slice(self.clo[jj], self.clo[jj] + ce - cs)
            blk = st.w[r, cl]
            if blk.shape[0] == 0:
                continue
            ii0 = int(np.searchsorted(self.rblk, big_j))
            self.chk[ii0:, cl] = np.add.reduceat(blk, self.rlo[ii0:] - r.start, axis=0)
            self.rchk[r, jj] = blk.sum(axis=1)
            self.chk_m[ii0:, cl] = 0.0
            self.rchk_m[r, jj] = 0.0

    def update(self, k: int, mine: np.ndarray, full: np.ndarray) -> None:
        """Carry the checksums through panel ``k``'s update (``mine``: this process's rows of ``P``)."""
        st = self.steps
        e = st.panels[k][1]
        ii0, jj0 = int(np.searchsorted(self.rblk, k + 1)), int(np.searchsorted(self.cblk, k + 1))
        if ii0 == len(self.rblk) or jj0 == len(self.cblk):
            return
        below0 = st.rows.range_on(st.grid.myrow, e, st.rows.n).start
        c0 = int(self.clo[jj0])
        starts, cstarts = self.rlo[ii0:] - below0, self.clo[jj0:] - c0
        fl = full[self.cglob[c0:] - e]  # P's rows of this process's trailing columns
        amine, afl = np.abs(mine), np.abs(fl)
        gemm_update(-1.0, np.add.reduceat(mine, starts, axis=0), fl.T, self.chk[ii0:, c0:])
        gemm_update(1.0, np.add.reduceat(amine, starts, axis=0), afl.T, self.chk_m[ii0:, c0:])
        gemm_update(-1.0, mine, np.add.reduceat(fl, cstarts, axis=0).T, self.rchk[below0:, jj0:])
        gemm_update(1.0, amine, np.add.reduceat(afl, cstarts, axis=0).T, self.rchk_m[below0:, jj0:])

    def _threshold(self, length: np.ndarray | int, absum: np.ndarray, mag: np.ndarray) -> np.ndarray:
        scale = absum + 2.0 * mag
        if self.tol is None or isinstance(self.tol, str):
            return 4.0 * checksums.gamma(np.asarray(length) + self.gam_extra) * scale + self.eta
        return float(self.tol) * scale

    def verify(self, k: int) -> tuple[int, list[BlockEvent]]:
        """Check (and correct) this process's blocks of block column ``k`` before panel ``k`` reads them.

        Returns the number of blocks checked and the events (local; gathered by the caller).
        """
        st = self.steps
        s, e = st.panels[k]
        if int(st.cols.owners[s]) != st.grid.mycol:
            return 0, []
        jj = int(np.searchsorted(self.cblk, k))
        r = st.rows.range_on(st.grid.myrow, s, st.rows.n)
        if r.stop == r.start:
            return 0, []
        cl = slice(self.clo[jj], self.clo[jj] + e - s)
        ii0 = int(np.searchsorted(self.rblk, k))
        starts = self.rlo[ii0:] - r.start
        blk = st.w[r, cl]
        flag_c, flag_r, bad = self._flags(blk, starts, slice(ii0, None), cl, r, jj)
        if not bad.any():
            return len(starts), []
        events = []
        bounds = np.append(starts, blk.shape[0])
        for b in np.flatnonzero(bad):
            lo, hi = int(bounds[b]), int(bounds[b + 1])
            events.append(self._fix_block(blk, lo, hi, ii0 + b, cl, r, jj, flag_c[b], flag_r[lo:hi], k))
        return len(starts), events

    def _flags(self, blk: np.ndarray, starts: np.ndarray, ib: slice, cl: slice, r: slice,
               jj: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flagged columns per row block, flagged rows, and which row blocks have any (or are unchecked)."""
        absb = np.abs(blk)
        lens = np.diff(np.append(starts, blk.shape[0]))
        with np.errstate(invalid="ignore", over="ignore"):
            res_c = np.abs(np.add.reduceat(blk, starts, axis=0) - self.chk[ib, cl])
            thr_c = self._threshold(lens[:, None], np.add.reduceat(absb, starts, axis=0), self.chk_m[ib, cl])
            res_r = np.abs(blk.sum(axis=1) - self.rchk[r, jj])
            thr_r = self._threshold(blk.shape[1], absb.sum(axis=1), self.rchk_m[r, jj])
        flag_c, flag_r = ~(res_c <= thr_c), ~(res_r <= thr_r)
        bad = flag_c.any(axis=1) | np.logical_or.reduceat(flag_r, starts)
        return flag_c, flag_r, bad

    def _fix_block(self, blk: np.ndarray, lo: int, hi: int, ii: int, cl: slice, r: slice, jj: int,
                   fc: np.ndarray, fr: np.ndarray, k: int) -> BlockEvent:
        """Locate and correct the flagged block (rows ``lo:hi`` of ``blk``); return its event."""
        b = blk[lo:hi]
        cols, rows = np.flatnonzero(fc), np.flatnonzero(fr)
        exp_c, exp_r = self.chk[ii, cl], self.rchk[r, jj][lo:hi]
        row0, col0 = int(self.rglob[r.start + lo]), int(self.cglob[cl.start])
        event = BlockEvent(int(self.rblk[ii]), k, row0, col0, b.shape[0], b.shape[1], self.rank, "uncorrected")
        if not (np.all(np.isfinite(self.chk_m[ii, cl])) and np.all(np.isfinite(self.rchk_m[r, jj][lo:hi]))):
            return dataclasses.replace(event, action="unchecked")
        if len(rows) == 1 and len(cols) >= 1:
            i = int(rows[0])
            for c in cols:
                b[i, c] = exp_c[c] - (b[:i, c].sum() + b[i + 1:, c].sum())
        elif len(cols) == 1 and len(rows) >= 1:
            c = int(cols[0])
            for i in rows:
                b[i, c] = exp_r[i] - (b[i, :c].sum() + b[i, c + 1:].sum())
        else:
            return event
        _, _, bad = self._flags(b, np.zeros(1, int), slice(ii, ii + 1), cl, slice(r.start + lo, r.start + hi), jj)
        if bad.any():
            return event
        i, c = (int(rows[0]), int(cols[0]))
        return dataclasses.replace(event, action="located", element=(row0 + i, col0 + c))


# ---------------------------------------------------------------- the panel, encoded
def _unpack(ext: np.ndarray, nloc: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``P`` (F order), their row sums and their column sums in one flat buffer."""
    return ext[:nloc * w].reshape((nloc, w), order="F"), ext[nloc * w:nloc * (w + 1)], ext[nloc * (w + 1):]


def share_panel(steps: CholeskySteps, k: int, mine: np.ndarray) -> tuple[np.ndarray, ...]:
    """Broadcast the panel's process column's rows of ``P`` with their row and column sums along the process
    row; return ``(buffer, rows, row sums, column sums)`` (views of the buffer, which travels on)."""
    g, (s, _) = steps.grid, steps.panels[k]
    nloc, w = mine.shape
    ext = np.empty(nloc * (w + 1) + w)
    rows, rs, cs = _unpack(ext, nloc, w)
    qk = int(steps.cols.owners[s])
    if g.mycol == qk:
        rows[...] = mine
        rs[...] = rows.sum(axis=1)
        cs[...] = rows.sum(axis=0)
    if g.npcol > 1 and ext.size:
        g.row_comm.Bcast(ext, root=qk)
    return ext, rows, rs, cs


def gather_panel(steps: CholeskySteps, k: int, ext: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """Gather the encoded pieces down the process column; return ``(P, its row sums, pieces)`` where each
    piece is ``(global row indices - e, rows, row sums, column sums)``."""
    s, e = steps.panels[k]
    w = e - s
    pieces = []
    for p, buf in enumerate(steps.gather(ext)):
        idx = steps.rows.indices_on(p)
        idx = idx[idx >= e] - e
        pieces.append((idx, *_unpack(buf, len(idx), w)))
    full = steps.assemble(k, [pc[1] for pc in pieces])
    full_rs = np.empty(full.shape[0])
    for idx, _, rs, _ in pieces:
        full_rs[idx] = rs
    return full, full_rs, pieces


def piece_col_sums(full: np.ndarray, pieces: list, row: int) -> tuple[np.ndarray, np.ndarray]:
    """The sent and the present column sums of the piece of ``full`` holding ``row`` (same summation)."""
    for idx, _, _, cs in pieces:
        if row in idx:
            return cs, np.asfortranarray(full[idx]).sum(axis=0)
    raise AssertionError(f"row {row} is in no piece")  # pragma: no cover - the pieces cover P


def repair_rows(x: np.ndarray, rs: np.ndarray,
                col_sums: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int, bool]]:
    """Compare ``x``'s row sums with the sent ones ``rs``; restore a changed element from its row sum.

    The sums are taken in the same order as the sender's, so they differ only if a value changed (a
    difference within rounding of a reordered sum is accepted). The column comes from ``col_sums(i)`` (sent
    and present column sums of the piece holding row ``i``). Returns ``(row, column, restored)`` per repair.
    """
    got = x.sum(axis=1)
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
