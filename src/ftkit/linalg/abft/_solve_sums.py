"""The checksums a triangular solve must satisfy, behind :func:`~ftkit.linalg.abft.level3.ft_pdtrsm`.

After the sweep (:mod:`ftkit.linalg.pblas._tri_sweep`) has overwritten ``W`` (``ka x nw``, ``W0 = alpha B``)
with ``X = inv(T) W0``, every block ``(I, J)`` (row segment ``I`` of ``T``'s rows, column segment ``J`` of
``W``'s columns, at most ``bs`` long, never straddling a distribution block) must satisfy

    ``e_I^T T X e_J = e_I^T W0 e_J``.

Both sides come from checksums: the column sums of ``T``'s row segments (plain, absolute and row-weighted,
``nI x ka``, taken when ``T`` is built, before it is used), the row sums of ``X``'s column segments (plain,
absolute, column-weighted, ``ka x nJ``) and the block sums of ``W0`` (``nI x nJ``), all of them ``1/bs`` of
the data; every process adds its local part and one all-reduce gives every process all of them, so every
process decides the same without further messages. The plain, row-weighted (``w_I^T T X e_J = w_I^T W0
e_J``) and column-weighted equations are checked; the rigorous threshold of the plain one is
``2 gamma(2 ka + r + c + 8) (e_I^T |T| |X| e_J + e_I^T |W0| e_J)`` plus an underflow floor (a computed
substitution satisfies ``|T X - W0| <= gamma_ka |T||X|`` componentwise, in any summation order; the rest
covers the rounding of the checksums), the weighted ones get the largest weight times it.
``"statistical"`` uses ``STAT_LAMBDA u sqrt(2 ka + r + c)`` instead (never above the rigorous one); a
relative ``tol`` ``t`` uses ``t``.

Correction. A wrong element ``X_ij + d`` makes the plain residuals of column segment ``J(j)`` equal to
``(e_I^T T)_i d`` in every row segment, the row-weighted ones ``(w_I^T T)_i d``, the column-weighted ones
``(j - j0 + 1)`` times the plain ones: the column comes from that ratio, the row is the only one whose two
checksum columns predict every segment's residuals, and ``d`` follows (O(1) per block on the data; see
:meth:`SolveChecksums.locate`). Anything else (a wrong right-hand side or triangle makes many elements
wrong; a pattern several rows explain; one row segment only) is corrected by solving the flagged column
segments again from the saved ``W0``, with ``T`` rebuilt from A (so a corrupted copy of ``T`` is replaced
too); then everything is checked again. A block still inconsistent means A itself is corrupted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._wait import wait_requests
from .. import checksums
from ..checksums._kernels import encode_cols_into, encode_rows_into
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid

__all__ = ["SolveChecksums", "segments"]


def segments(m: BlockCyclic1D, p: int, bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(global bounds, local bounds, global id of each local segment)`` of ``m`` on process ``p``."""
    gb = checksums.segment_bounds(np.arange(m.n), m.offset, m.nb, bs)
    here = m.indices_on(p)
    lb = checksums.segment_bounds(here, m.offset, m.nb, bs)
    ids = np.searchsorted(gb, here[lb[:-1]], side="right") - 1 if here.size else np.zeros(0, np.int64)
    return gb, lb, ids


def _seg_sums(x: np.ndarray, lb: np.ndarray, axis: int) -> np.ndarray:
    """Sums of ``x`` over the local segments ``lb`` along ``axis``."""
    if lb.size <= 1 or x.shape[axis] == 0:
        shape = list(x.shape)
        shape[axis] = lb.size - 1
        return np.zeros(shape)
    return np.add.reduceat(x, lb[:-1], axis=axis)


def _weights(here: np.ndarray, lb: np.ndarray, ids: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """1-based index of each local index inside its segment (the weights of the weighted checksums)."""
    w = np.ones(here.size)
    for s, gid in enumerate(ids):
        w[lb[s]:lb[s + 1]] = here[lb[s]:lb[s + 1]] - gb[gid] + 1
    return w


@dataclass
class SolveChecksums:
    """The checksums of one solve on this process's pieces, summed over the grid by :meth:`allreduce`.

    ``t`` is the local piece of ``T`` (rows by ``rows``, columns by ``cols``), ``w0`` of ``W0``
    (rows by ``rows``, columns by ``wcols``).
    """

    grid: ProcessGrid
    rows: BlockCyclic1D
    cols: BlockCyclic1D
    wcols: BlockCyclic1D
    bs: int

    def __post_init__(self) -> None:
        g = self.grid
        self.rg, self.rl, self.rid = segments(self.rows, g.myrow, self.bs)
        self.cg, self.cl, self.cid = segments(self.wcols, g.mycol, self.bs)
        self.rows_here = self.rows.indices_on(g.myrow)
        self.cols_t = self.cols.indices_on(g.mycol)
        self.nI, self.nJ, self.ka = len(self.rg) - 1, len(self.cg) - 1, self.rows.n
        self.cw = _weights(self.wcols.indices_on(g.mycol), self.cl, self.cid, self.cg)
        self.rw = _weights(self.rows_here, self.rl, self.rid, self.rg)[:, None]
        self.rmax = float(np.diff(self.rg).max(initial=1))
        self.cmax = float(np.diff(self.cg).max(initial=1))

    def _sum(self, parts: list[np.ndarray]) -> list[np.ndarray]:
        flat = np.concatenate([p.ravel() for p in parts])
        out = np.empty_like(flat)
        wait_requests([self.grid.comm.Iallreduce(flat, out)])  # waited by sleeping, not busy-polling
        res, o = [], 0
        for p in parts:
            res.append(out[o:o + p.size].reshape(p.shape))
            o += p.size
        return res

    def encode(self, t: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Take the checksums of ``T`` (plain, row-weighted and absolute column sums per row segment) and of
        ``W0 = w`` (its block sums: plain, absolute, column- and row-weighted); return a copy of ``w``.

        One pass over each (the compiled kernels of :mod:`ftkit.linalg.checksums`): ``w``'s copy, which the
        re-solve of flagged column segments starts from, is made in the same pass as its sums.
        """
        nr, nc = len(self.rl) - 1, len(self.cl) - 1
        text = np.zeros((3 * nr, t.shape[1]), order="F")
        if nr and t.shape[1]:
            encode_rows_into(t, self.rl, self.rw[:, 0], text, False, 3)
        ts, tw, ta = (np.zeros((self.nI, self.ka)) for _ in range(3))
        for q, out in enumerate((ts, tw, ta)):
            out[np.ix_(self.rid, self.cols_t)] = text[q * nr:(q + 1) * nr]
        ncols = w.shape[1]
        wext = np.empty((w.shape[0], ncols + 3 * nc), order="F")
        encode_cols_into(w, self.cl, self.cw, wext, True, 3)
        w0 = wext[:, :ncols]
        plain, colw, absw = (wext[:, ncols + q * nc:ncols + (q + 1) * nc] for q in range(3))
        bsum, babs, bw, bwr = (np.zeros((self.nI, self.nJ)) for _ in range(4))
        for out, x in ((bsum, plain), (babs, absw), (bw, colw), (bwr, plain * self.rw)):
            out[np.ix_(self.rid, self.cid)] = _seg_sums(x, self.rl, 0)
        self.ts, self.ta, self.tw, self.bsum, self.babs, self.bw, self.bwr = self._sum(
            [ts, ta, tw, bsum, babs, bw, bwr])
        return w0

    def residuals(self, x: np.ndarray, tol: float | str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(residual, threshold, rigorous threshold)`` per block (``nI x nJ``, same everywhere).

        The residual is the largest of the plain one and the row- and column-weighted ones divided by the
        largest weight (their bounds are that weight times the plain one's): a block is flagged if any of
        the three disagrees. The signed residuals are kept for :meth:`locate`.
        """
        nc = len(self.cl) - 1
        xext = np.zeros((x.shape[0], 3 * nc), order="F")
        if nc and x.shape[0]:
            encode_cols_into(x, self.cl, self.cw, xext, False, 3)  # plain, weighted, absolute
        xs, xw, xa = (np.zeros((self.ka, self.nJ)) for _ in range(3))
        for q, out in enumerate((xs, xw, xa)):
            out[np.ix_(self.rows_here, self.cid)] = xext[:, q * nc:(q + 1) * nc]
        xs, xa, xw = self._sum([xs, xa, xw])
        with np.errstate(invalid="ignore", over="ignore"):
            self.res_e, self.res_w = self.ts @ xs - self.bsum, self.ts @ xw - self.bw
            self.res_r = self.tw @ xs - self.bwr
            res = np.maximum(np.abs(self.res_e), np.maximum(np.abs(self.res_w) / self.cmax,
                                                            np.abs(self.res_r) / self.rmax))
            mag = self.ta @ xa + self.babs
        r = np.diff(self.rg).max(initial=1)
        c = np.diff(self.cg).max(initial=1)
        n_ops = 2 * self.ka + r + c + 8
        floor = 4.0 * n_ops * r * c * checksums.ETA  # products that underflow
        rig = 2.0 * checksums.gamma(n_ops) * mag + floor
        if tol is None:
            thr = rig
        elif tol == "statistical":
            thr = np.minimum(rig, checksums.STAT_LAMBDA * checksums.U * np.sqrt(n_ops) * mag + floor)
        else:
            thr = float(tol) * mag
        return res, thr, rig

    def locate(self, bj: int, thr: np.ndarray) -> tuple[int, int, float] | None:
        """Locate a single wrong element of column segment ``bj`` from the last residuals: ``(row, column,
        error)`` in submatrix indices, or ``None`` if they do not look like one error.

        An error ``d`` at ``X[i, j]`` makes the plain residual of every row segment ``I`` equal to
        ``ts[I, i] d``, the row-weighted one ``tw[I, i] d`` and the column-weighted one ``(j - j0 + 1)``
        times the plain one: the column-weighted ratio gives the column, and the row is the only one whose
        columns of ``ts`` and ``tw`` predict every segment's residuals within their thresholds (``thr``,
        ``nI`` values). O(``nI * ka``) on the checksums, nothing on the data.
        """
        re, rw, rr = self.res_e[:, bj], self.res_w[:, bj], self.res_r[:, bj]
        i0 = int(np.argmax(np.abs(re)))
        if not (np.isfinite(re[i0]) and re[i0] != 0.0):
            return None
        q = rw[i0] / re[i0]
        jl = int(np.rint(q)) - 1 if np.isfinite(q) else -1
        if not (0 <= jl < self.cg[bj + 1] - self.cg[bj]) or abs(q - (jl + 1)) > 0.25:
            return None
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            d = re[i0] / self.ts[i0]
            mism = np.maximum(
                np.max(np.abs(self.ts * d[None, :] - re[:, None]) / thr[:, None], axis=0),
                np.max(np.abs(self.tw * d[None, :] - rr[:, None]) / (self.rmax * thr[:, None]), axis=0))
        mism[~np.isfinite(mism)] = np.inf
        fits = np.flatnonzero(mism <= 1.0)
        # Only an unambiguous fit is a location: with one row segment, or an error pattern that several
        # rows explain (a wrong right-hand side makes a whole column wrong, whose segment sums a single
        # element of several rows can mimic), the column segment is solved again instead.
        if self.nI < 2 or fits.size != 1:
            return None
        i = int(fits[0])
        return i, int(self.cg[bj]) + jl, float(d[i])

    def fix(self, x: np.ndarray, i: int, j: int, d: float) -> None:
        """Subtract ``d`` from ``X[i, j]`` (submatrix indices) on the process that holds it."""
        g = self.grid
        if int(self.rows.owners[i]) == g.myrow and int(self.wcols.owners[j]) == g.mycol:
            li = int(np.searchsorted(self.rows_here, i))
            lj = int(np.searchsorted(self.wcols.indices_on(g.mycol), j))
            x[li, lj] -= d

    def local_columns(self, blocks: list[int]) -> np.ndarray:
        """Boolean mask of this process's ``W`` columns in the column segments ``blocks``."""
        mask = np.zeros(self.cl[-1], bool)
        for s, gid in enumerate(self.cid):
            if int(gid) in blocks:
                mask[self.cl[s]:self.cl[s + 1]] = True
        return mask

    def owner(self, bi: int, bj: int) -> int:
        """Grid rank holding ``X`` block ``(bi, bj)``."""
        p = int(self.rows.owners[self.rg[bi]])
        q = int(self.wcols.owners[self.cg[bj]])
        return self.grid.rank_of(p, q)
