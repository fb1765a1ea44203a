"""Numba kernels for the ABFT encoding: one pass over a SUMMA piece that copies it into the panel buffer and
accumulates its plain, index-weighted, absolute (and, on request, squared) segment sums (GIL released).

The encoding is memory-bound: numpy needs several passes (``abs``, squares, sums, the copy into the panel),
these need one, at close to the speed of the copy alone, which is what keeps ft_pdgemm's overhead at a few
percent. How (per rank on the 2048 x 512 pieces of n = 4096 on 2 x 2, ``benchmarks/bench_abft.py
--kernels``: A 0.6 ms, B 0.9-1.2 ms, against 0.35-0.4 ms for the plain copy pdgemm makes; 2-3x faster than
the previous kernels):

- every inner loop runs over a contiguous slice from index 0 (``x = col[lo:hi]; for t in range(len)``), never
  over ``range(lo, hi)`` on the array itself: with a start of unknown sign numba's negative-index wraparound
  stays in the loop and LLVM falls back to scalar gathers;
- column sums (B pieces) add eight columns per pass over the accumulators when only summing (without
  squares), four otherwise (one load and one store of each accumulator per eight or four elements instead
  of per element; the copy of the four columns is made in the same loop, each element loaded once, and
  summed into a scratch, not into the output's columns). They are added one after the other, in column
  order, as a one-column-at-a-time pass adds them (checked bit-identical to the previous kernels): the
  observed residuals, and the tightness figures measured from them, do not depend on the kernel. The block
  sums of a result are :mod:`ftkit.linalg.checksums._block_kernels`'.

Sums within a segment have at most ``len`` roundings, as :mod:`ftkit.linalg.checksums`'s bounds assume.
``kinds`` = 3 leaves out the squared sums (only the statistical threshold needs them), 4 includes them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["encode_rows_into", "encode_cols_into", "copy_col_sums"]

# Reassociation lets LLVM vectorize the segment sums; the bounds hold for any summation order (the tree depth
# stays below the segment length), and NaN/Inf semantics are kept (no nnan/ninf flags).
_FM = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _segment_sums(x: np.ndarray, ww: np.ndarray,
                  sq_on: bool) -> tuple[float, float, float, float]:  # pragma: no cover - compiled
    """Plain, weighted, absolute and (with ``sq_on``, else 0) squared sums of one segment ``x`` (weights
    ``ww``): the loop :func:`encode_rows_into` and :func:`._tri_sums.triangle_rows_into` share."""
    e = 0.0
    ws = 0.0
    ab = 0.0
    sq = 0.0
    if sq_on:
        for t in range(x.shape[0]):
            v = x[t]
            e += v
            ws += ww[t] * v
            ab += abs(v)
            sq += v * v
    else:
        for t in range(x.shape[0]):
            v = x[t]
            e += v
            ws += ww[t] * v
            ab += abs(v)
    return e, ws, ab, sq


@njit(cache=True, nogil=True, fastmath=_FM)
def encode_rows_into(
    a: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray, copy: bool, kinds: int = 4
) -> None:  # pragma: no cover - compiled
    """Checksum rows of ``a`` (ra x kp) into ``ext[base:base+kinds*nr]`` (``base = ra`` with ``copy``, else
    0): plain, weighted, absolute (and with ``kinds == 4`` squared) sums of each segment; with ``copy`` also
    ``ext[:ra] = a``. ``bounds`` must cover ``0..ra`` with ``copy``."""
    ra, kp = a.shape
    nr = bounds.shape[0] - 1
    base = ra if copy else 0
    sq_on = kinds >= 4
    for kk in range(kp):
        src = a[:, kk]
        dst = ext[:, kk]
        for s in range(nr):
            lo = bounds[s]
            ln = bounds[s + 1] - lo
            x = src[lo : lo + ln]
            ww = w[lo : lo + ln]
            e = 0.0
            ws = 0.0
            ab = 0.0
            sq = 0.0
            if copy:
                d = dst[lo : lo + ln]
                if sq_on:
                    for t in range(ln):
                        v = x[t]
                        d[t] = v
                        e += v
                        ws += ww[t] * v
                        ab += abs(v)
                        sq += v * v
                else:
                    for t in range(ln):
                        v = x[t]
                        d[t] = v
                        e += v
                        ws += ww[t] * v
                        ab += abs(v)
            else:
                e, ws, ab, sq = _segment_sums(x, ww, sq_on)
            ext[base + s, kk] = e
            ext[base + nr + s, kk] = ws
            ext[base + 2 * nr + s, kk] = ab
            if sq_on:
                ext[base + 3 * nr + s, kk] = sq


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _add_cols(
    src: np.ndarray,
    j: int,
    m: int,
    w: np.ndarray,
    es: np.ndarray,
    wss: np.ndarray,
    abq: np.ndarray,
    sqs: np.ndarray,
    sq_on: bool,
) -> None:  # pragma: no cover - compiled
    """Add columns ``j .. j+m-1`` of ``src`` (``m <= 4``) to the accumulator columns (four at once)."""
    kp = src.shape[0]
    if m == 4:
        x0 = src[:, j]
        x1 = src[:, j + 1]
        x2 = src[:, j + 2]
        x3 = src[:, j + 3]
        w0 = w[j]
        w1 = w[j + 1]
        w2 = w[j + 2]
        w3 = w[j + 3]
        for kk in range(kp):
            a0 = x0[kk]
            a1 = x1[kk]
            a2 = x2[kk]
            a3 = x3[kk]
            es[kk] = (((es[kk] + a0) + a1) + a2) + a3
            wss[kk] = (((wss[kk] + w0 * a0) + w1 * a1) + w2 * a2) + w3 * a3
            abq[kk] = (((abq[kk] + abs(a0)) + abs(a1)) + abs(a2)) + abs(a3)
        if sq_on:
            for kk in range(kp):
                a0 = x0[kk]
                a1 = x1[kk]
                a2 = x2[kk]
                a3 = x3[kk]
                sqs[kk] = (((sqs[kk] + a0 * a0) + a1 * a1) + a2 * a2) + a3 * a3
        return
    for t in range(m):
        x0 = src[:, j + t]
        w0 = w[j + t]
        for kk in range(kp):
            a0 = x0[kk]
            es[kk] += a0
            wss[kk] += w0 * a0
            abq[kk] += abs(a0)
        if sq_on:
            for kk in range(kp):
                a0 = x0[kk]
                sqs[kk] += a0 * a0


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _add_cols8(
    src: np.ndarray, j: int, w: np.ndarray, es: np.ndarray, wss: np.ndarray, abq: np.ndarray
) -> None:  # pragma: no cover - compiled
    """:func:`_add_cols` of columns ``j .. j+7`` without squares: each accumulator loaded and stored once per
    eight elements (a summing pass over a 2048 x 2048 piece 10-25 % faster than two four-column steps). The
    additions are written in two four-column steps' order, but the kernels compile with ``reassoc``, so only
    the summation bound the checks assume is promised (on an AMD EPYC, AVX2, 300 random shapes gave the
    four-column steps' sums to the bit); the checks on these sums allow that bound."""
    kp = src.shape[0]
    x0 = src[:, j]
    x1 = src[:, j + 1]
    x2 = src[:, j + 2]
    x3 = src[:, j + 3]
    x4 = src[:, j + 4]
    x5 = src[:, j + 5]
    x6 = src[:, j + 6]
    x7 = src[:, j + 7]
    w0 = w[j]
    w1 = w[j + 1]
    w2 = w[j + 2]
    w3 = w[j + 3]
    w4 = w[j + 4]
    w5 = w[j + 5]
    w6 = w[j + 6]
    w7 = w[j + 7]
    for kk in range(kp):
        a0 = x0[kk]
        a1 = x1[kk]
        a2 = x2[kk]
        a3 = x3[kk]
        a4 = x4[kk]
        a5 = x5[kk]
        a6 = x6[kk]
        a7 = x7[kk]
        es[kk] = (((((((es[kk] + a0) + a1) + a2) + a3) + a4) + a5) + a6) + a7
        wss[kk] = (((((((wss[kk] + w0 * a0) + w1 * a1) + w2 * a2) + w3 * a3) + w4 * a4) + w5 * a5)
                   + w6 * a6) + w7 * a7
        abq[kk] = (((((((abq[kk] + abs(a0)) + abs(a1)) + abs(a2)) + abs(a3)) + abs(a4)) + abs(a5))
                   + abs(a6)) + abs(a7)


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _copy_add_cols(
    src: np.ndarray,
    dst: np.ndarray,
    j: int,
    w: np.ndarray,
    es: np.ndarray,
    wss: np.ndarray,
    abq: np.ndarray,
    sqs: np.ndarray,
    sq_on: bool,
) -> None:  # pragma: no cover - compiled
    """Copy columns ``j .. j+3`` of ``src`` into ``dst`` and add them to the accumulator columns, in one loop
    (each element loaded once: a copy first and the sums reading it back cost ~20 % more, the four
    destination columns having left L1); the sums are :func:`_add_cols`' to the bit."""
    kp = src.shape[0]
    x0 = src[:, j]
    x1 = src[:, j + 1]
    x2 = src[:, j + 2]
    x3 = src[:, j + 3]
    d0 = dst[:, j]
    d1 = dst[:, j + 1]
    d2 = dst[:, j + 2]
    d3 = dst[:, j + 3]
    w0 = w[j]
    w1 = w[j + 1]
    w2 = w[j + 2]
    w3 = w[j + 3]
    for kk in range(kp):
        a0 = x0[kk]
        a1 = x1[kk]
        a2 = x2[kk]
        a3 = x3[kk]
        d0[kk] = a0
        d1[kk] = a1
        d2[kk] = a2
        d3[kk] = a3
        es[kk] = (((es[kk] + a0) + a1) + a2) + a3
        wss[kk] = (((wss[kk] + w0 * a0) + w1 * a1) + w2 * a2) + w3 * a3
        abq[kk] = (((abq[kk] + abs(a0)) + abs(a1)) + abs(a2)) + abs(a3)
    if sq_on:
        for kk in range(kp):
            a0 = d0[kk]
            a1 = d1[kk]
            a2 = d2[kk]
            a3 = d3[kk]
            sqs[kk] = (((sqs[kk] + a0 * a0) + a1 * a1) + a2 * a2) + a3 * a3


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def copy_add_run(
    src: np.ndarray,
    dst: np.ndarray,
    j: int,
    hi: int,
    w: np.ndarray,
    es: np.ndarray,
    wss: np.ndarray,
    abq: np.ndarray,
    sqs: np.ndarray,
    sq_on: bool,
) -> None:  # pragma: no cover - compiled
    """Copy columns ``j .. hi-1`` of ``src`` into ``dst`` and add them to the accumulator columns, four at a
    time (:func:`_copy_add_cols`), the last ``< 4`` copied and then summed (:func:`_add_cols`)."""
    kp = src.shape[0]
    while j < hi:
        m = min(4, hi - j)
        if m == 4:
            _copy_add_cols(src, dst, j, w, es, wss, abq, sqs, sq_on)
        else:
            for t in range(m):
                xs = src[:, j + t]
                d = dst[:, j + t]
                for kk in range(kp):
                    d[kk] = xs[kk]
            _add_cols(dst, j, m, w, es, wss, abq, sqs, sq_on)
        j += m


@njit(cache=True, nogil=True, fastmath=_FM, inline="always")
def _copy_col_sums(
    b: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray, base: int, sq_on: bool
) -> None:  # pragma: no cover - compiled
    """:func:`_col_sums` with ``copy``: each segment's columns copied into ``ext`` and summed into a scratch
    (:func:`copy_add_run`), whose columns are then stored as the segment's checksum columns. Summed into
    ``ext``'s own columns instead, which lie whole multiples of its leading dimension from the columns
    being copied, the pass took twice as long (2048 x 2048 piece, 3 kinds: 5.8-6.6 ms against 2.8-3.4,
    the copy alone ~2.4); the sums are the same to the bit."""
    kp = b.shape[0]
    nc = bounds.shape[0] - 1
    acc = np.empty((4, kp))
    es = acc[0]
    wss = acc[1]
    abq = acc[2]
    sqs = acc[3]
    for s in range(nc):
        for kk in range(kp):
            es[kk] = 0.0
            wss[kk] = 0.0
            abq[kk] = 0.0
        if sq_on:
            for kk in range(kp):
                sqs[kk] = 0.0
        copy_add_run(b, ext, bounds[s], bounds[s + 1], w, es, wss, abq, sqs, sq_on)
        e_out = ext[:, base + s]
        w_out = ext[:, base + nc + s]
        a_out = ext[:, base + 2 * nc + s]
        for kk in range(kp):
            e_out[kk] = es[kk]
            w_out[kk] = wss[kk]
            a_out[kk] = abq[kk]
        if sq_on:
            s_out = ext[:, base + 3 * nc + s]
            for kk in range(kp):
                s_out[kk] = sqs[kk]


@njit(cache=True, nogil=True, fastmath=_FM)
def _col_sums(
    b: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray, base: int, copy: bool, kinds: int
) -> None:  # pragma: no cover - compiled
    """Checksum columns of ``b`` (kp x cb) into ``ext[:, base + q*nc + s]`` (kind ``q``, segment ``s``); with
    ``copy`` also ``ext[:, j] = b[:, j]`` for every ``j`` in a segment (in the loop that sums it)."""
    kp = b.shape[0]
    nc = bounds.shape[0] - 1
    sq_on = kinds >= 4
    if copy:
        _copy_col_sums(b, bounds, w, ext, base, sq_on)
        return
    for s in range(nc):
        es = ext[:, base + s]
        wss = ext[:, base + nc + s]
        abq = ext[:, base + 2 * nc + s]
        sqs = ext[:, base + 3 * nc + s] if sq_on else es  # not written without squares
        for kk in range(kp):
            es[kk] = 0.0
            wss[kk] = 0.0
            abq[kk] = 0.0
        if sq_on:
            for kk in range(kp):
                sqs[kk] = 0.0
        j = bounds[s]
        hi = bounds[s + 1]
        while not sq_on and hi - j >= 8:
            _add_cols8(b, j, w, es, wss, abq)
            j += 8
        while j < hi:
            m = min(4, hi - j)
            _add_cols(b, j, m, w, es, wss, abq, sqs, sq_on)
            j += m


def copy_col_sums(b: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray) -> None:
    """``ext[:, :cb] = b`` and the four checksum columns per segment of ``b`` into ``ext[:, cb:cb+4nc]``, in
    one pass over ``b`` (every column of ``b`` must lie in a segment)."""
    _col_sums(b, bounds, w, ext, b.shape[1], True, 4)


def encode_cols_into(
    b: np.ndarray, bounds: np.ndarray, w: np.ndarray, ext: np.ndarray, copy: bool, kinds: int = 4
) -> None:
    """Checksum columns of ``b`` (kp x cb) into ``ext[:, base:base+kinds*nc]`` (``base = cb`` with ``copy``,
    else 0); with ``copy`` also ``ext[:, :cb] = b`` (fused: one pass over ``b`` when every column of ``b`` is
    in a segment, as for SUMMA pieces)."""
    cb = b.shape[1]
    nc = bounds.shape[0] - 1
    if not copy:
        _col_sums(b, bounds, w, ext, 0, False, kinds)
        return
    if not (nc == 0 or (bounds[0] == 0 and bounds[-1] == cb)):
        ext[:, :cb] = b
        _col_sums(b, bounds, w, ext, cb, False, kinds)
        return
    _col_sums(b, bounds, w, ext, cb, True, kinds)
