"""Numba kernels for the triangular routines' checksums (GIL released): ``ft_pdtrsm``'s and ``ft_pdtrmm``'s
triangle ``T`` made (in place, or copied out of A's own piece) and its checksum rows taken in the same pass;
``ft_pdtrsm``'s saved copy of ``alpha B`` made in the pass that takes its block sums.

The segment sums are :mod:`ftkit.linalg.checksums._kernels`' (one loop per segment over a contiguous slice,
reassociated), read from a column's kept rows only (the others are zero), while the column is in cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# numba's on-disk cache of the kernels below does not see a change in the helpers they inline from these two
# modules: after editing one of them, touch this file too
from ..pblas._tri_kernel import triangle_column, triangle_column_from
from ._kernels import _FM, _segment_sums, copy_add_run

__all__ = ["copy_kept", "copy_block_sums", "triangle_rows_into", "triangle_rows_from"]


@njit(cache=True, nogil=True)
def copy_kept(src: np.ndarray, dst: np.ndarray, keep: np.ndarray) -> None:  # pragma: no cover - compiled
    """``dst[i, j] = src[i, j]`` for the rows ``keep[0, j] <= i < keep[1, j]`` of every column ``j``; the
    other elements of ``dst`` stay as they are (a triangle copied into a square, in one pass)."""
    for j in range(src.shape[1]):
        lo = keep[0, j]
        ln = keep[1, j] - lo
        if ln > 0:
            x = src[lo : lo + ln, j]
            d = dst[lo : lo + ln, j]
            for t in range(ln):
                d[t] = x[t]


@njit(cache=True, nogil=True, fastmath=_FM)
def _kept_segment_sums(col: np.ndarray, k0: int, k1: int, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray,
                       q: int, sq_on: bool) -> None:  # pragma: no cover - compiled
    """The sums of every row segment (``bounds``) of a triangle's column ``col`` into column ``q`` of
    ``ext``, read from its kept rows ``k0:k1`` only (the others are zero): plain, weighted, absolute (and,
    if ``sq_on``, squared), ``nr`` rows apart."""
    nr = bounds.shape[0] - 1
    for s in range(nr):
        lo = max(bounds[s], k0)
        ln = max(0, min(bounds[s + 1], k1) - lo)
        e, ws, ab, sq = _segment_sums(col[lo : lo + ln], w[lo : lo + ln], sq_on)
        ext[s, q] = e
        ext[nr + s, q] = ws
        ext[2 * nr + s, q] = ab
        if sq_on:
            ext[3 * nr + s, q] = sq


@njit(cache=True, nogil=True, fastmath=_FM)
def triangle_rows_into(
    t: np.ndarray, keep: np.ndarray, diag: np.ndarray, unit: bool, bounds: np.ndarray, w: np.ndarray,
    ext: np.ndarray, cidx: np.ndarray, kinds: int,
) -> None:  # pragma: no cover - compiled
    """Make ``t`` (F order, in place) a triangle and take its checksum rows in the same pass.

    The rows outside ``keep[0, j]:keep[1, j]`` of column ``j`` are set to zero (whatever they held: NaN
    or Inf there never reach later arithmetic), and ``t[diag[j], j] = 1`` where ``unit`` and
    ``diag[j] >= 0``. With ``kinds`` 3 or 4, the plain, weighted, absolute (and squared) sums of every
    row segment (``bounds``) of the result go into column ``cidx[j]`` of ``ext`` (``kinds * nr`` rows,
    laid out as :func:`encode_rows_into` lays them out), read from the kept rows only (the others are
    zero).
    """
    # the squares' switch as a constant (see _triangle_rows): a run-time one costs ~40 % of the pass
    if kinds >= 4:
        _triangle_rows(t, t, keep, diag, unit, bounds, w, ext, cidx, False, True)
    else:
        _triangle_rows(t, t, keep, diag, unit, bounds, w, ext, cidx, False, False)


@njit(cache=True, nogil=True, fastmath=_FM)
def triangle_rows_from(
    src: np.ndarray, t: np.ndarray, keep: np.ndarray, diag: np.ndarray, unit: bool, bounds: np.ndarray,
    w: np.ndarray, ext: np.ndarray, cidx: np.ndarray, kinds: int,
) -> None:  # pragma: no cover - compiled
    """:func:`triangle_rows_into` of a copy: ``t`` (F order, ``src``'s shape) becomes the triangle of ``src``
    and its checksum rows go into ``ext``, in one pass that reads only ``src``'s kept rows.

    Each column of ``t`` gets ``src``'s rows ``keep[0, j]:keep[1, j]``, zeros elsewhere and, where ``unit``
    and ``diag[j] >= 0``, a one on the diagonal (what copying ``src`` into ``t`` and then
    :func:`triangle_rows_into` give, values and sums alike, to the bit); the sums are read from ``t``'s
    column while it is in cache. ``src`` is not modified.
    """
    if kinds >= 4:
        _triangle_rows(src, t, keep, diag, unit, bounds, w, ext, cidx, True, True)
    else:
        _triangle_rows(src, t, keep, diag, unit, bounds, w, ext, cidx, True, False)


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _triangle_rows(
    src: np.ndarray, t: np.ndarray, keep: np.ndarray, diag: np.ndarray, unit: bool, bounds: np.ndarray,
    w: np.ndarray, ext: np.ndarray, cidx: np.ndarray, copy: bool, sq_on: bool,
) -> None:  # pragma: no cover - compiled
    """The loop of :func:`triangle_rows_into` (``copy`` false: ``src`` is ``t``) and
    :func:`triangle_rows_from`. Inlined with ``copy`` and ``sq_on`` constants, so the compiler drops the
    branches on them: passed as run-time values (``kinds >= 4``), the segment sums' loop ran ~1.5 ms slower
    per 2048 x 2048 piece (half of it kept), as slow as the copy itself."""
    for j in range(t.shape[1]):
        col = t[:, j]
        k0 = keep[0, j]
        k1 = keep[1, j]
        if copy:
            triangle_column_from(src[:, j], col, k0, k1, diag[j], unit)
        else:
            triangle_column(col, k0, k1, diag[j], unit)  # the plain routine's triangle, then the sums
        _kept_segment_sums(col, k0, k1, bounds, w, ext, cidx[j], sq_on)


@njit(cache=True, nogil=True, fastmath=_FM)
def copy_block_sums(b: np.ndarray, dst: np.ndarray, rb: np.ndarray, cb: np.ndarray, wr: np.ndarray,
                    wc: np.ndarray, out: np.ndarray, acc: np.ndarray) -> None:  # pragma: no cover - compiled
    """``dst[...] = b`` and the block sums of ``b`` into ``out`` (4, nr, nc), in one pass over ``b``: plain,
    column-weighted (``wc``), row-weighted (``wr``) and absolute, for the row segments ``rb`` and column
    segments ``cb`` (both covering all of ``b``).

    Each column segment is copied and summed across its columns per row into ``acc`` (``(rows, 3)``
    scratch, F order) four columns at a time (:func:`~._kernels.encode_cols_into`'s loop, each element
    loaded once), then ``acc`` is summed down each row segment while it is in cache: the per-row checksum
    columns are never written out (their array and the numpy passes that reduced it cost ~0.4 ms per
    2048 x 2048 piece). Two stages, as the bounds assume (across the columns, then down the rows).
    """
    kp = b.shape[0]
    nr = rb.shape[0] - 1
    es = acc[:, 0]
    wss = acc[:, 1]
    abq = acc[:, 2]
    for s in range(cb.shape[0] - 1):
        for kk in range(kp):
            es[kk] = 0.0
            wss[kk] = 0.0
            abq[kk] = 0.0
        copy_add_run(b, dst, cb[s], cb[s + 1], wc, es, wss, abq, es, False)
        for r in range(nr):
            lo = rb[r]
            ln = rb[r + 1] - lo
            e = es[lo : lo + ln]
            cw = wss[lo : lo + ln]
            ab = abq[lo : lo + ln]
            ww = wr[lo : lo + ln]
            se = 0.0
            sc = 0.0
            sr = 0.0
            sa = 0.0
            for t in range(ln):
                se += e[t]
                sc += cw[t]
                sr += ww[t] * e[t]
                sa += ab[t]
            out[0, r, s] = se
            out[1, r, s] = sc
            out[2, r, s] = sr
            out[3, r, s] = sa
