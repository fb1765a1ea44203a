"""The collective recomputation of flagged blocks in :func:`~ftkit.linalg.abft.ft_pdgemm`
(``mode="correct"``): a block's rows of op(A) and columns of op(B) are fetched within its process row and
column only."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import checksums
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from .report import BlockEvent

__all__ = ["recompute_blocks"]


def _gather_full(comm: MPI.Comm, piece: np.ndarray, kmap: BlockCyclic1D, axis: int) -> np.ndarray:
    """Allgather over ``comm`` every member's ``piece`` (its k-indices along ``axis``), in global k order."""
    pieces = comm.allgather(np.ascontiguousarray(piece))
    k = kmap.n
    shape = (piece.shape[0], k) if axis == 1 else (k, piece.shape[1])
    full = np.empty(shape)
    for p, pc in enumerate(pieces):
        idx = kmap.indices_on(p)
        if axis == 1:
            full[:, idx] = pc
        else:
            full[idx, :] = pc
    return full


def recompute_blocks(
    grid: ProcessGrid,
    ops: Sequence[Any],
    rest: list[tuple[int, int]],
    c: np.ndarray,
    c0: np.ndarray | None,
    rb: np.ndarray,
    cbnd: np.ndarray,
    alpha: float,
    beta: float,
    expected: list[np.ndarray],
    thr: np.ndarray,
    pred: checksums.Prediction,
    tol: float | str | None,
    event: Callable[..., BlockEvent],
) -> tuple[list[BlockEvent], float]:
    """Recompute the ``rest`` blocks from op(A) rows / op(B) columns fetched within my process row / column
    (``ops``: the aligned operands of every term of the product, summed; none: only ``beta C0``).

    Collective over the row and column communicators (every process takes part, most with nothing to ask).
    Returns the events and the seconds spent after the request exchange (fetching, recomputing, checking).
    """
    my_rows = sorted({bi for bi, _ in rest})
    my_cols = sorted({bj for _, bj in rest})
    # processes of a process row hold the same rows of C (and of op(A)): one union of requests per row
    row_req = sorted(set().union(*grid.row_comm.allgather(my_rows)))
    col_req = sorted(set().union(*grid.col_comm.allgather(my_cols)))
    t0 = time.perf_counter()  # timed from here: the request exchange above is a synchronisation, not work
    fetched = []  # per term: (rows of op(A), columns of op(B)) of the requested blocks
    for op in ops:
        a_rows = b_cols = None
        if row_req:
            ridx = np.concatenate([np.arange(rb[bi], rb[bi + 1]) for bi in row_req])
            a_rows = _gather_full(grid.row_comm, op.a[ridx, :], op.ka, axis=1)
        if col_req:
            cidx = np.concatenate([np.arange(cbnd[bj], cbnd[bj + 1]) for bj in col_req])
            b_cols = _gather_full(grid.col_comm, op.b[:, cidx], op.kb, axis=0)
        fetched.append((a_rows, b_cols))
    if not rest:
        return [], time.perf_counter() - t0
    rpos = {bi: p for p, bi in enumerate(row_req)}
    cpos = {bj: p for p, bj in enumerate(col_req)}
    roff = np.concatenate([[0], np.cumsum([rb[bi + 1] - rb[bi] for bi in row_req])])
    coff = np.concatenate([[0], np.cumsum([cbnd[bj + 1] - cbnd[bj] for bj in col_req])])
    thr_rig = thr if tol is None else pred.thresholds(rb, cbnd, None, alpha, beta)
    out = []
    for bi, bj in rest:
        blk = c[rb[bi] : rb[bi + 1], cbnd[bj] : cbnd[bj + 1]]
        new = np.zeros(blk.shape, order="F")
        if beta != 0.0 and c0 is not None:
            new[...] = beta * c0[rb[bi] : rb[bi + 1], cbnd[bj] : cbnd[bj + 1]]
        for a_rows, b_cols in fetched:
            if a_rows is not None and b_cols is not None:
                ar = a_rows[roff[rpos[bi]] : roff[rpos[bi] + 1]]
                bc = b_cols[:, coff[cpos[bj]] : coff[cpos[bj] + 1]]
                new += alpha * (ar @ bc)
        sub_rb = np.array([0, blk.shape[0]])
        sub_cb = np.array([0, blk.shape[1]])
        exp = [np.array([[e[bi, bj]]]) for e in expected]
        v = checksums.verify_blocks(new, sub_rb, sub_cb, exp, np.array([[thr[bi, bj]]]))
        if not v.flagged[0, 0]:
            blk[...] = new
            out.append(event(bi, bj, "recomputed"))
            continue
        vr = checksums.verify_blocks(new, sub_rb, sub_cb, exp, np.array([[thr_rig[bi, bj]]]))
        if tol == "statistical" and not vr.flagged[0, 0]:
            blk[...] = new
            out.append(event(bi, bj, "rounding"))
        else:
            out.append(event(bi, bj, "uncorrected"))
    return out, time.perf_counter() - t0
