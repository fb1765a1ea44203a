"""Compiled packing and unpacking of :func:`~ftkit.linalg.pblas._redistribute.exchange`'s messages.

numpy's ``a[np.ix_(rows, cols)]`` gathers into a C-order temporary that ``ravel(order="F")`` and the
concatenation copy twice more, and the receiving side's ``out[np.ix_(...)] = block.T`` scatters with a
transposed read: about half of ``pdsyrk``'s CPU went into these moves. Here each element is read once and
written once, straight into the send buffer or the target piece; the transposed unpacking goes by tiles so
the strided reads stay in cache. Pure data moves: every value (NaN payloads, signed zeros) is copied as is.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["gather_into", "scatter_into"]

_TILE = 64


@njit(cache=True, nogil=True)
def gather_into(a: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                flat: np.ndarray) -> None:  # pragma: no cover - compiled
    """``flat[:] = a[np.ix_(rows, cols)].ravel(order="F")``, without the temporaries."""
    nr = rows.shape[0]
    for jj in range(cols.shape[0]):
        col = a[:, cols[jj]]
        out = flat[jj * nr:(jj + 1) * nr]
        for ii in range(nr):
            out[ii] = col[rows[ii]]


@njit(cache=True, nogil=True)
def scatter_into(out: np.ndarray, rows: np.ndarray, cols: np.ndarray, flat: np.ndarray,
                 trans: bool) -> None:  # pragma: no cover - compiled
    """Unpack ``block = flat.reshape((ni, nj), order="F")`` into ``out``: ``out[np.ix_(rows, cols)] = block``,
    or with ``trans`` ``out[np.ix_(rows, cols)] = block.T`` (then ``ni = len(cols)``, ``nj = len(rows)``)."""
    if not trans:
        nr = rows.shape[0]
        for jj in range(cols.shape[0]):
            col = out[:, cols[jj]]
            src = flat[jj * nr:(jj + 1) * nr]
            for ii in range(nr):
                col[rows[ii]] = src[ii]
        return
    ni, nj = cols.shape[0], rows.shape[0]
    for i0 in range(0, ni, _TILE):
        i1 = min(ni, i0 + _TILE)
        for j0 in range(0, nj, _TILE):
            j1 = min(nj, j0 + _TILE)
            for i in range(i0, i1):
                col = out[:, cols[i]]
                for j in range(j0, j1):
                    col[rows[j]] = flat[i + j * ni]
