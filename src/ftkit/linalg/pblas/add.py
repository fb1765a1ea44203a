"""PBLAS matrix additions PDGEADD, PDTRADD and PDTRAN with ScaLAPACK semantics, 0-based offsets.

``C(ic:ic+m, jc:jc+n) := beta * C + alpha * op(A)``: PDGEADD on the whole submatrix, PDTRADD on its ``uplo``
trapezoid only (entries ``i <= j`` of the submatrix for "U", ``i >= j`` for "L"; the rest of C stays bit for
bit, and the matching part of op(A) is all that is used), PDTRAN with ``op(A) = A.T``. ``alpha == 0`` does
not read A; ``beta == 0`` does not read C (NaNs there are overwritten). float64 or float32 (A of C's dtype).
Every entry is ``beta * c + alpha * a`` in C's dtype, as one would compute it with numpy.

Argument positions in the PBLAS calling sequence (errors: :class:`~ftkit.errors.PBLASArgumentError`):

- PDGEADD: TRANS 1, M 2, N 3, ALPHA 4, A 5, IA 6, JA 7, DESCA 8, BETA 9, C 10, IC 11, JC 12, DESCC 13.
- PDTRADD: UPLO 1, TRANS 2, M 3, N 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, BETA 10, C 11, IC 12, JC 13,
  DESCC 14.
- PDTRAN: M 1, N 2, ALPHA 3, A 4, IA 5, JA 6, DESCA 7, BETA 8, C 9, IC 10, JC 11, DESCC 12.
"""

from __future__ import annotations

import numpy as np

from ...errors import PBLASArgumentError
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix
from ._panel_buffers import release_pool
from ._redistribute import Move, Pool, redistribute_many, same_layout
from ._tri_sweep import triangle_extent
from .gemm import _check_dim, _check_flag, _check_matrix, _check_scalar
from .triangular import check_dtype

__all__ = ["pdgeadd", "pdtradd", "pdtran", "trapezoid_mask", "check_add_args"]


def trapezoid_mask(C: DistributedMatrix, ic: int, jc: int, m: int, n: int, uplo: str) -> np.ndarray:
    """Return the boolean mask of this process's entries of ``C(ic:ic+m, jc:jc+n)`` in its ``uplo`` part
    (``i <= j`` for "U", ``i >= j`` for "L", in submatrix indices), shaped like ``C.local_view(...)``."""
    r = C.row_map(ic, m).indices_on(C.grid.myrow)[:, None]
    c = C.col_map(jc, n).indices_on(C.grid.mycol)[None, :]
    return (r <= c) if uplo == "U" else (r >= c)


def _add_args(r: str, first: int, trans: str, m: object, n: object, alpha: object, A: object, ia: object,
              ja: object, beta: object, C: object, ic: object, jc: object) -> tuple:  # type: ignore[type-arg]
    """Check M N ALPHA A IA JA DESCA BETA C IC JC DESCC, M at position ``first``; return them normalized."""
    m, n = _check_dim(r, first, "m", m), _check_dim(r, first + 1, "n", n)
    alpha = _check_scalar(r, first + 2, "alpha", alpha)
    if not isinstance(C, DistributedMatrix):
        raise PBLASArgumentError(r, first + 8, f"C must be a DistributedMatrix, got {type(C).__name__}")
    ar, ac = (m, n) if trans == "N" else (n, m)
    ia, ja = _check_matrix(r, first + 3, "A", A, ia, ja, ar, ac, C.desc.context)
    check_dtype(r, first + 6, "A", A, C.dtype)  # type: ignore[arg-type]
    beta = _check_scalar(r, first + 7, "beta", beta)
    ic, jc = _check_matrix(r, first + 8, "C", C, ic, jc, m, n, None)
    return m, n, alpha, ia, ja, beta, ic, jc


def check_add_args(routine: str, uplo: str | None, trans: str | None, m: int, n: int, alpha: float,
                   A: DistributedMatrix, ia: int, ja: int, beta: float, C: DistributedMatrix, ic: int,
                   jc: int) -> tuple[str | None, str, int, int, float, int, int, float, int, int]:
    """Check PDGEADD's (``uplo=None``), PDTRADD's or PDTRAN's (``trans=None``) arguments as PBLAS does.

    Returns ``(uplo, trans, m, n, alpha, ia, ja, beta, ic, jc)`` normalized (``"C"`` mapped to ``"T"``,
    PDTRAN's ``trans`` is ``"T"``). Shared by the plain and the failure-tolerant routines; ``routine`` names
    the caller in the errors.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position of the first illegal argument (see the module docstring).
    """
    r, first = routine, 1
    if uplo is not None:
        uplo, first = _check_flag(r, 1, "uplo", uplo, "UL"), 2
    if trans is None:
        trans = "T"
    else:
        trans, first = _check_flag(r, first, "trans", trans, "NTC").replace("C", "T"), first + 1
    m, n, alpha, ia, ja, beta, ic, jc = _add_args(r, first, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    return uplo, trans, m, n, alpha, ia, ja, beta, ic, jc


def add(trans: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float,
        C: DistributedMatrix, ic: int, jc: int, uplo: str | None = None) -> None:
    """``C := beta C + alpha op(A)`` on checked arguments, on the ``uplo`` trapezoid if given (collective).

    C is updated in place in one compiled pass over its trapezoid's rows (no temporaries, the rest of C not
    read); op(A) is read in place when it is laid out as C and is not C's own memory, else moved first."""
    if m == 0 or n == 0 or (alpha == 0.0 and beta == 1.0):
        return
    from ._tri_kernel import axpby_rows  # numba: imported at the first use

    c = C.local_view(ic, jc, m, n)
    rows, cols = C.row_map(ic, m), C.col_map(jc, n)
    a = c  # not read when alpha is 0
    pool: Pool = {}  # the moved op(A): a buffer of the process-wide cache (fresh pages fault in every call)
    if alpha != 0.0:
        if same_layout(A, ia, ja, trans == "T", rows, cols) and not np.may_share_memory(A.local, C.local):
            a = A.local_view(ia, ja, m, n)
        else:
            a = redistribute_many([Move(A, ia, ja, trans == "T", rows, cols)], pool)[0]
    if uplo is None:  # per local column, the rows of the trapezoid
        keep = np.zeros((2, c.shape[1]), np.int64)
        keep[1] = c.shape[0]
    else:
        keep = triangle_extent(rows, cols, C.grid.myrow, C.grid.mycol, uplo == "L")[0]
    dt = c.dtype.type
    axpby_rows(c, a, keep, dt(alpha), dt(beta))
    release_pool(pool)


@names_failures("PDGEADD", "C", "resilient_pdgeadd")
def pdgeadd(trans: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float,
            C: DistributedMatrix, ic: int, jc: int) -> None:
    """Compute ``C(ic:ic+m, jc:jc+n) = beta * C + alpha * op(A)(ia:, ja:)`` (collective on C's grid).

    Parameters
    ----------
    trans
        ``"N"``, ``"T"`` or ``"C"``; ``op(A)`` is ``m x n`` (A is ``n x m`` when transposed).
    m, n
        Size of C's submatrix.
    alpha, beta
        Scalars; ``alpha == 0`` does not read A, ``beta == 0`` does not read C.
    A, C
        Distributed matrices on one grid, of one dtype; ``ia, ja, ic, jc`` are 0-based offsets.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    _, trans, m, n, alpha, ia, ja, beta, ic, jc = check_add_args(
        "PDGEADD", None, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    add(trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)


@names_failures("PDTRADD", "C", "resilient_pdtradd")
def pdtradd(uplo: str, trans: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
            beta: float, C: DistributedMatrix, ic: int, jc: int) -> None:
    """Compute ``C = beta * C + alpha * op(A)`` on the ``uplo`` trapezoid of ``C(ic:ic+m, jc:jc+n)``.

    Collective on C's grid. Arguments as :func:`pdgeadd`, plus ``uplo`` (``"U"``: entries ``i <= j`` of the
    submatrix, ``"L"``: ``i >= j``); C's other entries stay bit for bit.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    part, trans, m, n, alpha, ia, ja, beta, ic, jc = check_add_args(
        "PDTRADD", uplo, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    add(trans, m, n, alpha, A, ia, ja, beta, C, ic, jc, part)


@names_failures("PDTRAN", "C", "resilient_pdtran")
def pdtran(m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float,
           C: DistributedMatrix, ic: int, jc: int) -> None:
    """Compute ``C(ic:ic+m, jc:jc+n) = beta * C + alpha * A(ia:ia+n, ja:ja+m).T`` (collective).

    Arguments as :func:`pdgeadd` with ``trans="T"``.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    _, _, m, n, alpha, ia, ja, beta, ic, jc = check_add_args(
        "PDTRAN", None, None, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    add("T", m, n, alpha, A, ia, ja, beta, C, ic, jc)
