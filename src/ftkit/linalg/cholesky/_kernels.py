"""Compiled passes of FT_PDPOTRF's panel checks: everything the sender of a panel needs from the solved
panel in one pass over it, and the receivers' sums in the sender's summation order.

:func:`panel_pass` takes, from the solved panel, its rows' sums and sums of squares, the column sums and the
plain and index-weighted segment sums the checksums are carried with. The panel is solved inside the buffer
that travels (``P.T`` is the transposed view of its rows): two passes over the rows, no copy. Any other
``P.T`` is copied into the buffer with the sums taken in the same pass, eight rows at a time while they are in
registers (a copy then two passes over it was ~2.7x that on 1024 x 128 panels; numpy took six passes: two
transposing copies, the segment products, the squares and two reductions). The row and column sums are
compared with the receivers' :func:`row_sums` / :func:`col_sums` for equality, so both sides add in one fixed
order, without fastmath (left to right along a row; eight interleaved partial sums down a column).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .._blas import call_dgemm

__all__ = ["panel_pass", "exact_sums", "row_sums", "col_sums", "carry_blocks", "take_checksums",
           "copy_checksums", "pack_rows"]


# reassociation for the segment sums only (their bound holds for any order); never for the compared sums
_FM = {"reassoc", "contract"}


def panel_pass(pt: np.ndarray, bounds: np.ndarray, wts: np.ndarray, rows: np.ndarray, segs: np.ndarray,
               rs: np.ndarray, sq: np.ndarray, cs: np.ndarray) -> None:
    """From ``pt`` (``w x m``, the transposed rows of P): ``rows = pt.T`` (``m x w``, F order), ``rs[i]`` /
    ``sq[i]`` the sum / sum of squares of row ``i``, ``cs[t]`` the sum of column ``t``, ``segs[2 s]`` /
    ``segs[2 s + 1]`` the plain / ``wts``-weighted column sums of the rows ``bounds[s]:bounds[s + 1]``
    (``bounds`` from 0 to ``m``): the copy and the sums in one pass (:func:`_copy_with_sums`), or, when
    ``pt`` is ``rows.T`` already, two passes over ``rows``."""
    if rows.ctypes.data != pt.ctypes.data:
        _copy_with_sums(pt, bounds, wts, rows, segs, rs, sq, cs)
        return
    exact_sums(rows, rs, sq, cs)
    _segment_sums(rows, bounds, wts, segs)


@njit(cache=True, nogil=True, inline="always")
def _flush(segs: np.ndarray, s: int, se: np.ndarray, sw: np.ndarray) -> None:  # pragma: no cover - compiled
    """Store segment ``s``'s plain and weighted sums ``se`` / ``sw`` in ``segs`` and zero them."""
    for t in range(se.shape[0]):
        segs[2 * s, t] = se[t]
        segs[2 * s + 1, t] = sw[t]
        se[t] = 0.0
        sw[t] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _add_rows(rows: np.ndarray, wts: np.ndarray, bounds: np.ndarray, segs: np.ndarray, se: np.ndarray,
              sw: np.ndarray, s: int, i0: int, i1: int) -> int:  # pragma: no cover - compiled
    """Add rows ``i0:i1`` of ``rows`` to the running segment sums ``se`` / ``sw`` of segment ``s``, storing
    (:func:`_flush`) each segment that ends before a row; return the segment of row ``i1 - 1``."""
    for i in range(i0, i1):
        while i >= bounds[s + 1]:
            _flush(segs, s, se, sw)
            s += 1
        for t in range(se.shape[0]):
            se[t] += rows[i, t]
            sw[t] += wts[i] * rows[i, t]
    return s


@njit(cache=True, nogil=True)
def _copy_with_sums(pt: np.ndarray, bounds: np.ndarray, wts: np.ndarray, rows: np.ndarray, segs: np.ndarray,
                    rs: np.ndarray, sq: np.ndarray, cs: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`panel_pass` with ``rows`` a separate array: eight rows at a time, each value read once from
    ``pt`` (where it is contiguous along the row) and used for the copy and every sum. The row sums run
    left to right and the column sums keep :func:`_col_sum`'s eight partial sums (row ``i`` into partial
    ``i % 8`` up to the last multiple of 8, the rest into the tail), so both equal the receivers' bit for
    bit; the segment sums add a tile's eight rows pairwise first (their bound holds for any order)."""
    w, m = pt.shape
    nseg = bounds.shape[0] - 1
    acc = np.zeros((8, w))  # acc[j, t]: column t's partial sum over the rows i = j (mod 8) below m8
    tail = np.zeros(w)
    se = np.zeros(w)  # the current segment's plain and weighted column sums
    sw = np.zeros(w)
    m8 = m - m % 8
    s = 0
    for i0 in range(0, m8, 8):
        one = bounds[s + 1] >= i0 + 8  # the eight rows in one segment: their sums go in with the copy
        r0 = r1 = r2 = r3 = r4 = r5 = r6 = r7 = 0.0
        q0 = q1 = q2 = q3 = q4 = q5 = q6 = q7 = 0.0
        for t in range(w):
            v0, v1, v2, v3 = pt[t, i0], pt[t, i0 + 1], pt[t, i0 + 2], pt[t, i0 + 3]
            v4, v5, v6, v7 = pt[t, i0 + 4], pt[t, i0 + 5], pt[t, i0 + 6], pt[t, i0 + 7]
            rows[i0, t], rows[i0 + 1, t], rows[i0 + 2, t], rows[i0 + 3, t] = v0, v1, v2, v3
            rows[i0 + 4, t], rows[i0 + 5, t], rows[i0 + 6, t], rows[i0 + 7, t] = v4, v5, v6, v7
            r0 += v0
            r1 += v1
            r2 += v2
            r3 += v3
            r4 += v4
            r5 += v5
            r6 += v6
            r7 += v7
            q0 += v0 * v0
            q1 += v1 * v1
            q2 += v2 * v2
            q3 += v3 * v3
            q4 += v4 * v4
            q5 += v5 * v5
            q6 += v6 * v6
            q7 += v7 * v7
            acc[0, t] += v0
            acc[1, t] += v1
            acc[2, t] += v2
            acc[3, t] += v3
            acc[4, t] += v4
            acc[5, t] += v5
            acc[6, t] += v6
            acc[7, t] += v7
            if one:
                se[t] += ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))
                sw[t] += ((wts[i0] * v0 + wts[i0 + 1] * v1) + (wts[i0 + 2] * v2 + wts[i0 + 3] * v3)) + \
                    ((wts[i0 + 4] * v4 + wts[i0 + 5] * v5) + (wts[i0 + 6] * v6 + wts[i0 + 7] * v7))
        rs[i0], rs[i0 + 1], rs[i0 + 2], rs[i0 + 3] = r0, r1, r2, r3
        rs[i0 + 4], rs[i0 + 5], rs[i0 + 6], rs[i0 + 7] = r4, r5, r6, r7
        sq[i0], sq[i0 + 1], sq[i0 + 2], sq[i0 + 3] = q0, q1, q2, q3
        sq[i0 + 4], sq[i0 + 5], sq[i0 + 6], sq[i0 + 7] = q4, q5, q6, q7
        if not one:  # a segment ends inside the tile: its rows one by one, from the copy (in cache)
            s = _add_rows(rows, wts, bounds, segs, se, sw, s, i0, i0 + 8)
        while s < nseg and i0 + 8 >= bounds[s + 1]:
            _flush(segs, s, se, sw)
            s += 1
    for i in range(m8, m):
        r = 0.0
        q = 0.0
        for t in range(w):
            v = pt[t, i]
            rows[i, t] = v
            r += v
            q += v * v
            tail[t] += v
        rs[i] = r
        sq[i] = q
    s = _add_rows(rows, wts, bounds, segs, se, sw, s, m8, m)
    while s < nseg:
        _flush(segs, s, se, sw)
        s += 1
    for t in range(w):
        cs[t] = (((acc[0, t] + acc[1, t]) + (acc[2, t] + acc[3, t]))
                 + ((acc[4, t] + acc[5, t]) + (acc[6, t] + acc[7, t]))) + tail[t]


@njit(cache=True, nogil=True)
def exact_sums(x: np.ndarray, rs: np.ndarray, sq: np.ndarray, cs: np.ndarray) -> None:  # pragma: no cover
    """Row sums (left to right, as :func:`row_sums`), sums of squares and column sums (as :func:`col_sums`)
    of ``x`` (F order), four columns per sweep down the rows (each row's sums still add them one after the
    other: ``rs`` and ``sq`` are read and written once per four columns, ~1.3x one column per sweep)."""
    m, w = x.shape
    rs[:] = 0.0
    sq[:] = 0.0
    t = 0
    while t + 4 <= w:
        for i in range(m):
            v0, v1, v2, v3 = x[i, t], x[i, t + 1], x[i, t + 2], x[i, t + 3]
            rs[i] = (((rs[i] + v0) + v1) + v2) + v3
            sq[i] = (((sq[i] + v0 * v0) + v1 * v1) + v2 * v2) + v3 * v3
        for u in range(4):
            cs[t + u] = _col_sum(x, t + u)
        t += 4
    while t < w:
        for i in range(m):
            v = x[i, t]
            rs[i] += v
            sq[i] += v * v
        cs[t] = _col_sum(x, t)
        t += 1


@njit(cache=True, nogil=True, fastmath=_FM)
def _segment_sums(x: np.ndarray, bounds: np.ndarray, wts: np.ndarray,
                  segs: np.ndarray) -> None:  # pragma: no cover - compiled
    """``segs[2 s, t]`` / ``segs[2 s + 1, t]``: plain / weighted sums of column ``t`` over segment ``s``."""
    w = x.shape[1]
    for t in range(w):
        for s in range(bounds.shape[0] - 1):
            e = 0.0
            ws = 0.0
            for i in range(bounds[s], bounds[s + 1]):
                v = x[i, t]
                e += v
                ws += wts[i] * v
            segs[2 * s, t] = e
            segs[2 * s + 1, t] = ws


@njit(cache=True, nogil=True, inline="always")
def _col_sum(x: np.ndarray, t: int) -> float:  # pragma: no cover - compiled
    """The sum of column ``t`` of ``x`` in one fixed order: eight interleaved partial sums, then a tree."""
    m = x.shape[0]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    i = 0
    while i + 8 <= m:
        a0 += x[i, t]
        a1 += x[i + 1, t]
        a2 += x[i + 2, t]
        a3 += x[i + 3, t]
        a4 += x[i + 4, t]
        a5 += x[i + 5, t]
        a6 += x[i + 6, t]
        a7 += x[i + 7, t]
        i += 8
    tail = 0.0
    while i < m:
        tail += x[i, t]
        i += 1
    return (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) + tail


@njit(cache=True, nogil=True)
def row_sums(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i]`` = the sum of row ``i`` of ``x``, left to right (:func:`panel_pass`'s order): eight columns
    per sweep down the rows (each row's sum still takes them one after the other), so ``out`` is read and
    written once per eight columns, not once per column."""
    m, w = x.shape
    out[:] = 0.0
    t = 0
    while t + 8 <= w:
        for i in range(m):
            out[i] = (((((((out[i] + x[i, t]) + x[i, t + 1]) + x[i, t + 2]) + x[i, t + 3]) + x[i, t + 4])
                       + x[i, t + 5]) + x[i, t + 6]) + x[i, t + 7]
        t += 8
    while t < w:
        for i in range(m):
            out[i] += x[i, t]
        t += 1


@njit(cache=True, nogil=True)
def carry_blocks(dgemm: Any, pieces: Any, lds: np.ndarray, piece_rs: Any, table: np.ndarray,
                 sums: np.ndarray, chk_t: np.ndarray, c0: int, firsts: np.ndarray, ii0: int, j0: int,
                 trusted: int) -> int:  # pragma: no cover - compiled
    """For every block column ``j`` from ``j0``, its rows of P rows ``table[j, 1]:table[j, 1] + table[j, 2]``
    of piece ``table[j, 0]`` (``pieces[p]``: an F-order array of ``lds[p]`` rows, flat, so that every piece
    has one type; where the rows arrived: no copy of them into one array), the block
    columns one after the other from local column ``c0``: compare their row sums (:func:`row_sums`' order)
    with the sent ones (the same rows of ``piece_rs``; not for ``j == trusted``) and return ``j`` at the
    first block column where one differs, before anything is carried for it; else carry it: ``chk_t[rows of
    j, 2 firsts[j]:] -= rows @ sums[2 (firsts[j] - ii0):].T``, over the segments from its diagonal on only,
    by ``dgemm`` (CBLAS ``dgemm``, passed in, so this stays cached: :data:`.._blas.KERNEL_DGEMM` or the
    ctypes function, :func:`.._blas.call_dgemm`) called from here, while the rows just summed are in cache.
    Returns -1 when every block column is carried. Column major, every operand with unit row stride."""
    w = sums.shape[1]
    a = c0
    most = 0
    for j in range(table.shape[0]):
        most = max(most, table[j, 2])
        if j < j0:
            a += table[j, 2]
    got = np.empty(most)
    for j in range(j0, table.shape[0]):
        p, r0, m = table[j, 0], table[j, 1], table[j, 2]
        ld = lds[p]
        if m <= 0:
            continue
        rows = pieces[p][:ld * w].reshape((w, ld)).T
        if j != trusted and rows_changed(rows[r0:r0 + m], piece_rs[p][r0:r0 + m], got[:m]):
            return j
        carry_product(dgemm, rows, r0, m, sums, chk_t, a, firsts[j], ii0)
        a += m
    return -1


@njit(cache=True, nogil=True)
def rows_changed(rows: np.ndarray, sent: np.ndarray, got: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether the sums of ``rows`` (:func:`row_sums`' order, taken into ``got``) differ from ``sent``: the
    transit check of received rows of P against their senders' row sums."""
    row_sums(rows, got)
    for i in range(rows.shape[0]):
        if not got[i] == sent[i]:
            return True
    return False


@njit(cache=True, nogil=True)
def carry_product(dgemm: Any, rows: np.ndarray, r0: int, m: int, sums: np.ndarray, chk_t: np.ndarray,
                  col: int, first: int, ii0: int) -> None:  # pragma: no cover - compiled
    """``chk_t[col:col + m, 2 first:] -= rows[r0:r0 + m] @ sums[2 (first - ii0):].T`` by ``dgemm`` (CBLAS, as
    :func:`carry_blocks` takes it): one block column's carry over the segments from ``first`` on. Column
    major, every operand with unit row stride."""
    n, w = chk_t.shape[1] - 2 * first, sums.shape[1]
    if n > 0 and w > 0:
        call_dgemm(dgemm, 102, 111, 112, m, n, w, -1.0, rows.ctypes.data + 8 * r0, rows.strides[1] // 8,
                   sums.ctypes.data + 8 * 2 * (first - ii0), sums.strides[1] // 8, 1.0,
                   chk_t.ctypes.data + 8 * (col + chk_t.strides[1] // 8 * 2 * first), chk_t.strides[1] // 8)


@njit(cache=True, nogil=True)
def take_checksums(dgemm: Any, w: np.ndarray, enc: np.ndarray, chk_t: np.ndarray, rlo: np.ndarray,
                   cstart: np.ndarray, cstop: np.ndarray, first: np.ndarray) -> None:  # pragma: no cover
    """``chk_t[cstart[j]:cstop[j], 2 s:2 s + 2] = w[rlo[s]:rlo[s + 1], cstart[j]:cstop[j]].T @ enc[:len]`` for
    every block column ``j`` and every segment ``s`` from ``first[j]`` on (``len`` its rows; ``enc``: the
    plain and index-weighted encoder, ``bs x 2``): the checksums of the block columns, one small product per
    segment by ``dgemm`` (as :func:`carry_blocks`), no copy of ``w``. Column major, unit row strides."""
    ldw, lde, ldc = w.strides[1] // 8, enc.strides[1] // 8, chk_t.strides[1] // 8
    nseg = rlo.shape[0] - 1
    for j in range(first.shape[0]):
        m = cstop[j] - cstart[j]
        for s in range(first[j], nseg):
            ln = rlo[s + 1] - rlo[s]
            if m <= 0 or ln <= 0:
                continue
            call_dgemm(dgemm, 102, 112, 111, m, 2, ln, 1.0, w.ctypes.data + 8 * (rlo[s] + ldw * cstart[j]),
                       ldw, enc.ctypes.data, lde, 0.0, chk_t.ctypes.data + 8 * (cstart[j] + ldc * 2 * s), ldc)


@njit(cache=True, nogil=True, fastmath=_FM)
def copy_checksums(w: np.ndarray, saved: np.ndarray, chk_t: np.ndarray, rlo: np.ndarray, cstart: np.ndarray,
                   cstop: np.ndarray, first: np.ndarray, wts: np.ndarray) -> None:  # pragma: no cover
    """:func:`take_checksums` (``wts``: each local row's weight, its index in its segment) and, in the same
    pass, ``saved[rows, cols] = w[rows, cols]`` over the segments it sums: each value read once, for the copy
    and both sums (the copy then take_checksums' products: ~1.4x this, 4 ranks on 2 cores, n = 4096,
    benchmarks/floor_ft_potrf.py). Column by column down each segment: the sums vectorize (reassociated:
    their bound holds for any order)."""
    nseg = rlo.shape[0] - 1
    for j in range(first.shape[0]):
        for c in range(cstart[j], cstop[j]):
            for s in range(first[j], nseg):
                e = 0.0
                ws = 0.0
                for i in range(rlo[s], rlo[s + 1]):
                    v = w[i, c]
                    saved[i, c] = v
                    e += v
                    ws += wts[i] * v
                chk_t[c, 2 * s] = e
                chk_t[c, 2 * s + 1] = ws


@njit(cache=True, nogil=True)
def col_sums(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[t]`` = the sum of column ``t`` of ``x`` (:func:`panel_pass`'s order)."""
    for t in range(x.shape[1]):
        out[t] = _col_sum(x, t)


@njit(cache=True, nogil=True)
def pack_rows(rows: np.ndarray, rs: np.ndarray, sq: np.ndarray, runs: np.ndarray, out_rows: np.ndarray,
              out_rs: np.ndarray, out_sq: np.ndarray, out_cs: np.ndarray) -> None:  # pragma: no cover
    """Copy rows ``runs[r, 0]:runs[r, 0] + runs[r, 1]`` of ``rows`` (and of ``rs``, ``sq``), run after run,
    into ``out_rows`` (``out_rs``, ``out_sq``), and take the copy's column sums ``out_cs`` (:func:`col_sums`'
    order): a selection of a panel's rows with their sums, in one call."""
    for t in range(rows.shape[1]):
        at = 0
        for r in range(runs.shape[0]):
            a, m = runs[r, 0], runs[r, 1]
            for i in range(m):
                out_rows[at + i, t] = rows[a + i, t]
            at += m
    at = 0
    for r in range(runs.shape[0]):
        a, m = runs[r, 0], runs[r, 1]
        for i in range(m):
            out_rs[at + i] = rs[a + i]
            out_sq[at + i] = sq[a + i]
        at += m
    col_sums(out_rows, out_cs)
