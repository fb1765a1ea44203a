"""PDGEADD, PDTRADD and PDTRAN that survive process failures: their :class:`~ftkit.linalg.ProductForm` for
:func:`~ftkit.linalg.resilient_call` (the scheme of :mod:`ftkit.linalg.resilient.multiply`).

An addition ``C := beta C + alpha op(A)`` is the product ``C = 1 * W @ I + beta C`` of ``W = alpha op(A)``
(an ``m x n`` matrix on C's grid and blocking, built by the form's ``prepare`` step with the plain
:func:`~ftkit.linalg.pdgeadd`, so each of its entries is rounded as the plain routine rounds it) and the
``n x n`` identity ``I``. Every entry of ``W @ I`` is one entry of W times 1 plus zeros, exact in any
summation order, and is added to ``beta C`` once: the result is the plain routine's bit for bit, with or
without failures (a dead process's tiles are recomputed from the stored W, I and C the same way).

- ``resilient_pdgeadd``: the whole submatrix; ``resilient_pdtran`` is it with ``op(A) = A.T``.
- ``resilient_pdtradd``: W holds only the ``uplo`` trapezoid of ``alpha op(A)`` (the rest zeroed, never
  read: NaN there stays out), and the product's ``keep`` mask leaves C's other entries bit for bit.

Cost and limits: the product costs ``2 m n^2`` flops where the addition costs ``m n``, and it carries
what the scheme carries for a product (W and I are saved, exchanged with deadlines and recomputed); what it
buys is one form the scheme already survives failures in. A non-finite entry of ``op(A)`` (inside the
trapezoid for PDTRADD) turns its whole row of the result into NaN (``Inf * 0``), where the plain routine
changes that entry only. ``prepare`` is a plain collective: a process that dies in it fails the call alike
on every survivor (:class:`~ftkit.errors.ProcessFailure`); from the moment the inputs are saved, a failure
is survived.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...failure import FailureDetector
from ...storage.inputs import InputStore
from .._grid_failure import handles_failures
from ..matrix import DistributedMatrix
from ..pblas.add import check_add_args, pdgeadd, trapezoid_mask
from ._call_state import ResilientResult
from .engine import resilient_call
from .form import ProductForm
from .protected import check_store
from .routines import identity_like, triangle_keep

__all__ = ["resilient_pdgeadd", "resilient_pdtradd", "resilient_pdtran"]

Operands = tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]


def _addition_form(routine: str, uplo: str | None, trans: str, m: int, n: int, alpha: float,
                   A: DistributedMatrix, ia: int, ja: int, beta: float, C: DistributedMatrix, ic: int,
                   jc: int) -> ProductForm:
    """``C := beta C + alpha op(A)`` (on the ``uplo`` trapezoid if given) as ``1 * W @ I + beta C``."""
    d = C.desc

    def prepare() -> Operands:
        W = DistributedMatrix.zeros(C.grid, m, n, mb=d.mb, nb=d.nb, dtype=C.dtype)
        pdgeadd(trans, m, n, alpha, A, ia, ja, 0.0, W, 0, 0)  # alpha op(A), rounded as the plain routine
        if uplo is not None:
            W.local[...] = np.where(trapezoid_mask(W, 0, 0, m, n, uplo), W.local, 0.0)
        return W, 0, 0, identity_like(C, n, d.nb, d.nb), 0, 0

    keep = triangle_keep(uplo) if uplo is not None else None
    one = 1.0 if alpha != 0.0 else 0.0  # alpha == 0: nothing to multiply, C is only scaled (A not read)
    return ProductForm(routine, "N", "N", m, n, n, one, A, ia, ja, A, ia, ja, beta, C, ic, jc, prepare,
                       keep=keep)  # fmt: skip


@handles_failures
def resilient_pdgeadd(
    trans: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float,
    C: DistributedMatrix, ic: int, jc: int, *, store: InputStore | str, timeout: float | None = None,
    width: int | None = None, detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None, stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``C(ic:ic+m, jc:jc+n) = beta * C + alpha * op(A)(ia:, ja:)``, surviving process failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdgeadd` (the result bit for bit
    the plain routine's, also after a failure; see the module docstring for the cost and for non-finite
    entries of A), the keyword arguments and the result as :func:`~ftkit.linalg.resilient_pdgemm`.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdgeadd), or ``store=`` protected operands (position 14).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient_pdgemm`.
    """
    _, trans, m, n, alpha, ia, ja, beta, ic, jc = check_add_args(
        "PDGEADD", None, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    check_store("PDGEADD", 14, store)
    form = _addition_form("PDGEADD", None, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


@handles_failures
def resilient_pdtradd(
    uplo: str, trans: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float,
    C: DistributedMatrix, ic: int, jc: int, *, store: InputStore | str, timeout: float | None = None,
    width: int | None = None, detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None, stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``C = beta * C + alpha * op(A)`` on the ``uplo`` trapezoid of ``C(ic:ic+m, jc:jc+n)``,
    surviving process failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdtradd` (C's other entries stay
    bit for bit, also in a dead process's tiles; the other part of op(A) is not used), the keyword arguments
    and the result as :func:`resilient_pdgeadd`.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdtradd), or ``store=`` protected operands (position 15).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient_pdgemm`.
    """
    part, trans, m, n, alpha, ia, ja, beta, ic, jc = check_add_args(
        "PDTRADD", uplo, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    check_store("PDTRADD", 15, store)
    form = _addition_form("PDTRADD", part, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


@handles_failures
def resilient_pdtran(
    m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float, C: DistributedMatrix,
    ic: int, jc: int, *, store: InputStore | str, timeout: float | None = None, width: int | None = None,
    detector: FailureDetector | None = None, on_step: Callable[[int], None] | None = None,
    stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``C(ic:ic+m, jc:jc+n) = beta * C + alpha * A(ia:ia+n, ja:ja+m).T``, surviving process failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdtran`, the keyword arguments
    and the result as :func:`resilient_pdgeadd`.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdtran), or ``store=`` protected operands (position 13).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient_pdgemm`.
    """
    _, trans, m, n, alpha, ia, ja, beta, ic, jc = check_add_args(
        "PDTRAN", None, None, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    check_store("PDTRAN", 13, store)
    form = _addition_form("PDTRAN", None, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip
