"""Move a (possibly transposed) submatrix into another block-cyclic layout on the same grid (like PxGEMR2D).

Used when op(A)'s rows are not distributed like C's rows (a transpose, other block sizes or sources, other
offsets), and by PDSYMM to mirror a triangle. One message round on the grid communicator (an ``Alltoallv``
by non-blocking sends and receives: a process that is early waits sleeping, not spinning in a blocking
collective, and each piece is on its way as soon as it is packed); every process derives what it sends and
receives from the index maps alone, so no index lists travel. Several moves of one call (PDSYR2K's two
transposed operands) go in one round (:func:`redistribute_many`), not one per operand.

The message buffers come from the process-wide buffer cache (:mod:`._panel_buffers`) and go back to it
once every transfer is complete; the pieces themselves too when the caller passes a ``pool`` (and hands it
back with :func:`~._panel_buffers.release_pool` when done with them): a redistribution of fresh arrays
faulted and zeroed every page of them again in every call, as system CPU time.

When the target layout is the source's (no transpose, both maps aligned: :func:`same_layout`), every process
already holds its piece: it is copied out of the local array, with no message. The test reads only the maps,
which every process has, so all take the same branch and the collective stays matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
from mpi4py import MPI

from ..._wait import wait_requests
from ..descriptor import BlockCyclic1D
from ..matrix import DistributedMatrix
from ._panel_buffers import pooled_buffer, release_pool

#: Pool of buffers a caller lends a redistribution for its pieces (see :func:`redistribute_many`).
Pool = dict[object, np.ndarray]

#: Message tag of the moves' pieces on the grid communicator.
TAG_MOVE = 603

__all__ = ["Move", "redistribute", "redistribute_many", "same_layout", "exchange", "exchange_many",
           "displacements"]


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


@dataclass(frozen=True)
class Move:
    """One redistribution: ``op(src[i0:, j0:])`` laid out by ``rows`` x ``cols`` (as :func:`redistribute`)."""

    src: DistributedMatrix
    i0: int
    j0: int
    trans: bool
    rows: BlockCyclic1D
    cols: BlockCyclic1D


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
    return redistribute_many([Move(src, i0, j0, trans, rows, cols)])[0]


def redistribute_many(moves: Sequence[Move], pool: Pool | None = None) -> list[np.ndarray]:
    """Do every move of ``moves`` (sources on one grid): :func:`redistribute` of each, with the moves that
    need messages in one round per dtype (collective; every process passes the same moves).

    Parameters
    ----------
    moves
        The redistributions, in any order.
    pool
        If given, the pieces are put in buffers of the process-wide cache held by ``pool`` (keys
        ``("move", i)``), which the caller gives back with :func:`~._panel_buffers.release_pool` once it is
        done with them; otherwise they are fresh arrays.

    Returns
    -------
    list of numpy.ndarray
        Each move's piece, as :func:`redistribute` returns it, in the order of ``moves``.
    """
    out: list[np.ndarray | None] = [None] * len(moves)
    by_dtype: dict[np.dtype, list[int]] = {}
    for i, mv in enumerate(moves):
        if same_layout(mv.src, mv.i0, mv.j0, mv.trans, mv.rows, mv.cols):
            g = mv.src.grid
            local = mv.src.local[mv.src.row_map(mv.i0, mv.rows.n).local_range(g.myrow),
                                 mv.src.col_map(mv.j0, mv.cols.n).local_range(g.mycol)]
            if pool is None:
                out[i] = np.array(local, order="F")
            else:
                piece = pooled_buffer(pool, ("move", i), local.shape, local.dtype)
                piece[...] = local
                out[i] = piece
        else:
            by_dtype.setdefault(mv.src.local.dtype, []).append(i)
    for _, idx in sorted(by_dtype.items(), key=lambda kv: kv[0].str):  # the same order on every process
        into = None if pool is None else [pooled_buffer(pool, ("move", i), _target_shape(moves[i]),
                                                        moves[i].src.local.dtype) for i in idx]
        for i, piece in zip(idx, exchange_many([moves[i] for i in idx], into), strict=True):
            out[i] = piece
    return [piece for piece in out if piece is not None]


def displacements(counts: list[int]) -> list[int]:
    """The displacements of a vector collective's pieces of ``counts`` elements, packed in order."""
    return list(accumulate((int(c) for c in counts[:-1]), initial=0))  # no numpy: called per panel


def _target_shape(mv: Move) -> tuple[int, int]:
    """This process's piece shape of ``mv`` (rows and columns of the target it owns)."""
    g = mv.src.grid
    return mv.rows.count(g.myrow), mv.cols.count(g.mycol)


def exchange(src: DistributedMatrix, i0: int, j0: int, trans: bool, rows: BlockCyclic1D,
             cols: BlockCyclic1D) -> np.ndarray:
    """:func:`redistribute` by one message round, whatever the layouts (the general path; collective).

    Parameters and return value as :func:`redistribute`'s.
    """
    return exchange_many([Move(src, i0, j0, trans, rows, cols)])[0]


Selection = tuple[np.ndarray, np.ndarray]


class _Plan:
    """What this process sends to and receives from every rank for one move (from the maps alone)."""

    def __init__(self, mv: Move) -> None:
        g = mv.src.grid
        rows, cols, trans = mv.rows, mv.cols, mv.trans
        p, q = (cols.n, rows.n) if trans else (rows.n, cols.n)
        self.srm, self.scm = mv.src.row_map(mv.i0, p), mv.src.col_map(mv.j0, q)
        # For each source index, the target process coordinate it goes to (along the target axis it lands on).
        self.row_dest, self.col_dest = (cols.owners, rows.owners) if trans else (rows.owners, cols.owners)
        self.trans = trans
        self.rel_rows, self.rel_cols = _relative(rows), _relative(cols)
        self.shape = (rows.count(g.myrow), cols.count(g.mycol))
        self.sends = [self._selection(g.myrow, g.mycol, *g.coords(r)) for r in range(g.size)]
        self.recvs = [self._selection(*g.coords(r), g.myrow, g.mycol) for r in range(g.size)]

    def _selection(self, sr: int, sc: int, dr: int, dc: int) -> Selection:
        i_s, j_s = self.srm.indices_on(sr), self.scm.indices_on(sc)
        if self.trans:
            return i_s[self.row_dest[i_s] == dc], j_s[self.col_dest[j_s] == dr]
        return i_s[self.row_dest[i_s] == dr], j_s[self.col_dest[j_s] == dc]


def exchange_many(moves: Sequence[Move], into: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """:func:`exchange` of every move of ``moves`` in one message round (collective).

    Parameters
    ----------
    moves
        Redistributions of sources on one grid, all of one dtype; every process passes the same moves.
    into
        If given, one F-order array per move, of its piece's shape and the dtype, that the piece is written
        into (every element) and returned as; otherwise fresh arrays.

    Returns
    -------
    list of numpy.ndarray
        Each move's piece, as :func:`redistribute` returns it, in the order of ``moves``.

    Raises
    ------
    ValueError
        If the sources differ in dtype.
    """
    if not moves:
        return []
    dtype = moves[0].src.local.dtype
    if any(mv.src.local.dtype != dtype for mv in moves):
        raise ValueError("exchange_many: the sources differ in dtype")
    g = moves[0].src.grid
    plans = [_Plan(mv) for mv in moves]
    # Rank r's message: the moves' pieces for r one after the other.
    scounts = [sum(pl.sends[r][0].size * pl.sends[r][1].size for pl in plans) for r in range(g.size)]
    rcounts = [sum(pl.recvs[r][0].size * pl.recvs[r][1].size for pl in plans) for r in range(g.size)]
    mpitype = MPI.FLOAT if dtype == np.float32 else MPI.DOUBLE
    rdispl = displacements(rcounts)

    from ._pack_kernels import gather_into, scatter_into  # numba: imported at the first use

    comm, me = g.comm, g.comm.Get_rank()
    messages: Pool = {}
    rbuf = pooled_buffer(messages, "recv", (sum(rcounts),), dtype)
    requests = [comm.Irecv([rbuf[rdispl[r]:rdispl[r] + rcounts[r]], mpitype], source=r, tag=TAG_MOVE)
                for r in range(g.size) if r != me and rcounts[r]]
    sbuf = pooled_buffer(messages, "send", (sum(scounts) - scounts[me],), dtype)
    off = 0
    for r in [*(r for r in range(g.size) if r != me), me]:  # our own piece last, straight into rbuf
        piece = rbuf[rdispl[me]:rdispl[me] + rcounts[me]] if r == me else sbuf[off:off + scounts[r]]
        at = 0
        for mv, pl in zip(moves, plans, strict=True):
            isel, jsel = pl.sends[r]
            cnt = isel.size * jsel.size
            if cnt:
                gather_into(mv.src.local, pl.srm.local[isel], pl.scm.local[jsel], piece[at:at + cnt])
            at += cnt
        if r != me and scounts[r]:
            requests.append(comm.Isend([piece, mpitype], dest=r, tag=TAG_MOVE))
            off += scounts[r]
    if into is None:
        outs = [np.zeros(pl.shape, dtype, order="F") for pl in plans]
    else:
        outs = list(into)
        if [o.shape for o in outs] != [pl.shape for pl in plans] or any(o.dtype != dtype for o in outs):
            raise ValueError("exchange_many: an array of `into` is not shaped like its piece")

    def unpack(r: int) -> None:
        at = rdispl[r]
        for out, pl in zip(outs, plans, strict=True):
            isel, jsel = pl.recvs[r]
            cnt = isel.size * jsel.size
            if cnt == 0:
                continue
            if pl.trans:
                scatter_into(out, pl.rel_rows[jsel], pl.rel_cols[isel], rbuf[at:at + cnt], True)
            else:
                scatter_into(out, pl.rel_rows[isel], pl.rel_cols[jsel], rbuf[at:at + cnt], False)
            at += cnt

    unpack(me)  # while the others' pieces travel
    wait_requests(requests, what="redistribution")
    for r in range(g.size):
        if r != me:
            unpack(r)
    release_pool(messages)  # every transfer is complete (not after an exception: a receive may be pending)
    return outs
