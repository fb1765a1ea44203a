"""Cannon's algorithm on a square P x P grid, for block-cyclic operands sharing one k-map.

Process ``(i, j)`` starts with the k-pieces of process column / row ``(i + j) % P`` (the initial skew), then
``P`` times: local GEMM, pass the A piece one process to the left and the B piece one process up. With a
block-cyclic layout a "piece" is everything the owner holds of the k dimension, so each step is one large
GEMM. The shifts of the next step are in flight during the current GEMM. FT-PBLAS's node-failure scheme is
built on this iteration (a failed neighbour's piece can be read from storage instead).
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from mpi4py import MPI

from ..._wait import wait_requests
from .._blas import gemm_update
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid

__all__ = ["cannon_source", "run_cannon"]


def cannon_source(grid: ProcessGrid, step: int) -> int:
    """Return the k-owner (process column of A, row of B) whose pieces this process multiplies at ``step``."""
    return (grid.myrow + grid.mycol + step) % grid.npcol


def _shift(comm: MPI.Comm, piece: np.ndarray, dest: int, source: int, incoming_shape: tuple[int, int],
           order: Literal["C", "F"]) -> tuple[np.ndarray, list[MPI.Request]]:
    incoming = np.empty(incoming_shape, order=order)
    reqs = [comm.Irecv([incoming, MPI.DOUBLE], source=source, tag=77),
            comm.Isend([piece, MPI.DOUBLE], dest=dest, tag=77)]
    return incoming, reqs


def run_cannon(grid: ProcessGrid, a: np.ndarray, b: np.ndarray, c: np.ndarray, kmap: BlockCyclic1D,
               alpha: float, *, stats: dict[str, float] | None = None) -> None:
    """Compute ``c += alpha * op(A) @ op(B)`` by Cannon's algorithm (collective on a square grid).

    Parameters
    ----------
    grid
        A square process grid.
    a
        ``(r, kmap.count(mycol))`` local piece of op(A), columns under ``kmap`` over process columns.
    b
        ``(kmap.count(myrow), s)`` local piece of op(B), rows under the same ``kmap`` over process rows.
    c
        ``(r, s)`` array updated in place.
    kmap
        The k-map shared by A's columns and B's rows.
    alpha
        Scalar factor.
    stats
        If given, ``"gemm_s"`` and ``"wait_s"`` (seconds) and ``"steps"`` are added to it, as in SUMMA.
    """
    P = grid.npcol
    if grid.nprow != P:
        raise ValueError("Cannon's algorithm needs a square process grid")
    i, j = grid.myrow, grid.mycol
    t_gemm = t_wait = 0.0
    rows, cols = a.shape[0], b.shape[1]
    a_cur = np.asfortranarray(a)
    b_cur = np.ascontiguousarray(b)
    # Initial skew: along my row, A piece (i, j) goes to the process that needs owner j first.
    q0 = cannon_source(grid, 0)
    if P > 1:
        a_cur, ra = _shift(grid.row_comm, a_cur, (j - i) % P, q0, (rows, kmap.count(q0)), "F")
        b_cur, rb = _shift(grid.col_comm, b_cur, (i - j) % P, q0, (kmap.count(q0), cols), "C")
        t0 = time.perf_counter()
        wait_requests(ra + rb)
        t_wait += time.perf_counter() - t0
    for step in range(P):
        reqs: list[MPI.Request] = []
        if step + 1 < P:
            nxt = cannon_source(grid, step + 1)
            a_next, ra = _shift(grid.row_comm, a_cur, (j - 1) % P, (j + 1) % P, (rows, kmap.count(nxt)), "F")
            b_next, rb = _shift(grid.col_comm, b_cur, (i - 1) % P, (i + 1) % P, (kmap.count(nxt), cols), "C")
            reqs = ra + rb
        t0 = time.perf_counter()
        gemm_update(alpha, a_cur, b_cur, c)
        t1 = time.perf_counter()
        t_gemm += t1 - t0
        if reqs:
            wait_requests(reqs)
            t_wait += time.perf_counter() - t1
            a_cur, b_cur = a_next, b_next
    if stats is not None:
        stats["gemm_s"] = stats.get("gemm_s", 0.0) + t_gemm
        stats["wait_s"] = stats.get("wait_s", 0.0) + t_wait
        stats["steps"] = stats.get("steps", 0.0) + P
