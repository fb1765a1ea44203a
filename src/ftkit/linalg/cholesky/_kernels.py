"""Compiled passes of FT_PDPOTRF's panel checks: everything the sender of a panel needs from the solved
panel in one pass over it, and the receivers' sums in the sender's summation order.

:func:`panel_pass` reads the solved panel once (as ``P.T``, the layout the triangular solve leaves) and
writes its rows into the buffer that travels, with their row sums and sums of squares, the column sums and
the plain and index-weighted segment sums the checksums are carried with (numpy took six passes: two
transposing copies, the segment products, the squares and two reductions). No fastmath: the row and column
sums are compared with the receivers' :func:`row_sums` / :func:`col_sums` for equality, so both sides add
in one fixed order (left to right along a row, top to bottom down a column).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["panel_pass", "row_sums", "col_sums"]


@njit(cache=True, nogil=True)
def panel_pass(pt: np.ndarray, bounds: np.ndarray, wts: np.ndarray, rows: np.ndarray, segs: np.ndarray,
               rs: np.ndarray, sq: np.ndarray, cs: np.ndarray) -> None:  # pragma: no cover - compiled
    """From ``pt`` (``w x m``, the transposed rows of P): ``rows[i, t] = pt[t, i]``, ``rs[i]`` / ``sq[i]``
    the sum / sum of squares of row ``i``, ``cs[t]`` the sum of column ``t``, ``segs[2 s]`` / ``segs[2 s +
    1]`` the plain / ``wts``-weighted column sums of the rows ``bounds[s]:bounds[s + 1]``."""
    w, m = pt.shape
    cs[:] = 0.0
    segs[:, :] = 0.0
    s = 0
    for i in range(m):
        while s + 1 < bounds.shape[0] - 1 and i >= bounds[s + 1]:
            s += 1
        wi = wts[i]
        a = 0.0
        q = 0.0
        for t in range(w):
            v = pt[t, i]
            rows[i, t] = v
            a += v
            q += v * v
            cs[t] += v
            segs[2 * s, t] += v
            segs[2 * s + 1, t] += wi * v
        rs[i] = a
        sq[i] = q


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
    """``out[t]`` = the sum of column ``t`` of ``x``, top to bottom (:func:`panel_pass`'s order)."""
    m, w = x.shape
    for t in range(w):
        a = 0.0
        for i in range(m):
            a += x[i, t]
        out[t] = a
