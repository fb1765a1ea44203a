"""The checked triangular multiply behind :func:`~ftkit.linalg.abft.level3.ft_pdtrmm`: the plain routine's
sweep (only the triangle is multiplied) with the checksums of ``ft_pdgemm``'s blocks around it.

``X = T W0`` (``T`` the ``ka x ka`` triangle as :mod:`ftkit.linalg.pblas._tri_sweep` lays it out, zeros in
its excluded triangle and ones on a unit diagonal; ``W0 = alpha B`` or its transpose, ``ka x nw``) is a
product like any other, so every block ``X_IJ`` of the result (row segment ``I`` of ``T``'s rows, column
segment ``J`` of ``W``'s columns, as :class:`~ftkit.linalg.abft._blocks.BlockSegmentation` cuts them) has
the expected sums ``(e^T T_I) (W0_J e)`` (plain, row-, column- and doubly-weighted) and the magnitude
``(e^T |T_I|) (|W0_J| e)`` of :mod:`ftkit.linalg.checksums`. Before the sweep each process encodes its
piece of ``T`` (checksum rows of its row segments over its columns, in the pass that makes the triangle in
the redistributed piece, :func:`triangle_with_checksums`) and of ``W0`` (checksum columns of its column
segments over its rows, in the same pass as the copy a recomputation starts from); one all-gather
along the process row and one along the process column give every process the full checksum rows of its
row segments and columns of its column segments (in the order of the process columns' and rows' indices,
the same on square grids; elsewhere the gathered ``W0`` sums are reordered to ``T``'s), whose small product
predicts its blocks. The sweep
computes each element as a sum of ``ka`` products (in blocks, in any order), which is what the rigorous
bound covers; the statistical one is ``ft_pdgemm``'s.

After the sweep: a block with one wrong element is corrected in O(1) from its weighted sums (``"located"``);
the column segments holding any other flagged block are computed again by a sweep of those columns of the
saved ``W0`` with ``T`` rebuilt from A (a corrupted copy of the triangle is replaced too), then checked
again (``"recomputed"``; still wrong: ``"uncorrected"``, A itself is corrupted). Cost beyond the plain
routine: the sums in the pass over ``T`` (made in place, as the plain routine makes it, the excluded
triangle neither read nor summed), two passes over ``W`` (encoding with the copy,
into a buffer kept between calls; the block sums of the result), and checksum all-gathers of ``1/bs`` of
the data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

import numpy as np
from mpi4py import MPI

from ..._wait import wait_requests
from ...inject import InjectionPlan
from .. import checksums
from ..checksums._kernels import encode_cols_into
from ..checksums._tri_sums import triangle_rows_from, triangle_rows_into
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ..matrix import DistributedMatrix
from ..pblas._panel_buffers import pooled_buffer, release_pool
from ..pblas._redistribute import displacements
from ..pblas._tri_sweep import own_piece, sweep, triangle_extent, triangle_piece
from ._blocks import BlockSegmentation, Threshold
from .product import _ratio, _reduce, _report_of, _verify_and_correct
from .report import ABFTReport, BlockEvent

__all__ = ["checked_tri_multiply", "segmentation", "triangle_with_checksums"]


def triangle_with_checksums(A: DistributedMatrix, ia: int, ja: int, transpose: bool, lower: bool, unit: bool,
                            rows: BlockCyclic1D, cols: BlockCyclic1D, seg: BlockSegmentation,
                            kinds: int, pool: dict[object, np.ndarray] | None = None,
                            ) -> tuple[np.ndarray, np.ndarray]:
    """This process's piece of ``T`` (what :func:`~ftkit.linalg.pblas._tri_sweep.triangle_operand` returns,
    bit for bit) and its checksum rows, in one pass over the redistributed piece (collective on A's grid).

    The triangle is made in place in the array the redistribution returns (the plain routine's piece and
    extent, :func:`~ftkit.linalg.pblas._tri_sweep.triangle_extent`), or, where ``T``'s piece is A's own local
    piece, copied out of A in one pass (as the plain routine does), and the checksums are summed in the same
    pass, from the kept rows only. Returns ``(t, achk)``:
    ``achk`` is ``(kinds nr, ncols)`` (F order): the checksum rows of every row segment of ``seg`` over this
    process's columns of ``T`` (``cols``), in local order (:func:`_encode` gathers the process row's).
    ``pool``: ``t`` in a buffer of the process-wide cache
    (:func:`~ftkit.linalg.pblas._tri_sweep.triangle_piece`).
    """
    g = A.grid
    keep, diag, c = _extent(rows.key, cols.key, g.myrow, g.mycol, lower)
    achk = np.empty((kinds * seg.nr, c.size), order="F")  # every element written by the kernel
    wts = checksums.segment_weights(seg.rb)
    own = own_piece(A, ia, ja, transpose, rows, cols, pool)
    if own is not None:  # copied out of A, made a triangle and summed in one pass (as plain copies it)
        triangle_rows_from(*own, keep, diag, unit, seg.rb, wts, achk, c, kinds)
        return own[1], achk
    t = triangle_piece(A, ia, ja, transpose, rows, cols, pool)
    triangle_rows_into(t, keep, diag, unit, seg.rb, wts, achk, c, kinds)
    return t, achk


@lru_cache(maxsize=16)
def _extent(rows_key: tuple[int, int, int, int, int], cols_key: tuple[int, int, int, int, int], myrow: int,
            mycol: int, lower: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~ftkit.linalg.pblas._tri_sweep.triangle_extent` of the maps (keys: their
    :attr:`~ftkit.linalg.descriptor.BlockCyclic1D.key`) and the local column indices, read-only: every call
    of one shape needs the same (made per call, ~0.15 ms of numpy per rank at n = 4096 on 2 x 2)."""
    rows, cols = BlockCyclic1D(*rows_key), BlockCyclic1D(*cols_key)
    keep, diag = triangle_extent(rows, cols, myrow, mycol, lower)
    c = np.arange(cols.count(mycol), dtype=np.int64)
    for a in (keep, diag, c):
        a.flags.writeable = False
    return keep, diag, c


_SEGMENTATIONS: dict[tuple[int, ...], BlockSegmentation] = {}


def segmentation(M: DistributedMatrix, i: int, j: int, m: int, n: int, bs: int) -> BlockSegmentation:
    """``BlockSegmentation.of(M, i, j, m, n, bs)``, kept per layout (the grid's shape and this process's
    place, M's blocking, the submatrix and ``bs``: all it depends on) with read-only arrays: ``ft_pdtrmm``
    cuts the same blocks in every call of one shape (~0.2 ms of numpy per rank at n = 4096 on 2 x 2)."""
    g, d = M.grid, M.desc
    key = (g.nprow, g.npcol, g.myrow, g.mycol, d.mb, d.nb, d.rsrc, d.csrc, i, j, m, n, bs)
    seg = _SEGMENTATIONS.get(key)
    if seg is None:
        seg = BlockSegmentation.of(M, i, j, m, n, bs)
        for a in (seg.rows_here, seg.cols_here, seg.rb, seg.cb):
            a.flags.writeable = False
        if len(_SEGMENTATIONS) >= 16:
            _SEGMENTATIONS.clear()
        _SEGMENTATIONS[key] = seg
    return seg


@lru_cache(maxsize=16)
def _gather_layout(rows_key: tuple[int, int, int, int, int], cols_key: tuple[int, int, int, int, int],
                   nprow: int, npcol: int) -> tuple[tuple[list[int], list[int]], tuple[list[int], list[int]],
                                                     np.ndarray | None]:
    """How :func:`_encode` gathers the checksums (keys: the maps'
    :attr:`~ftkit.linalg.descriptor.BlockCyclic1D.key`): the counts and displacements, in indices, of every
    process column's columns of ``T`` and every process row's rows of ``W``, and the rows of the gathered
    ``W`` sums in the order of the gathered ``T`` sums' columns (``None`` where the two orders agree, as on
    square grids: no reordering)."""
    rows, cols = BlockCyclic1D(*rows_key), BlockCyclic1D(*cols_key)
    by_col = [cols.indices_on(q) for q in range(npcol)]
    by_row = [rows.indices_on(p) for p in range(nprow)]
    a_counts, b_counts = [len(k) for k in by_col], [len(k) for k in by_row]
    a_order, b_order = np.concatenate(by_col), np.concatenate(by_row)
    order = None
    if not np.array_equal(a_order, b_order):
        where = np.empty(rows.n, np.int64)
        where[b_order] = np.arange(rows.n)
        order = where[a_order]
        order.flags.writeable = False
    return (a_counts, displacements(a_counts)), (b_counts, displacements(b_counts)), order


def _encode(g: ProcessGrid, achk: np.ndarray, w: np.ndarray, seg: BlockSegmentation, rows: BlockCyclic1D,
            cols: BlockCyclic1D, kinds: int, pool: dict[object, np.ndarray],
            ) -> tuple[Callable[[], checksums.ChecksumProduct], np.ndarray]:
    """Start gathering the checksums and copy ``w`` (F order) into a buffer of ``pool`` (the panel buffers
    kept between calls: a fresh array of ``w``'s size costs page faults and the kernel's zeroing, as much as
    the copy itself), taking its checksum columns in the same pass. ``achk``: this process's columns of
    ``T``'s checksum rows (:func:`triangle_with_checksums`). Returns ``(finish, w0)``: ``finish()`` waits for
    the gathers and returns the checksum product predicting this process's blocks of ``T W``."""
    ka, nc, ncols = rows.n, seg.nc, w.shape[1]
    wext = pooled_buffer(pool, "w0", (w.shape[0], ncols + kinds * nc))
    encode_cols_into(w, seg.cb, checksums.segment_weights(seg.cb), wext, True, kinds)
    (ac, ad), (bc, bd), order = _gather_layout(rows.key, cols.key, g.nprow, g.npcol)
    na, nb_ = achk.shape[0], kinds * nc
    # the process row's columns of T give full checksum rows, the process column's rows of W full checksum
    # columns: each process sends its own part (an all-reduce of zero-padded full arrays moved and added
    # twice as much); both in flight during the sweep (whose own waits progress them), waited by sleeping
    # after it, where the prediction is first needed (waiting before the sweep made every rank wait for the
    # slowest one's encoding, and a blocking collective busy-polls, taking CPU from the slowest when ranks
    # outnumber cores)
    # W's checksum columns travel as the encoding leaves them (F order, wext's last columns): each process
    # row's rows arrive as one F-order piece, a panel of the product by itself (no copy into rows of W)
    arecv = np.empty((na, ka), order="F")
    brecv = np.empty(ka * nb_)
    acounts = ([na * x for x in ac], [na * x for x in ad])
    bcounts = ([nb_ * x for x in bc], [nb_ * x for x in bd])
    reqs = [g.row_comm.Iallgatherv(achk.ravel(order="F"), [arecv.reshape(-1, order="F"), acounts,
                                                            MPI.DOUBLE]),
            g.col_comm.Iallgatherv(wext[:, ncols:].reshape(-1, order="F"), [brecv, bcounts, MPI.DOUBLE])]

    def finish() -> checksums.ChecksumProduct:
        wait_requests(reqs)
        pieces = [brecv[nb_ * d:nb_ * (d + c)].reshape((c, nb_), order="F")
                  for c, d in zip(bc, bd, strict=True)]
        product = checksums.ChecksumProduct(seg.nr, nc, kinds)
        if order is None:  # T's columns in W's row order: one panel per process row's piece
            for c, d, piece in zip(bc, bd, pieces, strict=True):
                if c:
                    product.add(arecv[:, d:d + c], piece)
        else:
            product.add(arecv, np.concatenate(pieces)[order])
        return product

    return finish, wext[:, :ncols]


def _col_segment_ids(seg: BlockSegmentation) -> np.ndarray:
    """Global column-segment id of each local column segment (the same cut on every process)."""
    glob = checksums.segment_bounds(np.arange(seg.n), seg.jc, seg.nb, seg.bs)
    starts = seg.cols_here[seg.cb[:-1]]
    return np.searchsorted(glob, starts, side="right") - 1


def checked_tri_multiply(g: ProcessGrid, t: np.ndarray, achk: np.ndarray, w: np.ndarray, rows: BlockCyclic1D,
                         cols: BlockCyclic1D, lower: bool, seg: BlockSegmentation, threshold: Threshold,
                         mode: str, inject: InjectionPlan | None, rebuild: Callable[[], np.ndarray],
                         transposed: bool) -> ABFTReport:
    """Overwrite ``w`` with ``T w`` by the sweep, checked and corrected as the module says; return the report.

    ``t`` and ``achk`` come from :func:`triangle_with_checksums` (``achk``: this process's columns, gathered
    over the process row here); ``seg`` segments ``w``'s local part (its rows follow ``rows``); ``rebuild``
    makes ``T`` again from A; ``transposed`` reports events with rows and columns swapped (side "R" works on
    ``B.T``). Collective.
    Injection points as ``ft_pdtrsm``'s: ``"A"`` (T after its checksums), ``"B"`` (``W`` after its checksums),
    ``"C"`` step 0 (before the sweep) or 1 (the product, before the check).
    """
    pool: dict[object, np.ndarray] = {}
    try:
        return _multiply_checked(g, t, achk, w, rows, cols, lower, seg, threshold, mode, inject, rebuild,
                                 transposed, pool)
    finally:
        release_pool(pool)


def _multiply_checked(g: ProcessGrid, t: np.ndarray, achk: np.ndarray, w: np.ndarray, rows: BlockCyclic1D,
                      cols: BlockCyclic1D,
                      lower: bool, seg: BlockSegmentation, threshold: Threshold, mode: str,
                      inject: InjectionPlan | None, rebuild: Callable[[], np.ndarray], transposed: bool,
                      pool: dict[object, np.ndarray]) -> ABFTReport:
    """:func:`checked_tri_multiply` with the copy of ``W0`` in a buffer of ``pool``."""
    finish, w0 = _encode(g, achk, w, seg, rows, cols, threshold.kinds, pool)
    if inject is not None:
        inject.resolve(g.size, 1)
        inject.apply("A", g.rank, 0, t)
        inject.apply("B", g.rank, 0, w)
        inject.apply("C", g.rank, 0, w, seg.to_global)
    sweep(g, t, w, rows, cols, lower, False)
    if inject is not None:
        inject.apply("C", g.rank, 1, w, seg.to_global)
    product = finish()
    pred = product.predict(1.0, 0.0)
    sums, csq = _result_sums(w, seg, threshold)
    thr = threshold.bounds(pred, seg, 1.0, 0.0, csq=csq)
    v = checksums.verify_blocks(w, seg.rb, seg.cb, pred.expected, thr, sums)
    events, rest, final, t_fix = _verify_and_correct(w, seg, v, pred.expected, thr, mode, g.rank)
    n_unchecked = int(v.unchecked.sum())
    # one reduction gives the totals and, error-free, the report's maxima too (as ft_pdgemm's)
    (n_rest, n_events, checked, unchecked), (max_ratio, t_max) = _reduce(
        g.comm, [len(rest), len(events), seg.nr * seg.nc - n_unchecked, n_unchecked], [_ratio(final), t_fix])
    if n_rest:
        t0 = time.perf_counter()
        ids = _col_segment_ids(seg)
        mine = sorted({int(ids[bj]) for _, bj in rest})
        again = set().union(*g.comm.allgather(mine))
        sel = np.zeros(w.shape[1], bool)
        for bj, gid in enumerate(ids):
            if int(gid) in again:
                sel[seg.cb[bj]:seg.cb[bj + 1]] = True
        ws = np.array(w0[:, sel], order="F")
        sweep(g, rebuild(), ws, rows, cols, lower, False)  # a corrupted copy of T is replaced too
        w[:, sel] = ws
        sums, csq = _result_sums(w, seg, threshold)
        final = checksums.verify_blocks(w, seg.rb, seg.cb, pred.expected,
                                        threshold.bounds(pred, seg, 1.0, 0.0, csq=csq), sums)
        rig = checksums.verify_blocks(w, seg.rb, seg.cb, pred.expected,
                                      threshold.bounds(pred, seg, 1.0, 0.0, rigorous=True), sums)
        for bi, bj in rest:
            action = ("recomputed" if not final.flagged[bi, bj] else "rounding"
                      if threshold.tol == "statistical" and not rig.flagged[bi, bj] else "uncorrected")
            events.append(seg.event(bi, bj, g.rank, action))
        t_fix += time.perf_counter() - t0
        (n_events,), (max_ratio, t_max) = _reduce(g.comm, [len(events)], [_ratio(final), t_fix])
    all_events = [e for evs in g.comm.allgather(events) for e in evs] if n_events else []
    if transposed:
        all_events = [_swap(e) for e in all_events]
    all_events.sort(key=lambda e: (e.row_block, e.col_block))
    return _report_of(all_events, checked, unchecked, max_ratio, t_max, threshold.name, seg.bs)


def _result_sums(w: np.ndarray, seg: BlockSegmentation, threshold: Threshold,
                 ) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
    """The block sums of the result and, for the statistical threshold only (the others do not read them),
    its sums of squares: ``(sums, csq)``, in one pass."""
    if threshold.kinds == checksums.NCHK:
        sums = checksums.block_sums_sq(w, seg.rb, seg.cb)
        return sums, sums[4]
    return checksums.block_sums(w, seg.rb, seg.cb), None


def _swap(e: BlockEvent) -> BlockEvent:
    """The event of ``W = B.T``'s block in B's coordinates."""
    el = None if e.element is None else (e.element[1], e.element[0])
    return replace(e, row_block=e.col_block, col_block=e.row_block, row0=e.col0, col0=e.row0, rows=e.cols,
                   cols=e.rows, element=el)
