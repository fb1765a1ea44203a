"""The *settle up* phase of :func:`~ftkit.linalg.resilient.resilient_call` (:func:`settle_up`).

A dead process's piece of C is cut into bands of whole ``mb x nb`` blocks dealt over the survivors
(:func:`plan_tiles`), each band is recomputed from stored operands and every block of it verified with the
ABFT checksums and rigorous bound of :mod:`ftkit.linalg.checksums` (:func:`recompute_verified`), and the whole
C is moved onto the survivors' grid (:func:`redistribute_result`). Everything here but the last function is
local and pure arithmetic on data every survivor agrees on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ...errors import ABFTError, FtkitError, ProcessFailure
from ...failure import agree_on_dead, failed_ranks, guarded, revoke
from ...failure.ulfm import agree_flag
from .. import checksums
from ..descriptor import BlockCyclic1D, indxg2l, indxg2p, indxl2g
from ..grid import ProcessGrid
from ..matrix import DistributedMatrix
from ..pblas.gemm import _scale
from ._call_state import PhaseTimer, ResilientCall, ResilientResult, at_stage, hold_decision
from ._failure_exchange import FailureAwareExchange
from .protected import remove_spares

__all__ = ["Tile", "plan_tiles", "prefetch", "settle_up", "discard_inputs", "global_indices",
           "recompute_verified", "redistribute_result"]


_MOVED, _VERIFIED = 1, 2  # bits of the final agreement (0 after a failure during it: "not moved")


def failed_ranks_quietly(comm: MPI.Comm) -> set[int]:
    """The failed ranks of ``comm`` MPI reports (acknowledged), or none if it cannot say (local)."""
    try:
        return failed_ranks(comm)
    except MPI.Exception:
        return set()


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

    Every block is verified by :func:`ftkit.linalg.checksums.check_product` (plain and weighted block
    checksums, rigorous bound: a correct product is never flagged). A block whose checksums or bound are not
    finite (``Inf``/``NaN`` or overflow in the inputs) cannot be verified: it is counted as unchecked, never
    as verified. A flagged block makes the whole tile be recomputed once; a second flag raises.

    Raises
    ------
    ABFTError
        If a block fails its checksum twice (the report is the last verification's largest ratio).
    """
    for _ in range(2):
        tile = np.asfortranarray(c0 + alpha * (a_rows @ b_cols))
        v = checksums.check_product(a_rows, b_cols, tile, alpha=alpha, beta=1.0, c0=c0, bs=(mb, nb))
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
        grid, d.m, d.n, mb=d.mb, nb=d.nb, rsrc=d.rsrc % grid.nprow, csrc=d.csrc % grid.npcol, dtype=C.dtype
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


def prefetch(call: ResilientCall, exchange: FailureAwareExchange, tiles: list[Tile]) -> None:
    """Read every stored piece this process needs for its tiles (any failure lands in ``unrecoverable``)."""
    grid, me = call.grid, call.det.rank
    for t in tiles:
        if t.holder != me:
            continue
        if call.save_c:
            exchange.stored("c", t.dead)
        if t.rows is None or call.ops is None:
            continue
        pd, qd = grid.coords(t.dead)
        for q in range(grid.npcol):
            if grid.rank_of(pd, q) != me:
                exchange.stored("a", grid.rank_of(pd, q))
        for p in range(grid.nprow):
            if grid.rank_of(p, qd) != me:
                exchange.stored("b", grid.rank_of(p, qd))


def settle_up(
    call: ResilientCall,
    exchange: FailureAwareExchange,
    dead: frozenset[int],
    new_comm: MPI.Intracomm,
    state: np.ndarray,
    tiles: list[Tile],
    reassigned: dict[int, dict[int, int]],
    tick: PhaseTimer,
) -> ResilientResult:
    """Phase 4: recompute and verify this process's tiles of the dead processes' C, check with all
    survivors that every dead block was verified, and move the whole C onto the survivors' grid.

    Raises
    ------
    ABFTError
        On every survivor alike, if some block failed its checksum twice or was not recomputed (a survivor
        whose own code raised while recomputing raises that error instead, after the agreement).
    ProcessFailure
        On every survivor alike, naming the same ranks, if a further failure (or a survivor's own error)
        strikes while the result moves (the survivors' communicator is revoked, nobody hangs).
    """
    C, me = call.C, call.det.rank
    pieces: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = [
        (0, C.global_rows(), C.global_cols(), C.local)
    ]
    verified = unchecked = due = 0
    failure = ""
    own: Exception | None = None
    try:
        at_stage("recompute")
        for t in tiles:
            if t.holder != me:
                continue
            piece = _recompute_tile(call, exchange, t)
            if piece is not None:
                pieces.append(piece[0])
                verified, unchecked, due = verified + piece[1], unchecked + piece[2], due - piece[3]
            if t.rows is not None and t.cols is not None and call.ops is not None:
                due += tile_blocks(t.rows, t.cols, C.desc.mb, C.desc.nb)
    except ABFTError as exc:
        failure = str(exc)
    except Exception as exc:  # noqa: BLE001 - an error of our own: nobody may wait for us in the Agree below
        failure, own = f"rank {me} could not recompute its tiles ({type(exc).__name__}: {exc})", exc
    if not failure and verified + unchecked != due:
        failure = f"rank {me} verified {verified + unchecked} of its {due} recomputed blocks"
    tick("recompute_s")
    at_stage("redistribute")
    moved: tuple[ProcessGrid, DistributedMatrix] | None = None
    why = ""
    try:
        new_grid = ProcessGrid.square(new_comm)
        moved = new_grid, redistribute_result(pieces, new_grid, C)
    except Exception as exc:  # noqa: BLE001 - a failure, or an error of our own: revoke, then agree below
        revoke(new_comm)  # a survivor still inside the redistribution must not wait for this one
        why = f" ({type(exc).__name__}: {exc})"
    at_stage("settle_agree")
    # The result check every survivor takes part in: one ULFM Agree, so every survivor leaves with the same
    # decision. No result unless every dead block was verified and the whole result reached the survivors'
    # grid; a failure during it counts as "no". The last operation of the call then holds everyone until
    # every survivor has that decision: a survivor that returns and exits right away can never look like a
    # failure during the agreement to one the decision has not reached yet (hold_decision).
    decided = agree_flag(new_comm, _MOVED * (moved is not None) | _VERIFIED * (not failure),
                         clear_on_failure=True)  # fmt: skip
    hold_decision(new_comm, decided)
    tick("redistribute_s")
    # Success or not, every survivor holds the decision and reads no stored piece any more.
    discard_inputs(call, dead, first=new_comm.Get_rank() == 0)
    if not decided & _MOVED:
        survivors = [r for r in range(call.grid.size) if r not in dead]
        lost = agree_on_dead(new_comm, failed_ranks_quietly(new_comm))
        gone = sorted(set(dead) | {survivors[r] for r in lost})
        raise ProcessFailure(
            f"resilient_{call.routine.lower()}: ranks {gone} failed (or a survivor hit an error) while the "
            f"result was moved onto the survivors' grid{why}; the product was not returned: continue on the "
            f"survivors and multiply again, or restart from a checkpoint",
            gone,
        )
    if own is not None:
        raise own
    if not decided & _VERIFIED:
        raise ABFTError(
            f"resilient_{call.routine.lower()}: the recomputed blocks of dead ranks {sorted(dead)} were not "
            f"all verified (a block failed its checksum twice, or a survivor hit an error while recomputing)"
            f"{': ' + failure if failure else ''}; the product was not returned"
        )
    assert moved is not None
    new_grid, result = moved
    comm: MPI.Intracomm = new_grid.comm  # type: ignore[assignment]
    return ResilientResult(result, new_grid, comm, tuple(sorted(dead)), state, reassigned, verified,
                           exchange.storage_reads, call.det.timeout, unchecked)  # fmt: skip


def discard_inputs(call: ResilientCall, dead: Iterable[int], *, first: bool) -> None:
    """Remove the call's files after a failure, once every survivor holds the decision that ends the call
    (it returns or fails alike everywhere; nobody reads a stored piece after it): the ``first`` survivor
    (local) removes the call's directory, the dead processes' files and a killed writer's temporary file
    with it, and the ``dead`` processes' pieces of operands protected beforehand (a survivor's
    :meth:`~.protected.ProtectedOperands.release` removes only its own; the grid the handle was made for can
    no longer compute, so nobody reads them again). An error doing so is dropped: the call's result, or its
    own error, is what the caller gets."""
    if not first:
        return
    with contextlib.suppress(OSError, FtkitError):
        if call.saved:
            call.where.remove(call.prefix)
        for side in "ab":
            if call.prefixes[side] != call.prefix:
                for r in dead:
                    call.where.remove(f"{call.prefixes[side]}/{side}.{r}")
        if call.spares is not None:
            for r in dead:
                remove_spares(call.where, call.spares, r)


def _kept_box(mask: np.ndarray, mb: int, nb: int) -> tuple[slice, slice]:
    """The smallest box of whole ``mb x nb`` blocks of a tile (blocks counted from its first row and column)
    holding every entry of ``mask`` (the entries the routine updates); empty if there is none."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return slice(0, 0), slice(0, 0)
    r1 = min(mask.shape[0], -(-(int(rows[-1]) + 1) // mb) * mb)
    c1 = min(mask.shape[1], -(-(int(cols[-1]) + 1) // nb) * nb)
    return slice(int(rows[0]) // mb * mb, r1), slice(int(cols[0]) // nb * nb, c1)


def _recompute_tile(
    call: ResilientCall, exchange: FailureAwareExchange, t: Tile
) -> tuple[tuple[int, np.ndarray, np.ndarray, np.ndarray], int, int, int] | None:
    """Return ``(piece, verified, unchecked, skipped)`` for tile ``t`` (``None`` if it carries nothing).

    A tile without slices carries the dead process's whole stored C (priority 1); a tile with slices is
    recomputed from the stored operands and verified (priority 2, it overwrites the stored C). With a
    ``keep`` mask (a rank-k update's triangle) only the box of the tile's blocks holding updated entries is
    recomputed; the ``skipped`` blocks outside it keep their stored values, bit for bit, and need no check.
    """
    C, grid, me = call.C, call.grid, call.det.rank
    d = C.desc
    pd, qd = grid.coords(t.dead)
    rows_g = global_indices(d.mb, pd, d.rsrc, grid.nprow, call.shapes[("c", t.dead)][0])
    cols_g = global_indices(d.nb, qd, d.csrc, grid.npcol, call.shapes[("c", t.dead)][1])
    if t.rows is None or t.cols is None:
        return ((1, rows_g, cols_g, exchange.stored("c", t.dead)), 0, 0, 0) if call.save_c else None
    r0, c0 = call.crows.local_start(pd), call.ccols.local_start(qd)
    lr = slice(r0 + t.rows.start, r0 + t.rows.stop)
    lc = slice(c0 + t.cols.start, c0 + t.cols.stop)
    entry = exchange.stored("c", t.dead)[lr, lc] if call.save_c else None
    if entry is not None:  # stored as it was on entry: apply beta here
        tile = np.array(entry, order="F")
        _scale(tile, call.beta)
    else:  # beta == 0 over all of C: nothing of the old C survives
        tile = np.zeros((lr.stop - lr.start, lc.stop - lc.start), order="F")
    mask = call.keep(rows_g[lr] - call.ic, cols_g[lc] - call.jc) if call.keep is not None else None
    box = (slice(0, tile.shape[0]), slice(0, tile.shape[1]))
    if mask is not None and entry is not None:
        box = _kept_box(mask, d.mb, d.nb)
    rows = slice(t.rows.start + box[0].start, t.rows.start + box[0].stop)
    cols = slice(t.cols.start + box[1].start, t.cols.start + box[1].stop)
    skipped = tile_blocks(t.rows, t.cols, d.mb, d.nb) - tile_blocks(rows, cols, d.mb, d.nb)
    verified = unchecked = 0
    ops = call.ops
    if ops is not None and rows.stop > rows.start and cols.stop > cols.start:
        a_rows = np.empty((rows.stop - rows.start, call.k), order="F")
        for q in range(grid.npcol):
            owner = grid.rank_of(pd, q)
            a_piece = ops.a if owner == me else exchange.stored("a", owner)
            a_rows[:, ops.ka.indices_on(q)] = a_piece[rows, :]
        b_cols = np.empty((call.k, cols.stop - cols.start), order="F")
        for p in range(grid.nprow):
            owner = grid.rank_of(p, qd)
            b_piece = ops.b if owner == me else exchange.stored("b", owner)
            b_cols[ops.kb.indices_on(p), :] = b_piece[:, cols]
        tile = np.asfortranarray(tile, dtype=np.float64)
        tile[box], verified, unchecked = recompute_verified(call.alpha, a_rows, b_cols, tile[box], d.mb, d.nb)
    if mask is not None and entry is not None:  # entries the routine does not update: as on entry
        tile = np.asfortranarray(np.where(mask, tile, entry))
    return (2, rows_g[lr], cols_g[lc], tile), verified, unchecked, skipped if ops is not None else 0
