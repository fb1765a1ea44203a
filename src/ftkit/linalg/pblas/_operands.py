"""Bring op(A), op(B) and C's submatrix into the aligned local form the SUMMA and Cannon engines take.

Aligned means: this process's rows of op(A) are exactly its rows of C's submatrix, in the same local order,
and its columns of op(B) are its columns of C's submatrix. When the user's matrices already are (no
transpose, or a single process along the axis; equal block sizes, sources and block phases) the operands are
views of the local arrays, with no copy and no communication; otherwise the operand is redistributed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..descriptor import BlockCyclic1D
from ..matrix import DistributedMatrix
from ._redistribute import Move, redistribute_many

__all__ = ["AlignedOperands", "aligned_operands", "aligned_operands_many"]


@dataclass
class AlignedOperands:
    """Local operands for ``c += alpha * a @ b`` (see :func:`ftkit.linalg.pblas._summa.run_summa`).

    ``a`` columns follow ``ka`` (over process columns), ``b`` rows follow ``kb`` (over process rows), ``c`` is
    a view of C's local array; ``crows``/``ccols`` are the maps of C's submatrix rows and columns.
    ``redistributed`` names the operands that had to be moved (``"A"``, ``"B"``).
    """

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    ka: BlockCyclic1D
    kb: BlockCyclic1D
    crows: BlockCyclic1D
    ccols: BlockCyclic1D
    redistributed: tuple[str, ...]


def _with_nprocs(m: BlockCyclic1D, nprocs: int) -> BlockCyclic1D:
    return BlockCyclic1D(m.n, m.nb, m.offset, m.src % nprocs, nprocs)


def aligned_operands(transa: str, transb: str, m: int, n: int, k: int, A: DistributedMatrix, ia: int, ja: int,
                     B: DistributedMatrix, ib: int, jb: int, C: DistributedMatrix, ic: int, jc: int, *,
                     same_kmap: bool = False) -> AlignedOperands:
    """Return aligned local operands of ``C(ic:, jc:) += op(A)(ia:, ja:) @ op(B)(ib:, jb:)`` (collective).

    Parameters
    ----------
    transa, transb
        ``"N"`` or ``"T"`` (already validated and upper-case; ``"C"`` mapped to ``"T"``).
    m, n, k
        Sizes of op(A) (m x k), op(B) (k x n) and C's submatrix (m x n).
    same_kmap
        Require ``ka`` and ``kb`` to put every k index on the same process number at the same position (what
        Cannon's algorithm needs); B is redistributed if they do not.
    """
    return aligned_operands_many([(transa, transb, m, n, k, A, ia, ja, B, ib, jb, C, ic, jc)],
                                 same_kmap=same_kmap)[0]


#: The arguments of one :func:`aligned_operands` call, ``(transa, transb, m, n, k, A, ia, ja, B, ib, jb, C,
#: ic, jc)``.
Product = tuple[str, str, int, int, int, DistributedMatrix, int, int, DistributedMatrix, int, int,
                DistributedMatrix, int, int]


def aligned_operands_many(products: Sequence[Product], *, same_kmap: bool = False,
                          pool: dict[object, np.ndarray] | None = None) -> list[AlignedOperands]:
    """Return :func:`aligned_operands` of every product of ``products``, with all the operands that must be
    moved redistributed together (:func:`~ftkit.linalg.pblas._redistribute.redistribute_many`: one message
    round for, e.g., PDSYR2K's two transposed operands; collective).

    Parameters
    ----------
    products
        Each product's arguments, as :func:`aligned_operands` takes them.
    same_kmap
        As :func:`aligned_operands`, for every product.
    pool
        If given, the moved operands are put in buffers of the process-wide cache held by ``pool``
        (:func:`~ftkit.linalg.pblas._redistribute.redistribute_many`); the caller gives them back with
        :func:`~ftkit.linalg.pblas._panel_buffers.release_pool` once the product is computed.

    Returns
    -------
    list of AlignedOperands
        One per product, in order.
    """
    plans = [_plan(*pr, same_kmap=same_kmap) for pr in products]
    moves = [mv for plan in plans for mv in (plan.a, plan.b) if isinstance(mv, Move)]
    moved = iter(redistribute_many(moves, pool))
    out = []
    for plan in plans:
        a = next(moved) if isinstance(plan.a, Move) else plan.a
        b = next(moved) if isinstance(plan.b, Move) else plan.b
        names = tuple(name for name, x in (("A", plan.a), ("B", plan.b)) if isinstance(x, Move))
        out.append(AlignedOperands(a, b, plan.c, plan.ka, plan.kb, plan.crows, plan.ccols, names))
    return out


@dataclass
class _Plan:
    """One product's operands before any data moves: a local view, or the :class:`Move` that makes it."""

    a: np.ndarray | Move
    b: np.ndarray | Move
    c: np.ndarray
    ka: BlockCyclic1D
    kb: BlockCyclic1D
    crows: BlockCyclic1D
    ccols: BlockCyclic1D


def _plan(transa: str, transb: str, m: int, n: int, k: int, A: DistributedMatrix, ia: int, ja: int,
          B: DistributedMatrix, ib: int, jb: int, C: DistributedMatrix, ic: int, jc: int, *,
          same_kmap: bool) -> _Plan:
    """Decide, from the maps alone (the same on every process), which operands are used in place and how
    the others are moved."""
    g = C.grid
    nprow, npcol = g.nprow, g.npcol
    crows, ccols = C.row_map(ic, m), C.col_map(jc, n)
    c = C.local_view(ic, jc, m, n)

    # op(B): columns must follow C's columns (process-column axis), rows (k) go over process rows.
    b: np.ndarray | Move | None = None
    kb: BlockCyclic1D | None = None
    if transb == "N":
        if B.col_map(jb, n).aligned_with(ccols):
            b, kb = B.local_view(ib, jb, k, n), B.row_map(ib, k)
    elif nprow == 1 and npcol == 1:
        b, kb = B.local_view(ib, jb, n, k).T, B.col_map(jb, k)
    # op(A): rows must follow C's rows (process-row axis), columns (k) go over process columns.
    a: np.ndarray | Move | None = None
    ka: BlockCyclic1D | None = None
    if transa == "N":
        if A.row_map(ia, m).aligned_with(crows):
            a, ka = A.local_view(ia, ja, m, k), A.col_map(ja, k)
    elif nprow == 1 and npcol == 1:
        a, ka = A.local_view(ia, ja, k, m).T, A.row_map(ia, k)

    if a is None:
        # Lay the k dimension out like B's (when B is usable as it is) so panels need no permutation.
        if kb is not None:
            ka = _with_nprocs(kb, npcol)
        else:
            kblock = A.desc.nb if transa == "N" else A.desc.mb
            ka = BlockCyclic1D(k, kblock, 0, 0, npcol)
        a = Move(A, ia, ja, transa == "T", crows, ka)
        ka = BlockCyclic1D(ka.n, ka.nb, ka.offset, ka.src, npcol)
    assert ka is not None
    if b is None or (same_kmap and not kb.aligned_with(_with_nprocs(ka, nprow))):  # type: ignore[union-attr]
        kb = _with_nprocs(ka, nprow)
        b = Move(B, ib, jb, transb == "T", kb, ccols)
    assert kb is not None
    return _Plan(a, b, c, ka, kb, crows, ccols)
