"""PBLAS symmetric rank-k updates PDSYRK and PDSYR2K with ScaLAPACK semantics, 0-based offsets.

``C := alpha op(A) op(A).T + beta C`` (PDSYRK) or ``C := alpha op(A) op(B).T + alpha op(B) op(A).T + beta C``
(PDSYR2K) on the ``uplo`` triangle (with the diagonal) of ``C(ic:ic+n, jc:jc+n)`` only: the other triangle of
C stays bit for bit. ``op(X)`` is ``X`` (``n x k``, trans "N") or ``X.T`` (X is ``k x n``, trans "T"/"C").
``alpha == 0`` or ``k == 0`` scales the triangle by ``beta`` without reading A or B; ``beta == 0`` does not
read C. float64 or float32 (A and B of C's dtype).

How: C's columns are cut into a few slabs. The part of a slab strictly inside the triangle (below its diagonal
square for "L", above it for "U") is a plain PDGEMM into C; the diagonal square is computed by PDGEMM into a
work copy of C and only its triangle is copied back. So at most ``1/slabs`` of the product is computed twice.

Argument positions in the PBLAS calling sequence (errors: :class:`~ftkit.errors.PBLASArgumentError`):

- PDSYRK: UPLO 1, TRANS 2, N 3, K 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, BETA 10, C 11, IC 12, JC 13, DESCC 14.
- PDSYR2K: UPLO 1, TRANS 2, N 3, K 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, B 10, IB 11, JB 12, DESCB 13,
  BETA 14, C 15, IC 16, JC 17, DESCC 18.
"""

from __future__ import annotations

import numpy as np

from ...errors import PBLASArgumentError
from ..matrix import DistributedMatrix
from .add import trapezoid_mask
from .gemm import _check_dim, _check_flag, _check_matrix, _check_scalar, _gemm, _scale
from .triangular import check_dtype

__all__ = ["pdsyrk", "pdsyr2k", "check_rank_args", "rank_update"]

#: Most slabs C's columns are cut into (more slabs: fewer duplicated flops, more PDGEMM calls).
SLABS = 4

#: One term ``op(X) op(Y).T`` of the update: ``(X, ix, jx, Y, iy, jy)``.
Term = tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]


def check_rank_args(routine, uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc):  # type: ignore[no-untyped-def]
    """Check PDSYR2K's arguments (``B=None``: PDSYRK's, positions shifted) as PBLAS does; return them
    normalized: ``(uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc)`` with "C" mapped to "T".

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position of the first illegal argument.
    """
    r = routine
    uplo = _check_flag(r, 1, "uplo", uplo, "UL")
    trans = _check_flag(r, 2, "trans", trans, "NTC").replace("C", "T")
    n, k = _check_dim(r, 3, "n", n), _check_dim(r, 4, "k", k)
    alpha = _check_scalar(r, 5, "alpha", alpha)
    shift = 0 if B is None else 4
    if not isinstance(C, DistributedMatrix):
        raise PBLASArgumentError(r, 11 + shift, f"C must be a DistributedMatrix, got {type(C).__name__}")
    rows, cols = (n, k) if trans == "N" else (k, n)
    ia, ja = _check_matrix(r, 6, "A", A, ia, ja, rows, cols, C.desc.context)
    check_dtype(r, 9, "A", A, C.dtype)
    if B is not None:
        ib, jb = _check_matrix(r, 10, "B", B, ib, jb, rows, cols, C.desc.context)
        check_dtype(r, 13, "B", B, C.dtype)
    beta = _check_scalar(r, 10 + shift, "beta", beta)
    ic, jc = _check_matrix(r, 11 + shift, "C", C, ic, jc, n, n, None)
    return uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc


def _products(trans: str, terms: list[Term], k: int, alpha: float, beta: float, C: DistributedMatrix,
              ic: int, jc: int, r0: int, r1: int, c0: int, c1: int) -> None:
    """``C[r0:r1, c0:c1] = alpha * sum(op(X)[r0:r1] op(Y)[c0:c1].T) + beta C[...]`` (submatrix indices)."""
    m, n = r1 - r0, c1 - c0
    for i, (X, ix, jx, Y, iy, jy) in enumerate(terms):
        b = beta if i == 0 else 1.0
        if trans == "N":
            _gemm("N", "T", m, n, k, alpha, X, ix + r0, jx, Y, iy + c0, jy, b, C, ic + r0, jc + c0,
                  "summa", None, None)
        else:
            _gemm("T", "N", m, n, k, alpha, X, ix, jx + r0, Y, iy, jy + c0, b, C, ic + r0, jc + c0,
                  "summa", None, None)


def rank_update(uplo: str, trans: str, n: int, k: int, alpha: float, terms: list[Term], beta: float,
                C: DistributedMatrix, ic: int, jc: int, slabs: int = SLABS) -> None:
    """Update the ``uplo`` triangle of ``C(ic:ic+n, jc:jc+n)`` by the ``terms`` (checked arguments)."""
    if n == 0 or ((alpha == 0.0 or k == 0) and beta == 1.0):
        return
    if alpha == 0.0 or k == 0:
        view = C.local_view(ic, jc, n, n)
        scaled = view.copy()
        _scale(scaled, beta)
        view[...] = np.where(trapezoid_mask(C, ic, jc, n, n, uplo), scaled, view)
        return
    work = C.copy()
    nslab = max(1, min(slabs, n))
    width = -(-n // nslab)
    for c0 in range(0, n, width):
        c1 = min(n, c0 + width)
        if uplo == "L" and c1 < n:
            _products(trans, terms, k, alpha, beta, C, ic, jc, c1, n, c0, c1)
        if uplo == "U" and c0 > 0:
            _products(trans, terms, k, alpha, beta, C, ic, jc, 0, c0, c0, c1)
        _products(trans, terms, k, alpha, beta, work, ic, jc, c0, c1, c0, c1)
        w = c1 - c0
        view = C.local_view(ic + c0, jc + c0, w, w)
        view[...] = np.where(trapezoid_mask(C, ic + c0, jc + c0, w, w, uplo),
                             work.local_view(ic + c0, jc + c0, w, w), view)


def pdsyrk(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
           beta: float, C: DistributedMatrix, ic: int, jc: int) -> None:
    """Compute ``C = alpha * op(A) @ op(A).T + beta * C`` on the ``uplo`` triangle of ``C(ic:ic+n, jc:jc+n)``.

    Collective on C's grid.

    Parameters
    ----------
    uplo
        ``"U"`` or ``"L"``: the triangle of C updated (the other one is neither read nor written).
    trans
        ``"N"`` (A is ``n x k``) or ``"T"`` / ``"C"`` (A is ``k x n``, ``op(A) = A.T``).
    n, k
        Order of C's submatrix and the inner dimension.
    alpha, beta
        Scalars; ``alpha == 0`` or ``k == 0`` does not read A, ``beta == 0`` does not read C.
    A, C
        Distributed matrices on one grid, of one dtype; ``ia, ja, ic, jc`` are 0-based offsets.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    uplo, trans, n, k, alpha, ia, ja, _, _, beta, ic, jc = check_rank_args(
        "PDSYRK", uplo, trans, n, k, alpha, A, ia, ja, None, 0, 0, beta, C, ic, jc)
    rank_update(uplo, trans, n, k, alpha, [(A, ia, ja, A, ia, ja)], beta, C, ic, jc)


def pdsyr2k(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
            B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
            jc: int) -> None:
    """Compute ``C = alpha * op(A) op(B).T + alpha * op(B) op(A).T + beta * C`` on C's ``uplo`` triangle.

    Collective on C's grid. Arguments as :func:`pdsyrk`, plus B (shaped like A) at ``(ib, jb)``.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_rank_args(
        "PDSYR2K", uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    rank_update(uplo, trans, n, k, alpha, [(A, ia, ja, B, ib, jb), (B, ib, jb, A, ia, ja)], beta, C, ic, jc)
