"""The block sweep behind PDTRSM and PDTRMM: ``W := inv(T) @ W`` or ``W := T @ W`` for a triangular ``T``.

Both routines are brought to one form: ``T`` (``ka x ka``, lower or upper, never transposed) is applied from
the left to ``W`` (``ka x nw``), whose rows follow a block-cyclic map ``rows`` over the process rows. ``T`` is
materialized with its rows on ``rows`` and its columns on the same block partition over the process columns
(``tri_cols``), so block ``k`` of ``T``'s diagonal lines up with block ``k`` of ``W``'s rows. The triangle
``T`` excludes is zero there and a unit diagonal is one: the excluded triangle of the user's matrix is never
used in arithmetic (NaNs there do not leak), it is only moved. The triangle is made in place in the
redistributed piece (:func:`triangle_extent` gives each local column's kept rows, a compiled pass writes the
rest); ``ft_pdtrmm`` uses the same extent with a kernel that also takes the checksums.

The sweep visits the diagonal blocks in the order the recurrence needs (right-looking, as ScaLAPACK's):

- solve, lower (forward): ``W_k := inv(T_kk) W_k``, then ``W_{k+1:} -= T_{k+1:,k} W_k``;
- solve, upper (backward): ``W_k := inv(T_kk) W_k``, then ``W_{:k} -= T_{:k,k} W_k``;
- multiply, upper (forward): ``W_{:k} += T_{:k,k} W_k``, then ``W_k := T_kk W_k``;
- multiply, lower (backward): ``W_{k+1:} += T_{k+1:,k} W_k``, then ``W_k := T_kk W_k``.

Per block: the process row owning ``W_k`` solves (or keeps) it and broadcasts it down its process column;
the process column owning ``T``'s block column ``k`` broadcasts it along its process row; everyone updates
its local rows. Everything is local BLAS on F-order arrays of the matrices' dtype (float64 or float32).
"""

from __future__ import annotations

import numpy as np

from ..._wait import wait_requests
from .._blas import gemm_update, trsm_left
from ..descriptor import BlockCyclic1D, block_cyclic
from ..grid import ProcessGrid
from ..matrix import DistributedMatrix
from ._panel_buffers import pooled_buffer
from ._redistribute import Move, Pool, redistribute_many, same_layout

__all__ = ["tri_cols", "own_piece", "triangle_extent", "triangle_piece", "triangle_operand",
           "diagonal_blocks", "sweep"]


def tri_cols(rows: BlockCyclic1D, npcol: int) -> BlockCyclic1D:
    """Return the column map of ``T``: ``rows``'s block partition dealt over ``npcol`` process columns."""
    return block_cyclic(rows.n, rows.nb, rows.offset, rows.src % npcol, npcol)


def triangle_piece(A: DistributedMatrix, ia: int, ja: int, transpose: bool, rows: BlockCyclic1D,
                   cols: BlockCyclic1D, pool: Pool | None = None) -> np.ndarray:
    """Return this process's piece of ``op(A)(ia:, ja:)`` laid out by ``rows`` x ``cols``, to be made a
    triangle in place (collective on A's grid).

    Parameters
    ----------
    A, ia, ja, transpose, rows, cols
        As for :func:`triangle_operand`.
    pool
        If given, the piece is a buffer of the process-wide cache held by ``pool``
        (:func:`~._redistribute.redistribute_many`; the caller gives it back with
        :func:`~._panel_buffers.release_pool` after its last use): a fresh piece faults and zeroes every
        page again in every call, as system CPU time.

    Returns
    -------
    numpy.ndarray
        F-order array sharing no memory with ``A.local``.
    """
    t = redistribute_many([Move(A, ia, ja, transpose, rows, cols)], pool)[0]
    if not t.flags.f_contiguous or np.may_share_memory(t, A.local):  # made in place: never A's own memory
        t = np.array(t, order="F")
    return t


def own_piece(A: DistributedMatrix, ia: int, ja: int, transpose: bool, rows: BlockCyclic1D,
              cols: BlockCyclic1D, pool: Pool | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Where ``T``'s piece is A's own local piece (no transpose, the same layout: no message needed), return
    ``(A's local piece, an uninitialized F-order array of its shape)`` for a kernel that copies the triangle
    out of A in one pass; else ``None`` (:func:`triangle_piece` then moves it). The same on every process.

    Parameters
    ----------
    A, ia, ja, transpose, rows, cols
        As for :func:`triangle_operand`.
    pool
        If given, the array is a buffer of the process-wide cache held by ``pool``, under
        :func:`triangle_piece`'s key.

    Returns
    -------
    tuple of numpy.ndarray, or None
        A view of ``A.local`` (never written) and the destination, sharing no memory with it.
    """
    if not same_layout(A, ia, ja, transpose, rows, cols):
        return None
    g = A.grid
    src = A.local[A.row_map(ia, rows.n).local_range(g.myrow), A.col_map(ja, cols.n).local_range(g.mycol)]
    t = (np.empty(src.shape, src.dtype, order="F") if pool is None
         else pooled_buffer(pool, ("move", 0), src.shape, src.dtype))  # redistribute_many's key of one move
    return src, t


def triangle_extent(rows: BlockCyclic1D, cols: BlockCyclic1D, myrow: int, mycol: int,
                    lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """Return, for this process's piece of ``T`` (``rows`` x ``cols``), the rows each local column keeps.

    Parameters
    ----------
    rows, cols
        ``T``'s row and column maps.
    myrow, mycol
        This process's grid coordinates.
    lower
        Whether ``T`` is lower triangular (rows on or below the diagonal kept) or upper (on or above).

    Returns
    -------
    keep : numpy.ndarray
        ``(2, ncols)`` int64: local column ``j`` keeps the local rows ``keep[0, j]:keep[1, j]`` (the
        diagonal included).
    diag : numpy.ndarray
        ``(ncols,)`` int64: the local row of column ``j``'s diagonal element, or -1 if another process row
        holds it.
    """
    r, c = rows.indices_on(myrow), cols.indices_on(mycol)
    nloc = len(r)
    keep = np.empty((2, len(c)), np.int64)
    if lower:
        keep[0], keep[1] = np.searchsorted(r, c, side="left"), nloc
    else:
        keep[0], keep[1] = 0, np.searchsorted(r, c, side="right")
    pos = np.searchsorted(r, c)
    hit = pos < nloc
    hit[hit] = r[pos[hit]] == c[hit]
    diag = np.where(hit, pos, -1).astype(np.int64)
    return keep, diag


def triangle_operand(A: DistributedMatrix, ia: int, ja: int, transpose: bool, lower: bool, unit: bool,
                     rows: BlockCyclic1D, cols: BlockCyclic1D, pool: Pool | None = None) -> np.ndarray:
    """Return this process's piece of ``T = tri(op(A)(ia:, ja:))`` laid out by ``rows`` x ``cols``.

    ``op`` transposes when ``transpose``; ``lower`` names ``T``'s triangle (after the transpose). The other
    triangle is written with zeros, never read (NaN or Inf there never reach the arithmetic) and, if
    ``unit``, the diagonal with ones (the user's diagonal is not read). Collective on A's grid.

    Parameters
    ----------
    A
        The matrix holding ``T``'s triangle; its memory is not modified.
    ia, ja
        Offset of the submatrix of A.
    transpose
        Whether ``T`` is made from the transposed submatrix.
    lower
        Whether ``T`` is lower triangular.
    unit
        Whether ``T``'s diagonal is taken as ones.
    rows, cols
        ``T``'s row and column maps (:func:`tri_cols`).
    pool
        As for :func:`triangle_piece`.

    Returns
    -------
    numpy.ndarray
        F-order ``(rows.count(myrow), cols.count(mycol))`` array.
    """
    from ._tri_kernel import triangle_from, triangle_in_place  # numba: imported at the first use

    g = A.grid
    keep, diag = triangle_extent(rows, cols, g.myrow, g.mycol, lower)
    own = own_piece(A, ia, ja, transpose, rows, cols, pool)
    if own is not None:  # one pass reading only the kept rows (a layout move's copy and the triangle's: two)
        triangle_from(*own, keep, diag, unit)
        return own[1]
    t = triangle_piece(A, ia, ja, transpose, rows, cols, pool)
    triangle_in_place(t, keep, diag, unit)
    return t


def diagonal_blocks(rows: BlockCyclic1D) -> list[tuple[int, int]]:
    """Return the ``[s, e)`` ranges of ``rows``'s blocks (the first may be partial, as its offset cuts it)."""
    out, s = [], 0
    while s < rows.n:
        e = min(rows.n, s + rows.nb - (rows.offset + s) % rows.nb)
        out.append((s, e))
        s = e
    return out


def _bcast(comm, root: int, shape: tuple[int, int], dtype: np.dtype, data: np.ndarray | None) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Broadcast an F-order ``shape`` array from ``root`` of ``comm`` (``data`` there); return it."""
    flat = np.empty(shape[0] * shape[1], dtype)
    out = flat.reshape(shape, order="F")
    if comm.Get_rank() == root and data is not None:
        out[...] = data
    if comm.Get_size() > 1 and flat.size:  # waited by sleeping: a blocking Bcast busy-polls on the ranks
        wait_requests([comm.Ibcast(flat, root=root)])  # that wait, taking CPU from the one they wait for
    return out


def sweep(grid: ProcessGrid, t: np.ndarray, w: np.ndarray, rows: BlockCyclic1D, cols: BlockCyclic1D,
          lower: bool, solve: bool) -> None:
    """Overwrite ``w`` with ``inv(T) @ w`` (``solve``) or ``T @ w`` (collective on ``grid``).

    Parameters
    ----------
    grid
        The process grid.
    t
        This process's piece of ``T`` (from :func:`triangle_operand`, maps ``rows`` x ``cols``).
    w
        This process's rows (by ``rows``) of ``W``, any columns; updated in place (a view is fine).
    rows, cols
        ``T``'s row map (over process rows, also ``W``'s) and column map (:func:`tri_cols`).
    lower
        Whether ``T`` is lower triangular.
    solve
        Solve (``True``) or multiply.
    """
    myrow, mycol = grid.myrow, grid.mycol
    blocks = diagonal_blocks(rows)
    forward = lower == solve  # solve-lower and multiply-upper go down the diagonal
    if not forward:
        blocks.reverse()
    nloc, ncols = w.shape
    for s, e in blocks:
        pk, qk = int(rows.owners[s]), int(cols.owners[s])
        mine = rows.range_on(myrow, s, e)  # empty unless myrow == pk
        rest = rows.range_on(myrow, e, rows.n) if lower else rows.range_on(myrow, 0, s)
        panel = _bcast(grid.row_comm, qk, (nloc, e - s), t.dtype,
                       t[:, cols.range_on(mycol, s, e)] if mycol == qk else None)
        if solve and myrow == pk:
            trsm_left(lower, panel[mine], w[mine])
        wk = _bcast(grid.col_comm, pk, (e - s, ncols), w.dtype, w[mine] if myrow == pk else None)
        if rest.stop > rest.start and ncols:
            gemm_update(-1.0 if solve else 1.0, panel[rest], wk, w[rest])
        if not solve and myrow == pk and ncols:
            gemm_update(1.0, panel[mine], wk, w[mine], 0.0)
