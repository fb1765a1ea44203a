"""Compiled passes of FT_PDPOTRF's panel checks: everything the sender of a panel needs from the solved
panel in one pass over it, and the receivers' sums in the sender's summation order.

:func:`panel_pass` reads the solved panel once (as ``P.T``, the layout the triangular solve leaves) and
writes its rows into the buffer that travels, with their row sums and sums of squares, the column sums and
the plain and index-weighted segment sums the checksums are carried with: one pass, a few rows at a time
(numpy took six passes: two transposing copies, the segment products, the squares and two reductions; a
transposing copy and two passes over the copy after it). The row and column sums are compared with the
receivers' :func:`row_sums` / :func:`col_sums` for equality, so both sides add in one fixed order, without
fastmath (left to right along a row; eight interleaved partial sums down a column).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["panel_pass", "row_sums", "col_sums"]


def panel_pass(pt: np.ndarray, bounds: np.ndarray, wts: np.ndarray, rows: np.ndarray, segs: np.ndarray,
               rs: np.ndarray, sq: np.ndarray, cs: np.ndarray) -> None:
    """From ``pt`` (``w x m``, the transposed rows of P): ``rows = pt.T`` (``m x w``, F order), ``rs[i]`` /
    ``sq[i]`` the sum / sum of squares of row ``i``, ``cs[t]`` the sum of column ``t``, ``segs[2 s]`` /
    ``segs[2 s + 1]`` the plain / ``wts``-weighted column sums of the rows ``bounds[s]:bounds[s + 1]``: one
    pass over ``pt``, a few rows at a time (each chunk is read twice while it is in the first-level cache:
    down the rows for the copy and the row sums, along them for the column and segment sums)."""
    _panel_pass(pt, bounds, wts, rows, segs, rs, sq, cs, rows.ctypes.data != pt.ctypes.data)


#: rows of P per chunk of :func:`_panel_pass` (a multiple of 8: the column sums' interleaving)
_CHUNK = 16


@njit(cache=True, nogil=True)
def _panel_pass(pt: np.ndarray, bounds: np.ndarray, wts: np.ndarray, rows: np.ndarray, segs: np.ndarray,
                rs: np.ndarray, sq: np.ndarray, cs: np.ndarray, copy: bool) -> None:  # pragma: no cover
    """:func:`panel_pass`. Every sum is added in :func:`row_sums` / :func:`col_sums`' order (row sums left to
    right; column sums in eight interleaved partial sums, rows ``i % 8``, then the tail), the segment sums
    row by row (any order would do), all without reassociation: the loops run along whichever axis keeps
    each sum's order and lets the additions of different sums go side by side."""
    w, m = pt.shape
    m8 = m - m % 8
    part = np.zeros((8, w))
    tail = np.zeros(w)
    segs[:, :] = 0.0
    s = 0
    for c0 in range(0, m, _CHUNK):
        c1 = min(c0 + _CHUNK, m)
        for i in range(c0, c1):
            rs[i] = 0.0
            sq[i] = 0.0
        for t in range(w):  # down the rows: the copy, row sums and squares (side by side over the rows)
            for i in range(c0, c1):
                v = pt[t, i]
                if copy:
                    rows[i, t] = v
                rs[i] += v
                sq[i] += v * v
        for i in range(c0, c1):  # along the rows: column and segment sums (side by side over the columns)
            while i >= bounds[s + 1]:
                s += 1
            wt = wts[i]
            if i < m8:
                acc = part[i % 8]
            else:
                acc = tail
            for t in range(w):
                v = pt[t, i]
                acc[t] += v
                segs[2 * s, t] += v
                segs[2 * s + 1, t] += wt * v
    for t in range(w):
        cs[t] = (((part[0, t] + part[1, t]) + (part[2, t] + part[3, t]))
                 + ((part[4, t] + part[5, t]) + (part[6, t] + part[7, t]))) + tail[t]


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
    """``out[i]`` = the sum of row ``i`` of ``x``, left to right (:func:`panel_pass`'s order)."""
    m, w = x.shape
    out[:] = 0.0
    for t in range(w):
        for i in range(m):
            out[i] += x[i, t]


@njit(cache=True, nogil=True)
def col_sums(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[t]`` = the sum of column ``t`` of ``x`` (:func:`panel_pass`'s order)."""
    for t in range(x.shape[1]):
        out[t] = _col_sum(x, t)
