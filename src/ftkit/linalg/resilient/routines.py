"""PDTRMM, PDSYRK and PDSYR2K that survive process failures: their :class:`ProductForm` for
:func:`~ftkit.linalg.resilient.engine.resilient_call` (the scheme of :mod:`ftkit.linalg.resilient`).

Each routine says what it computes as one product ``C = alpha op(A) op(B) + beta C`` the scheme can save,
exchange with deadlines and recompute (and verify with block checksums) from:

- ``resilient_pdtrmm``: ``B := alpha T B`` (side "L") or ``alpha B T`` (side "R"), where ``T`` is the
  triangle of ``op(A)`` (the other triangle zeroed, a unit diagonal written for ``diag="U"``; neither is
  read), made as the plain :func:`~ftkit.linalg.pdtrmm` makes it
  (:func:`~ftkit.linalg.pblas._tri_sweep.triangle_operand`) straight in the layout the product needs, and
  the multiplied B is a copy of B's submatrix: the product's output is B itself, with ``beta = 0``. Both are
  built by the form's ``align`` step; each step multiplies only into the band of B its part of ``T``
  reaches (``triangular=`` of the form), so the flops are the triangle's, not the square's.
- ``resilient_pdsyrk``: ``C := alpha op(A) op(A).T + beta C`` on the ``uplo`` triangle (``triangle=`` of
  the form, with its ``keep`` mask): each process multiplies the panels only into its tiles of the triangle,
  cut as the plain :func:`~ftkit.linalg.pdsyrk` cuts them (:func:`~ftkit.linalg.pblas.rank_k.staircase`), so
  the error-free result is the plain routine's bit for bit; the other triangle of C stays bit for bit, also
  in a dead process's tiles (recomputed whole from the stored operands, then masked).
- ``resilient_pdsyr2k``: ``alpha [op(A) op(B)] [op(B) op(A)].T + beta C``: one product of inner dimension
  ``2k`` (the two concatenated operands are built by ``prepare``) on the same tiles: the flops of the plain
  routine's two products, rounded in another order.
Each has a protector with :func:`~ftkit.linalg.protect_operands`' contract (``protect_pdtrsm``,
``protect_pdtrmm``, ``protect_pdsyrk``, ``protect_pdsyr2k``: the routine's arguments without alpha and
beta): it builds the operands that do not change between calls once and saves them; its handle, passed as
``store=``, makes a call skip that ``prepare`` work, its redistribution and its saving (for PDTRSM and PDTRMM
the triangle's side: B is their output, each call still copies and saves it). ``prepare`` is a plain
collective: a process that dies in it fails the call alike on every survivor (:class:`ProcessFailure`); from
the moment the inputs are saved, a failure is survived.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ...failure import FailureDetector
from ...storage.inputs import InputStore
from .._grid_failure import handles_failures
from ..matrix import DistributedMatrix
from ..pblas._operands import AlignedOperands
from ..pblas._tri_sweep import tri_cols, triangle_operand
from ..pblas.add import pdgeadd
from ..pblas.rank_k import check_rank_args
from ..pblas.triangular import check_tri_args, pdtrsm
from ._call_state import ResilientResult
from .engine import resilient_call
from .form import ProductForm
from .form_protection import check_protected, protect_form
from .protected import Operands, ProtectedOperands

__all__ = ["resilient_pdtrsm", "resilient_pdtrmm", "resilient_pdsyrk", "resilient_pdsyr2k", "protect_pdtrsm",
           "protect_pdtrmm", "protect_pdsyrk", "protect_pdsyr2k"]

Store = InputStore | str | os.PathLike[str]


def identity_like(M: DistributedMatrix, n: int, mb: int, nb: int) -> DistributedMatrix:
    """The ``n x n`` identity on M's grid, of M's dtype, in ``mb x nb`` blocks (local, no communication)."""
    eye = DistributedMatrix.zeros(M.grid, n, n, mb=mb, nb=nb, dtype=M.dtype)
    eye.local[...] = eye.global_rows()[:, None] == eye.global_cols()[None, :]
    return eye


def triangle_keep(uplo: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The ``keep`` mask of the ``uplo`` triangle (with the diagonal), in submatrix indices."""
    if uplo == "U":
        return lambda r, c: r[:, None] <= c[None, :]
    return lambda r, c: r[:, None] >= c[None, :]


def _copy_into(buf: np.ndarray | None, c: np.ndarray) -> np.ndarray:
    """``c`` copied into ``buf`` if it is an F-order array of c's shape and dtype, else into a new one."""
    if buf is None or buf.shape != c.shape or buf.dtype != c.dtype or not buf.flags.f_contiguous:
        return np.array(c, order="F")
    np.copyto(buf, c)
    return buf


def _trmm_form(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float,
               A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int) -> ProductForm:
    """PDTRMM as a product: the triangle ``T = tri(op(A))`` (made once when protected) times a copy of B,
    each step multiplied into the band of B the triangle reaches."""
    side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb = check_tri_args(
        "PDTRMM", side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    na = m if side == "L" else n
    lower = (uplo == "L") != (transa == "T")  # T's triangle, after the transposition

    def align(saved: AlignedOperands | None) -> AlignedOperands:
        # T is made as the plain pdtrmm makes it (redistributed straight into the layout the product needs,
        # the triangle written in place by one compiled pass), on B's rows (side "L") or columns ("R") and
        # the same blocks over the other grid axis; B's own piece is then the other operand, copied (B is the
        # output: the multiplied B must not change under the steps). A call on a handle copies it into the
        # copy the protection made (no call uses it any more): nothing allocated, page-faulted and freed.
        g = B.grid
        c = B.local_view(ib, jb, m, n)
        x = _copy_into(None if saved is None else saved.b if side == "L" else saved.a, c)
        crows, ccols = B.row_map(ib, m), B.col_map(jb, n)
        if side == "L":
            tcols = tri_cols(crows, g.npcol)
            t = saved.a if saved is not None else triangle_operand(A, ia, ja, transa == "T", lower,
                                                                   diag == "U", crows, tcols)  # fmt: skip
            return AlignedOperands(t, x, c, tcols, crows, crows, ccols, ("A",))
        trows = tri_cols(ccols, g.nprow)
        t = saved.b if saved is not None else triangle_operand(A, ia, ja, transa == "T", lower, diag == "U",
                                                               trows, ccols)  # fmt: skip
        return AlignedOperands(x, t, c, ccols, trows, crows, ccols, ("B",))

    return ProductForm("PDTRMM", "N", "N", m, n, na, alpha, A, ia, ja, B, ib, jb, 0.0, B, ib, jb,
                       fixed="a" if side == "L" else "b", flags=(side, uplo, transa, diag), align=align,
                       triangular=("a" if side == "L" else "b", "L" if lower else "U"))  # fmt: skip


def _trsm_form(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float,
               A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int) -> ProductForm:
    """PDTRSM as a product: ``inv(op(T))`` (built once when protected) times a copy of B."""
    side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb = check_tri_args(
        "PDTRSM", side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    na = m if side == "L" else n

    def prepare(previous: Operands | None = None) -> Operands:
        if previous is None:
            X = identity_like(B, na, A.desc.mb, A.desc.nb)  # on B's grid (A's), of B's dtype
            pdtrsm(side, uplo, transa, diag, na, na, 1.0, A, ia, ja, X, 0, 0)  # X = inv(op(T))
        else:
            X = previous[0] if side == "L" else previous[3]  # the inverse built when protected
        Y = B.copy()  # B is the output: the multiplied B must not change under the steps
        return (X, 0, 0, Y, ib, jb) if side == "L" else (Y, ib, jb, X, 0, 0)

    return ProductForm("PDTRSM", "N", "N", m, n, na, alpha, A, ia, ja, B, ib, jb, 0.0, B, ib, jb, prepare,
                       fixed="a" if side == "L" else "b", flags=(side, uplo, transa, diag))  # fmt: skip


@handles_failures
def resilient_pdtrmm(
    side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float, A: DistributedMatrix,
    ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int, *, store: InputStore | str | ProtectedOperands,
    timeout: float | None = None, width: int | None = None, detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None, stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``B = alpha op(A) B`` (side "L") or ``B = alpha B op(A)`` (side "R"), A triangular, surviving
    process failures.

    Collective on B's grid; arguments and semantics as :func:`ftkit.linalg.pdtrmm` (only the ``uplo``
    triangle of A is read, not its diagonal for ``diag="U"``; nothing of B outside its submatrix changes),
    the keyword arguments and the result as :func:`~ftkit.linalg.resilient.resilient_pdgemm`: after a
    failure, :attr:`ResilientResult.C` is the whole B on the survivors' grid. ``store=`` may be the handle
    of :func:`protect_pdtrmm` for this A and these arguments (A's triangle built and saved once).

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdtrmm), or protected operands that do not belong to this call
        (position 16).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient.resilient_pdgemm`.
    """
    form = _trmm_form(side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    check_protected(form, store, 16)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


@handles_failures
def resilient_pdtrsm(
    side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float, A: DistributedMatrix,
    ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int, *, store: InputStore | str | ProtectedOperands,
    timeout: float | None = None, width: int | None = None, detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None, stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Solve ``op(A) X = alpha B`` (side "L") or ``X op(A) = alpha B`` (side "R") for X, A triangular,
    overwriting B, surviving process failures.

    Collective on B's grid; arguments and semantics as :func:`ftkit.linalg.pdtrsm` (only the ``uplo``
    triangle of A is read, not its diagonal for ``diag="U"``; nothing of B outside its submatrix changes),
    the keyword arguments and the result as :func:`~ftkit.linalg.resilient_pdgemm`: after a failure,
    :attr:`ResilientResult.C` is the whole B on the survivors' grid.

    How: the form's ``prepare`` step inverts the triangle explicitly (``inv(op(T))``, the plain
    :func:`~ftkit.linalg.pdtrsm` applied to the identity: a collective of the solve's own cost) and copies
    B; the scheme then survives failures in the product ``B := alpha inv(op(T)) B`` (or ``alpha B
    inv(op(T))``) as in :func:`resilient_pdtrmm`. The result is the solve's to within the rounding of an
    explicit inverse (``cond(T)`` times the unit roundoff, relative), not bit for bit the plain solve's; a
    process that dies in ``prepare`` fails the call alike on every survivor. ``store=`` may be the handle of
    :func:`protect_pdtrsm` for this A and these arguments: the inverse is then built and saved once, and
    every call solving with it is the product alone.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdtrsm), or protected operands that do not belong to this call
        (position 16).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient_pdgemm`.
    """
    form = _trsm_form(side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    check_protected(form, store, 16)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


@handles_failures
def protect_pdtrmm(side: str, uplo: str, transa: str, diag: str, m: int, n: int, A: DistributedMatrix,
                   ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int, *, store: Store,
                   timeout: float | None = None) -> ProtectedOperands:
    """Build A's triangle once and save its aligned pieces, for later :func:`resilient_pdtrmm` calls.

    Collective on B's grid. Arguments as :func:`resilient_pdtrmm` without alpha (B gives the layout; its
    values are not saved: each call saves its own B). The contract, the release and the errors are
    :func:`~ftkit.linalg.protect_operands`': A must not change while the handle is in use.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdtrmm).
    StorageError, ProcessFailure
        As :func:`~ftkit.linalg.protect_operands`.
    """
    return protect_form(_trmm_form(side, uplo, transa, diag, m, n, 1.0, A, ia, ja, B, ib, jb), store=store,
                        timeout=timeout)  # fmt: skip


@handles_failures
def protect_pdtrsm(side: str, uplo: str, transa: str, diag: str, m: int, n: int, A: DistributedMatrix,
                   ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int, *, store: Store,
                   timeout: float | None = None) -> ProtectedOperands:
    """Build ``inv(op(T))`` once and save its aligned pieces, for later :func:`resilient_pdtrsm` calls.

    Collective on B's grid; arguments and contract as :func:`protect_pdtrmm` (A must not change while the
    handle is in use).

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdtrsm).
    StorageError, ProcessFailure
        As :func:`~ftkit.linalg.protect_operands`.
    """
    return protect_form(_trsm_form(side, uplo, transa, diag, m, n, 1.0, A, ia, ja, B, ib, jb), store=store,
                        timeout=timeout)  # fmt: skip


def _concatenated(trans: str, n: int, k: int, A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix,
                  ib: int, jb: int, C: DistributedMatrix) -> Operands:
    """PDSYR2K's operands ``[op(A) op(B)]`` and ``[op(B) op(A)]`` (as ``n x 2k``, or ``2k x n`` stored
    transposed for trans "T"), new matrices on C's grid and blocking (collective)."""
    d = C.desc
    shape = (n, 2 * k) if trans == "N" else (2 * k, n)
    pair = []
    for first, second in (((A, ia, ja), (B, ib, jb)), ((B, ib, jb), (A, ia, ja))):
        W = DistributedMatrix.zeros(C.grid, *shape, mb=d.mb, nb=d.nb, dtype=C.dtype)
        for half, (X, ix, jx) in enumerate((first, second)):
            if trans == "N":
                pdgeadd("N", n, k, 1.0, X, ix, jx, 0.0, W, 0, half * k)
            else:
                pdgeadd("N", k, n, 1.0, X, ix, jx, 0.0, W, half * k, 0)
        pair.append(W)
    return pair[0], 0, 0, pair[1], 0, 0


def _rank_form(routine: str, uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix,
               ia: int, ja: int, B: DistributedMatrix | None, ib: int, jb: int, beta: float,
               C: DistributedMatrix, ic: int, jc: int) -> ProductForm:
    """PDSYRK (``B is None``) or PDSYR2K as one product on the ``uplo`` triangle's tiles (and keep mask)."""
    ta, tb = ("N", "T") if trans == "N" else ("T", "N")
    if B is None:
        return ProductForm(routine, ta, tb, n, n, k, alpha, A, ia, ja, A, ia, ja, beta, C, ic, jc,
                           keep=triangle_keep(uplo), flags=(uplo, trans), triangle=uplo)  # fmt: skip
    Bm = B

    def prepare() -> Operands:
        return _concatenated(trans, n, k, A, ia, ja, Bm, ib, jb, C)

    return ProductForm(routine, ta, tb, n, n, 2 * k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc, prepare,
                       keep=triangle_keep(uplo), flags=(uplo, trans), triangle=uplo)  # fmt: skip


@handles_failures
def resilient_pdsyrk(
    uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int, beta: float,
    C: DistributedMatrix, ic: int, jc: int, *, store: InputStore | str | ProtectedOperands,
    timeout: float | None = None, width: int | None = None, detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None, stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``C = alpha op(A) op(A).T + beta C`` on the ``uplo`` triangle of ``C(ic:ic+n, jc:jc+n)``,
    surviving process failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdsyrk` (the other triangle of C
    stays bit for bit, also after a failure), the keyword arguments and the result as
    :func:`~ftkit.linalg.resilient.resilient_pdgemm`. ``store=`` may be the handle of :func:`protect_pdsyrk`
    for this A and these arguments (op(A) and its transpose aligned and saved once; each call saves C).

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdsyrk), or protected operands that do not belong to this call
        (position 15).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient.resilient_pdgemm`.
    """
    form = _syrk_form(uplo, trans, n, k, alpha, A, ia, ja, beta, C, ic, jc)
    check_protected(form, store, 15)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


@handles_failures
def resilient_pdsyr2k(
    uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
    B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int, jc: int, *,
    store: InputStore | str | ProtectedOperands, timeout: float | None = None, width: int | None = None,
    detector: FailureDetector | None = None, on_step: Callable[[int], None] | None = None,
    stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``C = alpha op(A) op(B).T + alpha op(B) op(A).T + beta C`` on C's ``uplo`` triangle,
    surviving process failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdsyr2k`, the keyword arguments
    and the result as :func:`resilient_pdsyrk`. The product runs with inner dimension ``2k`` on operands
    built first (a collective: a failure in it fails the call alike on every survivor), or once by
    :func:`protect_pdsyr2k`, whose handle ``store=`` may be (A and B must not change while it is in use).

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdsyr2k), or protected operands that do not belong to this call
        (position 19).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient.resilient_pdgemm`.
    """
    form = _syr2k_form(uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    check_protected(form, store, 19)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


def _syrk_form(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
               beta: float, C: DistributedMatrix, ic: int, jc: int) -> ProductForm:
    uplo, trans, n, k, alpha, ia, ja, _, _, beta, ic, jc = check_rank_args(
        "PDSYRK", uplo, trans, n, k, alpha, A, ia, ja, None, 0, 0, beta, C, ic, jc)
    return _rank_form("PDSYRK", uplo, trans, n, k, alpha, A, ia, ja, None, 0, 0, beta, C, ic, jc)


def _syr2k_form(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
                B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
                jc: int) -> ProductForm:
    uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_rank_args(
        "PDSYR2K", uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    return _rank_form("PDSYR2K", uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)


@handles_failures
def protect_pdsyrk(uplo: str, trans: str, n: int, k: int, A: DistributedMatrix, ia: int, ja: int,
                   C: DistributedMatrix, ic: int, jc: int, *, store: Store,
                   timeout: float | None = None) -> ProtectedOperands:
    """Align op(A) and op(A).T once and save them, for later :func:`resilient_pdsyrk` calls.

    Collective on C's grid. Arguments as :func:`resilient_pdsyrk` without alpha and beta (C gives the
    layout; each call saves its own C). Contract, release and errors as
    :func:`~ftkit.linalg.protect_operands`: A must not change while the handle is in use.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdsyrk).
    StorageError, ProcessFailure
        As :func:`~ftkit.linalg.protect_operands`.
    """
    return protect_form(_syrk_form(uplo, trans, n, k, 1.0, A, ia, ja, 0.0, C, ic, jc), store=store,
                        timeout=timeout)  # fmt: skip


@handles_failures
def protect_pdsyr2k(uplo: str, trans: str, n: int, k: int, A: DistributedMatrix, ia: int, ja: int,
                    B: DistributedMatrix, ib: int, jb: int, C: DistributedMatrix, ic: int, jc: int, *,
                    store: Store, timeout: float | None = None) -> ProtectedOperands:
    """Build ``[op(A) op(B)]`` and ``[op(B) op(A)]`` once and save them, for later :func:`resilient_pdsyr2k`
    calls.

    Collective on C's grid; arguments and contract as :func:`protect_pdsyrk` (A and B must not change while
    the handle is in use).

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdsyr2k).
    StorageError, ProcessFailure
        As :func:`~ftkit.linalg.protect_operands`.
    """
    form = _syr2k_form(uplo, trans, n, k, 1.0, A, ia, ja, B, ib, jb, 0.0, C, ic, jc)
    return protect_form(form, store=store, timeout=timeout)
