"""Numba kernel for the block sums of a result (GIL released): one pass over C that takes every block's plain,
row-, column- and doubly-weighted sums (and, on request, its squares and absolute values), optionally copying
it; the verification pass of the ABFT routines and their saved C before an update. Split from
:mod:`ftkit.linalg.checksums._kernels` (the encoding kernels), whose conventions it follows.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import _FM

__all__ = ["block_sums_into"]


@njit(cache=True, nogil=True, fastmath=_FM)
def block_sums_into(
    c: np.ndarray, rb: np.ndarray, cb: np.ndarray, wr: np.ndarray, wc: np.ndarray, out: np.ndarray,
    dst: np.ndarray, keep: np.ndarray, zero: bool = True,
) -> None:  # pragma: no cover - compiled
    """Plain, row-, column- and doubly-weighted sums and the sum of squares of every block of ``c`` into
    ``out`` (5, nr, nc); with ``out`` of 6 planes also the sums of absolute values into ``out[5]``.

    ``keep`` (``(2, ncols)``, or ``(2, 0)`` for all of ``c``): only rows ``keep[0, j] <= i < keep[1, j]`` of
    column ``j`` are ``c``'s, the others count as zero (a triangle of a square: its other triangle never
    read). ``dst`` (shaped like ``c``, or ``(0, 0)``): receives that ``c``, zeros included, in the same pass
    (the segments must then cover all of ``c``): the C before an update, summed and kept at once; with
    ``zero`` false the rows outside ``keep`` are left as they are in ``dst`` (nobody reads them). With
    ``out`` of 4 planes (no copy): the four sums only, no squares (what a rigorous check needs).

    Two stages, as the bounds assume: down each row segment of a column, then across the column segment.
    (The squares and absolute values cost nothing measurable in this memory-bound pass.)
    """
    # the branches of the inner loop as constants (see _block_sums)
    ab_on = out.shape[0] > 5
    if dst.shape[0] > 0:
        if ab_on:
            _block_sums(c, rb, cb, wr, wc, out, dst, keep, zero, True, True, True)
        else:
            _block_sums(c, rb, cb, wr, wc, out, dst, keep, zero, True, False, True)
    elif ab_on:
        _block_sums(c, rb, cb, wr, wc, out, dst, keep, zero, False, True, True)
    elif out.shape[0] > 4:
        _block_sums(c, rb, cb, wr, wc, out, dst, keep, zero, False, False, True)
    else:
        _block_sums(c, rb, cb, wr, wc, out, dst, keep, zero, False, False, False)


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _block_sums(
    c: np.ndarray, rb: np.ndarray, cb: np.ndarray, wr: np.ndarray, wc: np.ndarray, out: np.ndarray,
    dst: np.ndarray, keep: np.ndarray, zero: bool, copy: bool, ab_on: bool, sq_on: bool,
) -> None:  # pragma: no cover - compiled
    """The loop of :func:`block_sums_into`, inlined with ``copy``, ``ab_on`` and ``sq_on`` constants: chosen
    at run time, the branches between the inner loops cost ~25 % of a pass over a 2048 x 2048 piece."""
    nr = rb.shape[0] - 1
    nc = cb.shape[0] - 1
    nq = out.shape[0]
    masked = keep.shape[1] > 0
    r0 = rb[0]
    r1 = rb[nr]
    for bj in range(nc):
        for bi in range(nr):
            for q in range(nq):
                out[q, bi, bj] = 0.0
        for j in range(cb[bj], cb[bj + 1]):
            wj = wc[j]
            col = c[:, j]
            k0 = r0
            k1 = r1
            if masked:
                k0 = max(r0, keep[0, j])
                k1 = max(k0, min(r1, keep[1, j]))
            dcol = dst[:, j] if copy else col
            if copy and masked and zero:  # the rows outside the kept range are zero in the copy
                z = dcol[r0:k0]
                for t in range(k0 - r0):
                    z[t] = 0.0
                z = dcol[k1:r1]
                for t in range(r1 - k1):
                    z[t] = 0.0
            for bi in range(nr):
                lo = max(rb[bi], k0)
                ln = max(0, min(rb[bi + 1], k1) - lo)
                x = col[lo : lo + ln]
                ww = wr[lo : lo + ln]
                e = 0.0
                ws = 0.0
                sq = 0.0
                ab = 0.0
                if copy:
                    d = dcol[lo : lo + ln]
                    for t in range(ln):
                        v = x[t]
                        d[t] = v
                        e += v
                        ws += ww[t] * v
                        sq += v * v
                        ab += abs(v)
                elif ab_on:
                    for t in range(ln):
                        v = x[t]
                        e += v
                        ws += ww[t] * v
                        sq += v * v
                        ab += abs(v)
                elif sq_on:
                    for t in range(ln):
                        v = x[t]
                        e += v
                        ws += ww[t] * v
                        sq += v * v
                else:
                    for t in range(ln):
                        v = x[t]
                        e += v
                        ws += ww[t] * v
                if ab_on:
                    out[5, bi, bj] += ab
                if sq_on:
                    out[4, bi, bj] += sq
                out[0, bi, bj] += e
                out[1, bi, bj] += ws
                out[2, bi, bj] += wj * e
                out[3, bi, bj] += wj * ws
