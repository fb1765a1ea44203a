"""Move a (possibly transposed) submatrix into another block-cyclic layout on the same grid (like PxGEMR2D).

Used when op(A)'s rows are not distributed like C's rows (a transpose, other block sizes or sources, other
offsets), and by PDSYMM to mirror a triangle. One ``Alltoallv`` on the grid communicator; every process
derives what it sends and receives from the index maps alone, so no index lists travel.

When the target layout is the source's (no transpose, both maps aligned: :func:`same_layout`), every process
already holds its piece: it is copied out of the local array, with no message. The test reads only the maps,
which every process has, so all take the same branch and the collective stays matched.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..descriptor import BlockCyclic1D
from ..matrix import DistributedMatrix

__all__ = ["redistribute", "same_layout", "exchange"]


def _relative(m: BlockCyclic1D) -> np.ndarray:
    """Position of each index inside its owner's part of the submatrix."""
    starts = np.array([m.local_start(p) for p in range(m.nprocs)], dtype=np.int64)
    return m.local - starts[m.owners] if m.n else np.zeros(0, dtype=np.int64)


def same_layout(src: DistributedMatrix, i0: int, j0: int, trans: bool, rows: BlockCyclic1D,
                cols: BlockCyclic1D) -> bool:
    """Return whether ``rows`` x ``cols`` lay out ``op(src[i0:, j0:])`` as ``src`` does (the same on every
    process: only the maps are read).

    Parameters
    ----------
    src, i0, j0, trans, rows, cols
        As for :func:`redistribute`.

    Returns
    -------
    bool
        True when there is no transpose and every index stays on its process at its relative position.
    """
    return (not trans and rows.aligned_with(src.row_map(i0, rows.n))
            and cols.aligned_with(src.col_map(j0, cols.n)))


def redistribute(src: DistributedMatrix, i0: int, j0: int, trans: bool, rows: BlockCyclic1D,
                 cols: BlockCyclic1D) -> np.ndarray:
    """Return this process's piece of ``op(src[i0:, j0:])`` laid out by ``rows`` x ``cols`` (collective).

    Parameters
    ----------
    src
        Source matrix.
    i0, j0
        Offset of the source submatrix; its shape is ``(rows.n, cols.n)``, or ``(cols.n, rows.n)`` if
        ``trans``.
    trans
        Whether the target holds the transpose of the source submatrix.
    rows, cols
        Target maps over process rows and process columns of ``src.grid``.

    Returns
    -------
    numpy.ndarray
        F-order ``(rows.count(myrow), cols.count(mycol))`` array in the target's local order, of ``src``'s
        dtype, never sharing memory with ``src.local`` (callers may work in it in place).
    """
    if same_layout(src, i0, j0, trans, rows, cols):
        g = src.grid
        return np.array(src.local[src.row_map(i0, rows.n).local_range(g.myrow),
                                  src.col_map(j0, cols.n).local_range(g.mycol)], order="F")
    return exchange(src, i0, j0, trans, rows, cols)


def exchange(src: DistributedMatrix, i0: int, j0: int, trans: bool, rows: BlockCyclic1D,
             cols: BlockCyclic1D) -> np.ndarray:
    """:func:`redistribute` by one ``Alltoallv``, whatever the layouts (the general path; collective).

    Parameters and return value as :func:`redistribute`'s.
    """
    g = src.grid
    p, q = (cols.n, rows.n) if trans else (rows.n, cols.n)
    srm, scm = src.row_map(i0, p), src.col_map(j0, q)
    # For each source index, the target process coordinate it goes to (along the target axis it lands on).
    if trans:
        src_row_dest, src_col_dest = cols.owners, rows.owners  # source rows become target columns
    else:
        src_row_dest, src_col_dest = rows.owners, cols.owners
    rel_rows, rel_cols = _relative(rows), _relative(cols)

    def selection(sr: int, sc: int, dr: int, dc: int) -> tuple[np.ndarray, np.ndarray]:
        i_s, j_s = srm.indices_on(sr), scm.indices_on(sc)
        if trans:
            return i_s[src_row_dest[i_s] == dc], j_s[src_col_dest[j_s] == dr]
        return i_s[src_row_dest[i_s] == dr], j_s[src_col_dest[j_s] == dc]

    from ._pack_kernels import gather_into, scatter_into  # numba: imported at the first use

    nranks = g.size
    send_sel = [selection(g.myrow, g.mycol, *g.coords(rank)) for rank in range(nranks)]
    recv_sel = [selection(*g.coords(rank), g.myrow, g.mycol) for rank in range(nranks)]
    scounts = [i.size * j.size for i, j in send_sel]
    rcounts = [i.size * j.size for i, j in recv_sel]
    dtype = src.local.dtype
    mpitype = MPI.FLOAT if dtype == np.float32 else MPI.DOUBLE
    sdispl = np.concatenate([[0], np.cumsum(scounts)[:-1]]).astype(int).tolist()
    rdispl = np.concatenate([[0], np.cumsum(rcounts)[:-1]]).astype(int).tolist()
    sbuf = np.empty(sum(scounts), dtype)
    for (isel, jsel), off, cnt in zip(send_sel, sdispl, scounts, strict=True):
        if cnt:
            gather_into(src.local, srm.local[isel], scm.local[jsel], sbuf[off:off + cnt])
    rbuf = np.empty(sum(rcounts), dtype)
    g.comm.Alltoallv([sbuf, scounts, sdispl, mpitype], [rbuf, rcounts, rdispl, mpitype])

    out = np.zeros((rows.count(g.myrow), cols.count(g.mycol)), dtype, order="F")
    for (isel, jsel), off, cnt in zip(recv_sel, rdispl, rcounts, strict=True):
        if cnt == 0:
            continue
        if trans:
            scatter_into(out, rel_rows[jsel], rel_cols[isel], rbuf[off:off + cnt], True)
        else:
            scatter_into(out, rel_rows[isel], rel_cols[jsel], rbuf[off:off + cnt], False)
    return out
