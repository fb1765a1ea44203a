"""PBLAS level-3 routines PDGEMM and PDSYMM with ScaLAPACK semantics, 0-based offsets.

Semantics kept from PBLAS: only C's submatrix ``C(ic:ic+m, jc:jc+n)`` is written; ``alpha == 0`` (or
``k == 0``) does not read A or B; ``beta == 0`` does not read C (NaNs there are overwritten); PDSYMM never
reads the triangle of A that ``uplo`` excludes. Illegal arguments raise
:class:`~ftkit.errors.PBLASArgumentError` carrying the argument's 1-based position in the PBLAS (Fortran)
calling sequence, where every matrix is followed by its descriptor:

- PDGEMM: TRANSA 1, TRANSB 2, M 3, N 4, K 5, ALPHA 6, A 7, IA 8, JA 9, DESCA 10, B 11, IB 12, JB 13, DESCB 14,
  BETA 15, C 16, IC 17, JC 18, DESCC 19.
- PDSYMM: SIDE 1, UPLO 2, M 3, N 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, B 10, IB 11, JB 12, DESCB 13, BETA 14,
  C 15, IC 16, JC 17, DESCC 18.

Checks use only the arguments, which every rank passes identically, so every rank raises the same error before
any communication and none is left waiting.
"""

from __future__ import annotations

import numbers

import numpy as np

from ...errors import PBLASArgumentError
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix
from ._cannon import run_cannon
from ._operands import aligned_operands
from ._panel_buffers import pooled_buffer, release_pool
from ._redistribute import Move, Pool, redistribute_many
from ._summa import PanelExchange, run_summa
from ._tri_sweep import triangle_extent

__all__ = ["pdgemm", "pdsymm", "cannon"]


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _check_flag(routine: str, pos: int, name: str, value: object, allowed: str) -> str:
    if not isinstance(value, str) or value.upper() not in allowed:
        raise PBLASArgumentError(routine, pos, f"{name}={value!r}; use one of {', '.join(allowed)}")
    return value.upper()


def _check_dim(routine: str, pos: int, name: str, value: object) -> int:
    if not _is_int(value) or int(value) < 0:  # type: ignore[call-overload]
        raise PBLASArgumentError(routine, pos, f"{name}={value!r}; must be an integer >= 0")
    return int(value)  # type: ignore[call-overload]


def _check_scalar(routine: str, pos: int, name: str, value: object) -> float:
    if not _is_real(value):
        raise PBLASArgumentError(routine, pos, f"{name}={value!r}; must be a real number")
    return float(value)  # type: ignore[arg-type]


def _check_matrix(routine: str, pos: int, name: str, mat: object, i: object, j: object, rows: int, cols: int,
                  context: int | None) -> tuple[int, int]:
    """Check a matrix argument at ``pos`` (its offsets are ``pos+1``, ``pos+2``, descriptor ``pos+3``)."""
    if not isinstance(mat, DistributedMatrix):
        raise PBLASArgumentError(routine, pos,
                                 f"{name} must be a DistributedMatrix, got {type(mat).__name__}")
    iname, jname = f"i{name.lower()}", f"j{name.lower()}"
    for p, nm, v in ((pos + 1, iname, i), (pos + 2, jname, j)):
        if not _is_int(v) or int(v) < 0:  # type: ignore[call-overload]
            raise PBLASArgumentError(routine, p, f"{nm}={v!r}; offsets are 0-based integers >= 0")
    i0, j0 = int(i), int(j)  # type: ignore[call-overload]
    M, N = mat.desc.m, mat.desc.n
    if rows > 0 and cols > 0:
        if i0 + rows > M:
            raise PBLASArgumentError(routine, pos + 1, f"{iname}={i0}: the {rows} x {cols} submatrix of "
                                     f"{name} "
                                     f"needs rows {i0}..{i0 + rows - 1} but {name} has {M} rows")
        if j0 + cols > N:
            raise PBLASArgumentError(routine, pos + 2, f"{jname}={j0}: the {rows} x {cols} submatrix of "
                                     f"{name} "
                                     f"needs columns {j0}..{j0 + cols - 1} but {name} has {N} columns")
    if context is not None and mat.desc.context != context:
        raise PBLASArgumentError(routine, pos + 3, f"desc{name.lower()}: {name} lives on a different process "
                                 f"grid (context {mat.desc.context}) than C (context {context}); "
                                 "create all operands on one ProcessGrid")
    return i0, j0


def _scale(c: np.ndarray, beta: float) -> None:
    if beta == 0.0:
        c[...] = 0.0  # not c *= 0: NaNs in C must not survive
    elif beta != 1.0:
        c *= beta


def _gemm(transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int,
          ja: int, B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
          jc: int,
          algorithm: str, width: int | None, exchange: PanelExchange | None,
          stats: dict[str, float] | None = None) -> None:
    if m == 0 or n == 0:
        return
    if alpha == 0.0 or k == 0:
        _scale(C.local_view(ic, jc, m, n), beta)
        return
    ops = aligned_operands(transa, transb, m, n, k, A, ia, ja, B, ib, jb, C, ic, jc,
                           same_kmap=algorithm == "cannon")
    if algorithm == "cannon":
        _scale(ops.c, beta)
        run_cannon(C.grid, ops.a, ops.b, ops.c, ops.ka, alpha, stats=stats)
    else:
        # beta == 0 is left to the first local GEMM (one pass over C fewer, same bits). Other betas scale C
        # first: BLAS may fuse alpha*AB + beta*C into one FMA, which would round differently from ft_pdgemm.
        if beta != 0.0:
            _scale(ops.c, beta)
        run_summa(C.grid, ops.a, ops.b, ops.c, ops.ka, ops.kb, alpha, width=width, exchange=exchange,
                  stats=stats, beta=0.0 if beta == 0.0 else 1.0)


def check_symm_args(routine, side, uplo, m, n, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc):  # type: ignore[no-untyped-def]
    """Check PDSYMM's arguments 1-15 as PBLAS does; return them normalized, with A's order ``na``.

    Returns ``(side, uplo, m, n, alpha, ia, ja, ib, jb, beta, ic, jc, na)``. Shared by ``pdsymm`` and
    ``ft_pdsymm``; ``routine`` names the caller in the errors.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position of the first illegal argument.
    """
    r = routine
    side = _check_flag(r, 1, "side", side, "LR")
    uplo = _check_flag(r, 2, "uplo", uplo, "UL")
    m, n = _check_dim(r, 3, "m", m), _check_dim(r, 4, "n", n)
    alpha = _check_scalar(r, 5, "alpha", alpha)
    if not isinstance(C, DistributedMatrix):
        raise PBLASArgumentError(r, 15, f"C must be a DistributedMatrix, got {type(C).__name__}")
    ctx = C.desc.context
    na = m if side == "L" else n
    ia, ja = _check_matrix(r, 6, "A", A, ia, ja, na, na, ctx)
    ib, jb = _check_matrix(r, 10, "B", B, ib, jb, m, n, ctx)
    beta = _check_scalar(r, 14, "beta", beta)
    ic, jc = _check_matrix(r, 15, "C", C, ic, jc, m, n, None)
    return side, uplo, m, n, alpha, ia, ja, ib, jb, beta, ic, jc, na


def check_gemm_args(routine, transa, transb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc):  # type: ignore[no-untyped-def]
    """Check PDGEMM's arguments 1-16 as PBLAS does; return them normalized.

    Returns ``(ta, tb, m, n, k, alpha, ia, ja, ib, jb, beta, ic, jc)`` with "C" mapped to "T". Shared by
    ``pdgemm``, ``ft_pdgemm`` and ``resilient_pdgemm``; ``routine`` names the caller in the errors.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position of the first illegal argument.
    """
    r = routine
    ta = _check_flag(r, 1, "transa", transa, "NTC").replace("C", "T")
    tb = _check_flag(r, 2, "transb", transb, "NTC").replace("C", "T")
    m, n, k = _check_dim(r, 3, "m", m), _check_dim(r, 4, "n", n), _check_dim(r, 5, "k", k)
    alpha = _check_scalar(r, 6, "alpha", alpha)
    if not isinstance(C, DistributedMatrix):
        raise PBLASArgumentError(r, 16, f"C must be a DistributedMatrix, got {type(C).__name__}")
    ctx = C.desc.context
    ar, ac = (m, k) if ta == "N" else (k, m)
    br, bc = (k, n) if tb == "N" else (n, k)
    ia, ja = _check_matrix(r, 7, "A", A, ia, ja, ar, ac, ctx)
    ib, jb = _check_matrix(r, 11, "B", B, ib, jb, br, bc, ctx)
    beta = _check_scalar(r, 15, "beta", beta)
    ic, jc = _check_matrix(r, 16, "C", C, ic, jc, m, n, None)
    return ta, tb, m, n, k, alpha, ia, ja, ib, jb, beta, ic, jc


def check_width(routine: str, width: int | None) -> None:
    """Raise ``PBLASArgumentError`` (position 19) unless SUMMA step ``width`` is None or a positive int."""
    r = routine
    if width is not None and (not _is_int(width) or width < 1):
        raise PBLASArgumentError(r, 19, f"width={width!r}; must be a positive integer")


@names_failures("PDGEMM", "C", "resilient_pdgemm")
def pdgemm(transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int,
           ja: int, B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
           jc: int,
           *, algorithm: str = "summa", width: int | None = None, exchange: PanelExchange | None = None,
           stats: dict[str, float] | None = None) -> None:
    """Compute ``C(ic:ic+m, jc:jc+n) = alpha * op(A)(ia:, ja:) @ op(B)(ib:, jb:) + beta * C(ic:, jc:)``.

    Collective on the grid of C; updates C in place. ``op(X)`` is ``X`` for ``"N"`` and ``X.T`` for ``"T"``
    or ``"C"``; op(A) is ``m x k`` and op(B) ``k x n``. A, B and C may have any block sizes and source
    processes.

    Parameters
    ----------
    transa, transb
        ``"N"``, ``"T"`` or ``"C"`` (case-insensitive).
    m, n, k
        Submatrix sizes (>= 0).
    alpha, beta
        Scalars. ``alpha == 0`` reads neither A nor B; ``beta == 0`` does not read C.
    A, B, C
        Distributed matrices on one process grid.
    ia, ja, ib, jb, ic, jc
        0-based offsets of the submatrices (the top-left entry of op's argument, i.e. of A, not of A.T).
    algorithm
        ``"summa"`` (any grid) or ``"cannon"`` (square grids only).
    width
        SUMMA step width in k (default: several blocks per owner, at least 1024).
    exchange
        Replacement SUMMA panel exchange (see ``ftkit.linalg.pblas._summa.PanelExchange``).
    stats
        If given, the algorithm adds its local-GEMM and wait times to it (see ``run_summa``).

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position, for an illegal flag, negative size, non-real scalar, offset out of
        range, matrices on different grids, or ``algorithm="cannon"`` on a non-square grid (position 19,
        DESCC).
    """
    r = "PDGEMM"
    ta, tb, m, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_gemm_args(
        r, transa, transb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    if algorithm not in ("summa", "cannon"):
        raise PBLASArgumentError(r, 19, f"algorithm={algorithm!r}; use 'summa' or 'cannon'")
    if algorithm == "cannon" and C.grid.nprow != C.grid.npcol:
        raise PBLASArgumentError(r, 19, f"algorithm='cannon' needs a square grid, C's is "
                                 f"{C.grid.nprow} x {C.grid.npcol}; use algorithm='summa'")
    check_width(r, width)
    _gemm(ta, tb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc, algorithm, width, exchange, stats)


def cannon(transa: str, transb: str, m: int, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int,
           ja: int, B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
           jc: int) -> None:
    """PDGEMM computed by Cannon's algorithm; the grid must be square. Arguments as :func:`pdgemm`."""
    pdgemm(transa, transb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc, algorithm="cannon")


def _symmetric_copy(A: DistributedMatrix, ia: int, ja: int, na: int, uplo: str,
                    pool: Pool | None = None) -> DistributedMatrix:
    """Return a copy of A whose ``na x na`` submatrix at (ia, ja) is the full symmetric matrix of its ``uplo``
    triangle; the entries of A's other triangle are never used (theirs come from the mirror).

    With ``pool``, the copy's local array and the mirrored piece are buffers of the process-wide cache held
    by ``pool``, which the caller gives back with :func:`~._panel_buffers.release_pool` once it is done with
    the copy: fresh arrays cost a page fault per page in every call (as system CPU time).
    """
    if pool is None:
        local = A.local.copy(order="F")
    else:
        local = pooled_buffer(pool, "symmetric", A.local.shape, A.local.dtype)
        local[...] = A.local
    W = DistributedMatrix(A.grid, A.desc, local)
    if na == 0:
        return W
    from ._tri_kernel import axpby_rows  # numba: imported at the first use

    rows, cols = A.row_map(ia, na), A.col_map(ja, na)
    mirrored = redistribute_many([Move(A, ia, ja, True, rows, cols)], pool)[0]
    # per local column, the rows of the excluded triangle: those before (uplo L) or after (U) the kept ones
    keep = triangle_extent(rows, cols, A.grid.myrow, A.grid.mycol, uplo == "L")[0]
    other = np.zeros_like(keep)
    if uplo == "L":
        other[1] = keep[0]
    else:
        other[0], other[1] = keep[1], mirrored.shape[0]
    dt = local.dtype.type
    axpby_rows(W.local_view(ia, ja, na, na), mirrored, other, dt(1.0), dt(0.0))  # a copy of those rows
    return W


@names_failures("PDSYMM", "C", "resilient_pdsymm")
def pdsymm(side: str, uplo: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
           B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
           jc: int) -> None:
    """Compute ``C = alpha*A@B + beta*C`` (side "L") or ``C = alpha*B@A + beta*C`` (side "R"), A symmetric.

    Collective on the grid of C; updates ``C(ic:ic+m, jc:jc+n)`` in place. A is ``m x m`` (side "L") or
    ``n x n`` (side "R") at ``(ia, ja)``; only its ``uplo`` triangle (with the diagonal) is referenced.

    Parameters
    ----------
    side
        ``"L"`` or ``"R"``.
    uplo
        ``"U"`` or ``"L"``: which triangle of A holds the matrix.
    m, n
        Size of C's submatrix and of B's (``m x n``).
    alpha, beta
        Scalars, as in :func:`pdgemm`.
    A, B, C
        Distributed matrices on one grid; ``ia, ja, ib, jb, ic, jc`` are 0-based offsets.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    side, uplo, m, n, alpha, ia, ja, ib, jb, beta, ic, jc, na = check_symm_args(
        "PDSYMM", side, uplo, m, n, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    if m == 0 or n == 0:
        return
    if alpha == 0.0:
        _scale(C.local_view(ic, jc, m, n), beta)
        return
    pool: Pool = {}
    W = _symmetric_copy(A, ia, ja, na, uplo, pool)
    if side == "L":
        _gemm("N", "N", m, n, m, alpha, W, ia, ja, B, ib, jb, beta, C, ic, jc, "summa", None, None)
    else:
        _gemm("N", "N", m, n, n, alpha, B, ib, jb, W, ia, ja, beta, C, ic, jc, "summa", None, None)
    release_pool(pool)  # not after an exception: a transfer of W's panels may be pending
