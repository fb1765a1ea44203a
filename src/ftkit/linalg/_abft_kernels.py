"""Numba kernels for the ABFT encoding: one pass over a SUMMA piece that copies it into the panel buffer and
accumulates its plain, index-weighted and absolute segment sums (GIL released).

The encoding is memory-bound: numpy needs several passes (``abs``, squares, sums, the copy into the panel),
this needs one, which is what keeps ft_pdgemm's overhead at a few percent. Sums within a segment
are sequential (at most ``len`` roundings), as :mod:`ftkit.linalg.abft`'s bounds assume.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["encode_rows_into", "encode_cols_into", "copy_col_sums"]

# Reassociation lets LLVM vectorize the segment sums; the bounds hold for any summation order (the tree depth
# stays below the segment length), and NaN/Inf semantics are kept (no nnan/ninf flags).
_FM = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_FM)
def encode_rows_into(
    a: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray, copy: bool
) -> None:  # pragma: no cover - compiled
    """Checksum rows of ``a`` (ra x kp) into ``ext[base:base+4nr]`` (``base = ra`` with ``copy``, else 0):
    plain, weighted, absolute and squared sums of each segment; with ``copy`` also ``ext[:ra] = a``."""
    ra, kp = a.shape
    nr = bounds.shape[0] - 1
    base = ra if copy else 0
    for kk in range(kp):
        for s in range(nr):
            e = 0.0
            ws = 0.0
            ab = 0.0
            sq = 0.0
            for i in range(bounds[s], bounds[s + 1]):
                x = a[i, kk]
                if copy:
                    ext[i, kk] = x
                e += x
                ws += w[i] * x
                ab += abs(x)
                sq += x * x
            ext[base + s, kk] = e
            ext[base + nr + s, kk] = ws
            ext[base + 2 * nr + s, kk] = ab
            ext[base + 3 * nr + s, kk] = sq


@njit(cache=True, nogil=True, fastmath=_FM)
def col_sums(b: np.ndarray, bounds: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """Checksum columns of ``b`` (kp x cb) into the F-order ``out`` (kp x 4nc), column by column."""
    kp, cb = b.shape
    nc = bounds.shape[0] - 1
    for s in range(nc):
        for kk in range(kp):
            out[kk, s] = 0.0
            out[kk, nc + s] = 0.0
            out[kk, 2 * nc + s] = 0.0
            out[kk, 3 * nc + s] = 0.0
        for j in range(bounds[s], bounds[s + 1]):
            wj = w[j]
            for kk in range(kp):
                x = b[kk, j]
                out[kk, s] += x
                out[kk, nc + s] += wj * x
                out[kk, 2 * nc + s] += abs(x)
                out[kk, 3 * nc + s] += x * x


@njit(cache=True, nogil=True, fastmath=_FM)
def copy_col_sums(
    b: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``ext[:, :cb] = b`` and the checksum columns of ``b`` into ``ext[:, cb:cb+4nc]``, in one pass over
    ``b`` (same summation order as :func:`col_sums`)."""
    kp, cb = b.shape
    nc = bounds.shape[0] - 1
    for s in range(nc):
        e = ext[:, cb + s]
        ws = ext[:, cb + nc + s]
        ab = ext[:, cb + 2 * nc + s]
        sq = ext[:, cb + 3 * nc + s]
        for kk in range(kp):
            e[kk] = 0.0
            ws[kk] = 0.0
            ab[kk] = 0.0
            sq[kk] = 0.0
        for j in range(bounds[s], bounds[s + 1]):
            wj = w[j]
            dst = ext[:, j]
            for kk in range(kp):
                x = b[kk, j]
                dst[kk] = x
                e[kk] += x
                ws[kk] += wj * x
                ab[kk] += abs(x)
                sq[kk] += x * x


def encode_cols_into(b: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray, copy: bool) -> None:
    """Checksum columns of ``b`` (kp x cb) into ``ext[:, base:base+4nc]`` (``base = cb`` with ``copy``,
    else 0);
    with ``copy`` also ``ext[:, :cb] = b`` (fused: one pass over ``b``, when every column of ``b`` is in a
    segment, as for SUMMA pieces)."""
    cb = b.shape[1]
    nc = bounds.shape[0] - 1
    if copy and ext.shape[1] == cb + 4 * nc and (nc == 0 or (bounds[0] == 0 and bounds[-1] == cb)):
        copy_col_sums(b, bounds, w, ext)
        return
    out = np.empty((b.shape[0], 4 * nc), order="F")
    col_sums(b, bounds, w, out)
    base = cb if copy else 0
    if copy:
        ext[:, :cb] = b
    ext[:, base : base + 4 * nc] = out


@njit(cache=True, nogil=True, fastmath=_FM)
def block_sums_into(
    c: np.ndarray, rb: np.ndarray, cb: np.ndarray, wr: np.ndarray, wc: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Plain, row-, column- and doubly-weighted sums and the sum of squares of every block of ``c`` into
    ``out`` (5, nr, nc).

    Two stages, as the bounds assume: down each row segment of a column, then across the column segment.
    """
    nr = rb.shape[0] - 1
    nc = cb.shape[0] - 1
    for bj in range(nc):
        for bi in range(nr):
            out[0, bi, bj] = 0.0
            out[1, bi, bj] = 0.0
            out[2, bi, bj] = 0.0
            out[3, bi, bj] = 0.0
            out[4, bi, bj] = 0.0
        for j in range(cb[bj], cb[bj + 1]):
            wj = wc[j]
            for bi in range(nr):
                e = 0.0
                ws = 0.0
                sq = 0.0
                for i in range(rb[bi], rb[bi + 1]):
                    x = c[i, j]
                    e += x
                    ws += wr[i] * x
                    sq += x * x
                out[4, bi, bj] += sq
                out[0, bi, bj] += e
                out[1, bi, bj] += ws
                out[2, bi, bj] += wj * e
                out[3, bi, bj] += wj * ws
