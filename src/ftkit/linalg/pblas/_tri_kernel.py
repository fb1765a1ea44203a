"""Compiled passes over one contiguous range of rows per column: making a triangle in place (one write per
excluded element, instead of the ``np.where`` copies, which read every element three times and write two whole
arrays), and PDGEADD's / PDTRADD's update ``beta * c + alpha * a`` of a trapezoid (:func:`axpby_rows`).

Each column keeps one contiguous range of rows (the local rows of a block-cyclic piece are in increasing
global order, so the rows on the kept side of the diagonal are contiguous); the rest is written with zeros,
never read, so NaN or Inf there never reach later arithmetic. The loops run over slices from index 0, as
:mod:`ftkit.linalg.checksums._kernels` explains (numba's wraparound otherwise stays in the loop).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["triangle_in_place", "triangle_from", "triangle_column", "triangle_column_from", "axpby_rows"]


@njit(cache=True, nogil=True)
def triangle_in_place(t: np.ndarray, keep: np.ndarray, diag: np.ndarray,
                      unit: bool) -> None:  # pragma: no cover - compiled
    """Zero the rows of column ``j`` of ``t`` (F order) outside ``keep[0, j]:keep[1, j]``; where ``unit``
    and ``diag[j] >= 0``, set ``t[diag[j], j] = 1``."""
    for j in range(t.shape[1]):
        triangle_column(t[:, j], keep[0, j], keep[1, j], diag[j], unit)


@njit(cache=True, nogil=True)
def triangle_from(src: np.ndarray, t: np.ndarray, keep: np.ndarray, diag: np.ndarray,
                  unit: bool) -> None:  # pragma: no cover - compiled
    """Make ``t`` (F order, ``src``'s shape) the triangle of ``src`` in one pass: each column gets ``src``'s
    rows ``keep[0, j]:keep[1, j]`` and what :func:`triangle_in_place` writes elsewhere (the same values as a
    copy followed by it, to the bit); ``src``'s excluded rows are not read and ``src`` is not modified."""
    for j in range(t.shape[1]):
        triangle_column_from(src[:, j], t[:, j], keep[0, j], keep[1, j], diag[j], unit)


@njit(cache=True, nogil=True)
def triangle_column_from(x: np.ndarray, col: np.ndarray, k0: int, k1: int, diag: int,
                         unit: bool) -> None:  # pragma: no cover - compiled
    """One column of :func:`triangle_from` (also called, inlined, by ``ft_pdtrsm``'s checksum kernel)."""
    if k1 > k0:
        xs = x[k0:k1]
        d = col[k0:k1]
        for i in range(k1 - k0):
            d[i] = xs[i]
    triangle_column(col, k0, k1, diag, unit)


@njit(cache=True, nogil=True)
def triangle_column(col: np.ndarray, k0: int, k1: int, diag: int, unit: bool) -> None:  # pragma: no cover
    """One column of :func:`triangle_in_place` (also called, inlined, by ``ft_pdtrmm``'s checksum kernel)."""
    # numba's on-disk cache of a caller in another file does not notice a change here: after editing this
    # function (or triangle_column_from), touch checksums/_tri_sums.py too (its cached kernels keep old code)
    nrow = col.shape[0]
    z = col[0:k0]
    for i in range(k0):
        z[i] = 0.0
    z = col[k1:nrow]
    for i in range(nrow - k1):
        z[i] = 0.0
    if unit and diag >= 0:
        col[diag] = 1.0


@njit(cache=True, nogil=True)
def axpby_rows(c: np.ndarray, a: np.ndarray, keep: np.ndarray, alpha: float,
               beta: float) -> None:  # pragma: no cover - compiled
    """``c[k0:k1, j] = beta * c[k0:k1, j] + alpha * a[k0:k1, j]`` for every column j, ``k0, k1 = keep[:, j]``,
    in one pass: each entry rounded as numpy's ``beta * c + alpha * a`` in the dtype of ``alpha`` and ``beta``
    (pass c's: no fused multiply-add, as numba compiles without fast-math); ``a`` is not read where ``alpha``
    is 0, ``c`` not where ``beta`` is 0 (NaN there are overwritten); the other rows are not touched."""
    for j in range(c.shape[1]):
        k0, k1 = keep[0, j], keep[1, j]
        if k1 <= k0:
            continue
        x, y, nr = c[:, j][k0:k1], a[:, j][k0:k1], k1 - k0
        if alpha == 0.0:
            for i in range(nr):
                x[i] = 0.0 if beta == 0.0 else beta * x[i]
        elif beta == 0.0:
            for i in range(nr):
                x[i] = alpha * y[i]
        else:
            for i in range(nr):
                x[i] = beta * x[i] + alpha * y[i]
