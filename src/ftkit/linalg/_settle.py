"""The arithmetic of :func:`~ftkit.linalg.resilient.resilient_pdgemm`'s *settle up* phase.

A dead process's piece of C is cut into bands of whole ``mb x nb`` blocks dealt over the survivors
(:func:`plan_tiles`), each band is recomputed from stored operands and every block of it verified with the
ABFT checksums and rigorous bound of :mod:`ftkit.linalg.abft` (:func:`recompute_verified`), and the whole C
is moved onto the survivors' grid (:func:`redistribute_result`). Everything here but the last function is
local and pure arithmetic on data every survivor agrees on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ABFTError
from ..failure import guarded
from . import abft
from .descriptor import BlockCyclic1D, indxg2l, indxg2p, indxl2g
from .grid import ProcessGrid
from .matrix import DistributedMatrix

__all__ = ["Tile", "plan_tiles", "global_indices", "recompute_verified", "redistribute_result"]


@dataclass(frozen=True)
class Tile:
    """One piece of a dead process's C given to a survivor.

    ``rows`` / ``cols`` are slices relative to the dead process's piece of C's submatrix; both ``None`` for
    the entry that carries the dead process's whole stored C (its entries outside the submatrix).
    """

    dead: int
    holder: int
    rows: slice | None
    cols: slice | None


def plan_tiles(
    grid: ProcessGrid,
    dead: list[int],
    survivors: list[int],
    crows: BlockCyclic1D,
    ccols: BlockCyclic1D,
    mb: int,
    nb: int,
) -> tuple[list[Tile], dict[int, dict[int, int]]]:
    """Cut each dead process's submatrix piece into bands of whole mb x nb blocks, one band per survivor.

    The piece is cut along its longer block dimension into ``min(#survivors, #blocks)`` bands of nearly equal
    block counts, dealt round-robin (continuing over dead processes) so the recomputation is spread over the
    survivors, not all on one, and each survivor does one large GEMM instead of many small ones.

    Returns the tiles and ``{dead: {holder: blocks}}``. The plan is pure arithmetic on agreed data, so every
    survivor computes the same one.
    """
    tiles: list[Tile] = []
    reassigned: dict[int, dict[int, int]] = {}
    turn = 0
    for dr in dead:
        pd, qd = grid.coords(dr)
        tiles.append(Tile(dr, survivors[dr % len(survivors)], None, None))
        nr, nc = crows.count(pd), ccols.count(qd)
        rblocks, cblocks = -(-nr // mb), -(-nc // nb)
        if rblocks == 0 or cblocks == 0:
            continue
        by_cols = cblocks >= rblocks
        nblocks, size, length = (cblocks, nb, nc) if by_cols else (rblocks, mb, nr)
        nbands = min(len(survivors), nblocks)
        for i in range(nbands):
            lo = i * nblocks // nbands * size
            hi = min(length, (i + 1) * nblocks // nbands * size)
            band = slice(lo, hi)
            holder = survivors[turn % len(survivors)]
            turn += 1
            rsl, csl = (slice(0, nr), band) if by_cols else (band, slice(0, nc))
            tiles.append(Tile(dr, holder, rsl, csl))
            reassigned.setdefault(dr, {}).setdefault(holder, 0)
            reassigned[dr][holder] += tile_blocks(rsl, csl, mb, nb)
    return tiles, reassigned


def tile_blocks(rows: slice, cols: slice, mb: int, nb: int) -> int:
    """Number of ``mb x nb`` blocks (edge blocks may be smaller) of a tile."""
    return -(-(rows.stop - rows.start) // mb) * -(-(cols.stop - cols.start) // nb)


def global_indices(nb: int, p: int, src: int, nprocs: int, count: int) -> np.ndarray:
    """Global indices of the first ``count`` local indices of process ``p`` (block size ``nb``)."""
    return indxl2g(np.arange(count, dtype=np.int64), nb, p, src, nprocs)


def recompute_verified(
    alpha: float, a_rows: np.ndarray, b_cols: np.ndarray, c0: np.ndarray, mb: int, nb: int
) -> tuple[np.ndarray, int, int]:
    """Return ``c0 + alpha * a_rows @ b_cols``, its number of verified and of unchecked ``mb x nb`` blocks.

    Every block is verified by :func:`ftkit.linalg.abft.check_product` (plain and weighted block checksums,
    rigorous bound: a correct product is never flagged). A block whose checksums or bound are not finite
    (``Inf``/``NaN`` or overflow in the inputs) cannot be verified: it is counted as unchecked, never as
    verified. A flagged block makes the whole tile be recomputed once; a second flag raises.

    Raises
    ------
    ABFTError
        If a block fails its checksum twice (the report is the last verification's largest ratio).
    """
    for _ in range(2):
        tile = np.asfortranarray(c0 + alpha * (a_rows @ b_cols))
        v = abft.check_product(a_rows, b_cols, tile, alpha=alpha, beta=1.0, c0=c0, bs=(mb, nb))
        if not v.flagged.any():
            unchecked = int(v.unchecked.sum())
            return tile, int(v.flagged.size) - unchecked, unchecked
    with np.errstate(invalid="ignore", divide="ignore"):
        worst = float(np.nanmax(np.abs(v.res_ee) / v.thr))
    raise ABFTError(f"a recomputed block failed its checksum twice (residual {worst:.3g} x the bound)")


def redistribute_result(
    pieces: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]], grid: ProcessGrid, C: DistributedMatrix
) -> DistributedMatrix:
    """Move pieces ``(priority, global rows, global cols, data)`` into a new matrix like C on ``grid``.

    Collective on ``grid`` (one ``alltoall``). Lower priorities are written first, so a recomputed tile (2)
    overwrites a dead process's stored C (1).
    """
    d = C.desc
    result = DistributedMatrix.zeros(
        grid, d.m, d.n, mb=d.mb, nb=d.nb, rsrc=d.rsrc % grid.nprow, csrc=d.csrc % grid.npcol
    )
    rd = result.desc
    outgoing: list[list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in range(grid.size)]
    for prio, rows, cols, data in pieces:
        rown = indxg2p(rows, rd.mb, rd.rsrc, grid.nprow)
        coln = indxg2p(cols, rd.nb, rd.csrc, grid.npcol)
        for r in range(grid.size):
            p, q = grid.coords(r)
            ri, ci = np.flatnonzero(rown == p), np.flatnonzero(coln == q)
            if ri.size and ci.size:
                outgoing[r].append((prio, rows[ri], cols[ci], np.ascontiguousarray(data[np.ix_(ri, ci)])))
    incoming = guarded(grid.comm, "the redistribution of the result", lambda: grid.comm.alltoall(outgoing))
    received = sorted((piece for batch in incoming for piece in batch), key=lambda x: x[0])
    for _, rows, cols, data in received:
        lr = indxg2l(rows, rd.mb, grid.nprow)
        lc = indxg2l(cols, rd.nb, grid.npcol)
        result.local[np.ix_(lr, lc)] = data
    return result
