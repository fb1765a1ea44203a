"""The checksums a triangular solve must satisfy, behind :func:`~ftkit.linalg.ft_pblas3.ft_pdtrsm`.

After the sweep (:mod:`ftkit.linalg._tri_sweep`) has overwritten ``W`` (``ka x nw``, ``W0 = alpha B``) with
``X = inv(T) W0``, every block ``(I, J)`` (row segment ``I`` of ``T``'s rows, column segment ``J`` of
``W``'s columns, at most ``bs`` long, never straddling a distribution block) must satisfy

    ``e_I^T T X e_J = e_I^T W0 e_J``.

Both sides come from checksums: the column sums of ``T``'s row segments (``nI x ka``, taken when ``T`` is
built, before it is used), the row sums of ``X``'s column segments (``ka x nJ``) and the block sums of
``W0`` (``nI x nJ``), all of them ``1/bs`` of the data; every process adds its local part and one
all-reduce gives every process all of them, so every process decides the same without further messages.
The rigorous threshold is ``gamma(2 ka + r + c + 8) (e_I^T |T| |X| e_J + e_I^T |W0| e_J)`` plus an
underflow floor: a computed substitution satisfies ``|T X - W0| <= gamma_ka |T||X|`` componentwise, in any
summation order, and the rest covers the rounding of the checksums themselves. ``"statistical"`` uses
``STAT_LAMBDA u sqrt(2 ka + r + c)`` instead (never above the rigorous one); a relative ``tol`` ``t`` uses
``t``.

A wrong element ``X_ij + d`` shows in every block ``(I, J(j))`` with ``(e_I^T T)_i != 0``. A flagged block's
column segment is solved again from the saved ``W0`` with ``T`` rebuilt from A (so a corrupted copy of ``T``
is replaced too), then everything is checked again. A block still inconsistent means A itself is corrupted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import abft
from .descriptor import BlockCyclic1D
from .grid import ProcessGrid

__all__ = ["SolveChecksums", "segments"]


def segments(m: BlockCyclic1D, p: int, bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(global bounds, local bounds, global id of each local segment)`` of ``m`` on process ``p``."""
    gb = abft.segment_bounds(np.arange(m.n), m.offset, m.nb, bs)
    here = m.indices_on(p)
    lb = abft.segment_bounds(here, m.offset, m.nb, bs)
    ids = np.searchsorted(gb, here[lb[:-1]], side="right") - 1 if here.size else np.zeros(0, np.int64)
    return gb, lb, ids


def _seg_sums(x: np.ndarray, lb: np.ndarray, axis: int) -> np.ndarray:
    """Sums of ``x`` over the local segments ``lb`` along ``axis``."""
    if lb.size <= 1 or x.shape[axis] == 0:
        shape = list(x.shape)
        shape[axis] = lb.size - 1
        return np.zeros(shape)
    return np.add.reduceat(x, lb[:-1], axis=axis)


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

    def _sum(self, parts: list[np.ndarray]) -> list[np.ndarray]:
        flat = np.concatenate([p.ravel() for p in parts])
        out = np.empty_like(flat)
        self.grid.comm.Allreduce(flat, out)
        res, o = [], 0
        for p in parts:
            res.append(out[o:o + p.size].reshape(p.shape))
            o += p.size
        return res

    def encode(self, t: np.ndarray, w0: np.ndarray) -> None:
        """Take the checksums of ``T`` (plain and absolute column sums per row segment) and of ``W0``."""
        ts, ta = np.zeros((self.nI, self.ka)), np.zeros((self.nI, self.ka))
        ts[np.ix_(self.rid, self.cols_t)] = _seg_sums(t, self.rl, 0)
        ta[np.ix_(self.rid, self.cols_t)] = _seg_sums(np.abs(t), self.rl, 0)
        bsum, babs = np.zeros((self.nI, self.nJ)), np.zeros((self.nI, self.nJ))
        bsum[np.ix_(self.rid, self.cid)] = _seg_sums(_seg_sums(w0, self.rl, 0), self.cl, 1)
        babs[np.ix_(self.rid, self.cid)] = _seg_sums(_seg_sums(np.abs(w0), self.rl, 0), self.cl, 1)
        self.ts, self.ta, self.bsum, self.babs = self._sum([ts, ta, bsum, babs])

    def residuals(self, x: np.ndarray, tol: float | str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(|residual|, threshold, rigorous threshold)`` per block (``nI x nJ``, same everywhere)."""
        xs, xa = np.zeros((self.ka, self.nJ)), np.zeros((self.ka, self.nJ))
        xs[np.ix_(self.rows_here, self.cid)] = _seg_sums(x, self.cl, 1)
        xa[np.ix_(self.rows_here, self.cid)] = _seg_sums(np.abs(x), self.cl, 1)
        xs, xa = self._sum([xs, xa])
        with np.errstate(invalid="ignore", over="ignore"):
            res = np.abs(self.ts @ xs - self.bsum)
            mag = self.ta @ xa + self.babs
        r = np.diff(self.rg).max(initial=1)
        c = np.diff(self.cg).max(initial=1)
        n_ops = 2 * self.ka + r + c + 8
        floor = 4.0 * n_ops * r * c * abft.ETA  # products that underflow
        rig = 2.0 * abft.gamma(n_ops) * mag + floor
        if tol is None:
            thr = rig
        elif tol == "statistical":
            thr = np.minimum(rig, abft.STAT_LAMBDA * abft.U * np.sqrt(n_ops) * mag + floor)
        else:
            thr = float(tol) * mag
        return res, thr, rig

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
