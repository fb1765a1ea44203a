"""PBLAS level-3 triangular routines PDTRSM and PDTRMM with ScaLAPACK semantics, 0-based offsets.

``pdtrsm`` solves ``op(A) X = alpha B`` (side "L") or ``X op(A) = alpha B`` (side "R") and overwrites B's
submatrix with X; ``pdtrmm`` overwrites it with ``alpha op(A) B`` or ``alpha B op(A)``. A is triangular of
order ``m`` (side "L") or ``n`` (side "R") at ``(ia, ja)``: only its ``uplo`` triangle is read, and not its
diagonal when ``diag == "U"`` (unit diagonal). Neither routine writes A nor anything of B outside
``B(ib:ib+m, jb:jb+n)``; ``alpha == 0`` sets that submatrix to zero without reading A or B. Both routines
take float64 or float32 matrices (A and B of one dtype).

Illegal arguments raise :class:`~ftkit.errors.PBLASArgumentError` with the 1-based position in the PBLAS
calling sequence (every matrix followed by its descriptor): SIDE 1, UPLO 2, TRANSA 3, DIAG 4, M 5, N 6,
ALPHA 7, A 8, IA 9, JA 10, DESCA 11, B 12, IB 13, JB 14, DESCB 15. Checks use only the arguments, identical on
every rank, so every rank raises before any communication.

How: see :mod:`ftkit.linalg.pblas._tri_sweep`. Side "L" works on B's local array in place (T gets B's row
blocks); side "R" works on a copy of ``B.T`` (``X op(A) = alpha B`` is ``op(A).T X.T = alpha B.T``).
"""

from __future__ import annotations

import numpy as np

from ...errors import PBLASArgumentError
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix
from ._panel_buffers import release_pool
from ._redistribute import Pool, redistribute
from ._tri_sweep import sweep, tri_cols, triangle_operand
from .gemm import _check_dim, _check_flag, _check_matrix, _check_scalar

__all__ = ["pdtrsm", "pdtrmm", "check_tri_args", "check_dtype"]


def check_dtype(routine: str, pos: int, name: str, mat: DistributedMatrix, dtype: np.dtype) -> None:
    """Raise ``PBLASArgumentError`` at ``pos`` (the descriptor of ``name``) unless ``mat`` has ``dtype``."""
    if mat.dtype != dtype:
        raise PBLASArgumentError(routine, pos, f"desc{name.lower()}: {name} is {mat.dtype} but the result "
                                 f"matrix is {dtype}; pass matrices of one dtype (float64 or float32)")


def check_tri_args(routine, side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb):  # type: ignore[no-untyped-def]
    """Check PDTRSM's / PDTRMM's arguments 1-15 as PBLAS does; return them normalized.

    Returns ``(side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb)``, ``"C"`` mapped to ``"T"``. Shared
    by the plain and the ABFT routines; ``routine`` names the caller in the errors.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position of the first illegal argument.
    """
    r = routine
    side = _check_flag(r, 1, "side", side, "LR")
    uplo = _check_flag(r, 2, "uplo", uplo, "UL")
    transa = _check_flag(r, 3, "transa", transa, "NTC").replace("C", "T")
    diag = _check_flag(r, 4, "diag", diag, "UN")
    m, n = _check_dim(r, 5, "m", m), _check_dim(r, 6, "n", n)
    alpha = _check_scalar(r, 7, "alpha", alpha)
    if not isinstance(B, DistributedMatrix):
        raise PBLASArgumentError(r, 12, f"B must be a DistributedMatrix, got {type(B).__name__}")
    ka = m if side == "L" else n
    ia, ja = _check_matrix(r, 8, "A", A, ia, ja, ka, ka, B.desc.context)
    check_dtype(r, 11, "A", A, B.dtype)
    ib, jb = _check_matrix(r, 12, "B", B, ib, jb, m, n, None)
    return side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb


def apply_triangle(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float,
                   A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int,
                   solve: bool) -> None:
    """Run PDTRSM (``solve``) or PDTRMM on checked, normalized arguments (collective on B's grid)."""
    if m == 0 or n == 0:
        return
    bv = B.local_view(ib, jb, m, n)
    if alpha == 0.0:
        bv[...] = 0.0  # not bv *= 0: NaNs in B must not survive
        return
    g = B.grid
    if side == "L":
        W, rows, transpose = None, B.row_map(ib, m), transa == "T"
        w = bv
    else:  # X op(A) = alpha B  <=>  op(A).T X.T = alpha B.T: work on a copy of B.T
        W = DistributedMatrix.zeros(g, n, m, mb=B.desc.nb, nb=B.desc.mb, dtype=B.dtype)
        W.local[...] = redistribute(B, ib, jb, True, W.row_map(0, n), W.col_map(0, m))
        rows, transpose, w = W.row_map(0, n), transa == "N", W.local
    lower = (uplo == "L") != transpose
    cols = tri_cols(rows, g.npcol)
    pool: Pool = {}  # T in a buffer kept between calls: a fresh one faults in every page again
    t = triangle_operand(A, ia, ja, transpose, lower, diag == "U", rows, cols, pool)
    if alpha != 1.0:
        w *= w.dtype.type(alpha)
    sweep(g, t, w, rows, cols, lower, solve)
    release_pool(pool)  # the sweep has finished with T (not on an error: a send may still read it)
    if W is not None:
        bv[...] = redistribute(W, 0, 0, True, B.row_map(ib, m), B.col_map(jb, n))


@names_failures("PDTRSM", "B", "resilient_pdtrsm")
def pdtrsm(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float, A: DistributedMatrix,
           ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int) -> None:
    """Solve ``op(A) X = alpha B`` (side "L") or ``X op(A) = alpha B`` (side "R"); X overwrites B.

    Collective on B's grid; ``B(ib:ib+m, jb:jb+n)`` is overwritten, nothing else of A or B is written.

    Parameters
    ----------
    side
        ``"L"`` (A on the left, order ``m``) or ``"R"`` (on the right, order ``n``).
    uplo
        ``"U"`` or ``"L"``: the triangle of A that holds the matrix (the other one is never read).
    transa
        ``"N"``, ``"T"`` or ``"C"``: ``op(A)`` is ``A`` or ``A.T``.
    diag
        ``"U"`` (unit diagonal, not read) or ``"N"``.
    m, n
        Size of B's submatrix (>= 0).
    alpha
        Scalar; ``0`` sets B's submatrix to zero without reading A or B.
    A, B
        Distributed matrices on one grid, both float64 or both float32.
    ia, ja, ib, jb
        0-based offsets of the submatrices.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    args = check_tri_args("PDTRSM", side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb = args
    apply_triangle(side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb, solve=True)


@names_failures("PDTRMM", "B", "resilient_pdtrmm")
def pdtrmm(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float, A: DistributedMatrix,
           ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int) -> None:
    """Compute ``B = alpha op(A) B`` (side "L") or ``B = alpha B op(A)`` (side "R"), A triangular.

    Collective on B's grid; arguments, dtypes and errors as :func:`pdtrsm`.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    args = check_tri_args("PDTRMM", side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb = args
    apply_triangle(side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb, solve=False)
