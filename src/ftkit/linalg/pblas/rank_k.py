"""PBLAS symmetric rank-k updates PDSYRK and PDSYR2K with ScaLAPACK semantics, 0-based offsets.

``C := alpha op(A) op(A).T + beta C`` (PDSYRK) or ``C := alpha op(A) op(B).T + alpha op(B) op(A).T + beta C``
(PDSYR2K) on the ``uplo`` triangle (with the diagonal) of ``C(ic:ic+n, jc:jc+n)`` only: the other triangle of
C stays bit for bit. ``op(X)`` is ``X`` (``n x k``, trans "N") or ``X.T`` (X is ``k x n``, trans "T"/"C").
``alpha == 0`` or ``k == 0`` scales the triangle by ``beta`` without reading A or B; ``beta == 0`` does not
read C. float64 or float32 (A and B of C's dtype).

How: each operand is brought into C's layout once per call (a transposed one redistributed once, not once per
slab), then C's columns are cut into a few slabs (at distribution-block boundaries where near): each slab's
part inside the triangle, its diagonal square included, is one SUMMA product into C, and the square's other
triangle, computed over with it, is put back bit for bit. So at most ``1/slabs`` of the product is computed
in vain.

Argument positions in the PBLAS calling sequence (errors: :class:`~ftkit.errors.PBLASArgumentError`):

- PDSYRK: UPLO 1, TRANS 2, N 3, K 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, BETA 10, C 11, IC 12, JC 13, DESCC 14.
- PDSYR2K: UPLO 1, TRANS 2, N 3, K 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, B 10, IB 11, JB 12, DESCB 13,
  BETA 14, C 15, IC 16, JC 17, DESCC 18.
"""

from __future__ import annotations

import numpy as np

from ...errors import PBLASArgumentError
from ..matrix import DistributedMatrix
from ._operands import AlignedOperands, aligned_operands
from ._summa import run_summa
from .add import trapezoid_mask
from .gemm import _check_dim, _check_flag, _check_matrix, _check_scalar, _scale
from .triangular import check_dtype

__all__ = ["pdsyrk", "pdsyr2k", "check_rank_args", "rank_update", "slab_bounds", "slab_pieces",
           "aligned_terms", "piece_operands", "excluded_triangle"]

#: Most slabs C's columns are cut into (more slabs: fewer duplicated flops, more PDGEMM calls).
SLABS = 4

#: One term ``op(X) op(Y).T`` of the update: ``(X, ix, jx, Y, iy, jy)``.
Term = tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]

#: A piece of the triangle: submatrix rows ``r0:r1`` and columns ``c0:c1``.
Piece = tuple[int, int, int, int]


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


def slab_bounds(n: int, offset: int, nb: int, slabs: int = SLABS) -> list[int]:
    """Column bounds ``0 = b0 < b1 < ... = n`` of at most ``slabs`` slabs, each inner bound moved to the
    nearest distribution-block boundary (global index ``offset + b`` a multiple of ``nb``) when one is
    closer than half a slab."""
    nslab = max(1, min(slabs, n))
    width = -(-n // nslab)
    bounds = [0]
    for b in range(width, n, width):
        aligned = b - (offset + b) % nb
        if (offset + b) % nb * 2 > nb:
            aligned += nb
        if 2 * abs(aligned - b) < width and bounds[-1] < aligned < n:
            b = aligned
        if b > bounds[-1]:
            bounds.append(b)
    return bounds + [n]


def slab_pieces(uplo: str, n: int, bounds: list[int]) -> list[Piece]:
    """One piece per slab: its diagonal square with the part of the slab inside the triangle (below the
    square for "L", above it for "U"), as submatrix rows ``r0:r1`` and columns ``c0:c1``."""
    return [(c0, n, c0, c1) if uplo == "L" else (0, c1, c0, c1)
            for c0, c1 in zip(bounds[:-1], bounds[1:], strict=True)]


def aligned_terms(trans: str, terms: list[Term], n: int, k: int, C: DistributedMatrix, ic: int,
                  jc: int) -> list[AlignedOperands]:
    """Every term's operands of the whole ``n x n`` product ``op(X) op(Y).T``, aligned with
    ``C(ic:ic+n, jc:jc+n)`` (collective): each operand is moved at most once per call, and every piece
    takes its rows and columns from them (:func:`piece_operands`)."""
    ta, tb = ("N", "T") if trans == "N" else ("T", "N")
    return [aligned_operands(ta, tb, n, n, k, X, ix, jx, Y, iy, jy, C, ic, jc)
            for X, ix, jx, Y, iy, jy in terms]


def piece_operands(ops: AlignedOperands, C: DistributedMatrix, ic: int, jc: int,
                   piece: Piece) -> AlignedOperands:
    """The aligned operands of the piece ``C(ic+r0:ic+r1, jc+c0:jc+c1)``: views of ``ops``'s rows of op(X)
    and columns of op(Y) (local index ranges, no copy)."""
    r0, r1, c0, c1 = piece
    g = C.grid
    rs, cs = ops.crows.range_on(g.myrow, r0, r1), ops.ccols.range_on(g.mycol, c0, c1)
    return AlignedOperands(ops.a[rs], ops.b[:, cs], C.local_view(ic + r0, jc + c0, r1 - r0, c1 - c0),
                           ops.ka, ops.kb, C.row_map(ic + r0, r1 - r0), C.col_map(jc + c0, c1 - c0),
                           ops.redistributed)


def excluded_triangle(C: DistributedMatrix, ic: int, jc: int, uplo: str,
                      piece: Piece) -> tuple[np.ndarray, np.ndarray]:
    """The local view of the piece's diagonal square and the mask of its part outside the ``uplo``
    triangle (the part the routine must leave bit for bit)."""
    _, _, c0, c1 = piece
    w = c1 - c0
    return C.local_view(ic + c0, jc + c0, w, w), ~trapezoid_mask(C, ic + c0, jc + c0, w, w, uplo)


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
    ops = aligned_terms(trans, terms, n, k, C, ic, jc)
    for piece in slab_pieces(uplo, n, slab_bounds(n, jc, C.desc.nb, slabs)):
        square, outside = excluded_triangle(C, ic, jc, uplo, piece)
        kept = square[outside]  # computed over with the square, then put back bit for bit
        for t, whole in enumerate(ops):
            p = piece_operands(whole, C, ic, jc, piece)
            b = beta if t == 0 else 1.0
            if b != 0.0:  # beta == 0: left to the first local GEMM, as pdgemm does
                _scale(p.c, b)
            run_summa(C.grid, p.a, p.b, p.c, p.ka, p.kb, alpha, beta=0.0 if b == 0.0 else 1.0)
        square[outside] = kept


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
