"""PDGEMM that survives process failures in the middle: "keep going, settle up at the end" (FT-PBLAS 2.3).

:func:`resilient_pdgemm` runs SUMMA with a failure-aware panel exchange and proceeds in four phases.

1. **Protect.** Every process saves its aligned local operands (its rows of op(A), its columns of op(B))
   and its whole local C (as it was on entry) in an :class:`~ftkit.storage.inputs.InputStore` every rank
   can read (a directory on the shared file system: the checkpoint L4 level), then all synchronize with a
   deadline. The grid's failure detector is set up between the two, once per grid (later calls reuse it):
   after the saves, so a process killed during the set-up has saved its inputs, and the set-up survives
   its death (the survivors start with it dead; :mod:`ftkit.linalg.resilient.protected`).
2. **Iterate.** SUMMA panels (or Cannon's neighbour shifts, ``algorithm="cannon"``) travel point to point
   with a deadline (:class:`~ftkit.failure.FailureDetector`). A process that dies (ULFM reports it) or misses
   the deadline is declared dead; everyone is told, stops talking to it, and from then on takes its share of
   every panel (in Cannon: the piece it would have passed on) from the stored operands instead of waiting
   for it. The survivors finish all the steps; nobody computes the dead processes' C blocks yet.
3. **Agree and repair.** Survivors agree (ULFM ``Agree``) on the set of dead processes, build a repaired
   communicator (``Shrink`` + split) without them, agree (one more ``Agree``) that it holds exactly them and
   that every input could be read, and record the dead in the state table (identical everywhere).
4. **Settle up.** Every dead process's piece of C is cut into ``mb x nb`` tiles, spread round-robin over the
   survivors (not all on one), recomputed from the stored operands, and every block of every tile is verified
   with the block checksums and rigorous bound of :mod:`ftkit.linalg.checksums`
   (:mod:`ftkit.linalg.resilient._settle`). The call ends with one ``Agree`` (never a plain collective), so
   every survivor leaves with the same decision, and one more ``Agree`` whose failures are ignored
   (:func:`~ftkit.linalg.resilient._call_state.hold_decision`, also after the error-free path's agreement):
   ULFM's ``Agree`` may return on one process before its decision has reached another, so without it a
   survivor that returns and exits at once could look like a failure during the agreement to one the
   decision has not reached yet, which would then decide differently.

The phases are run by :func:`resilient_call` (:mod:`ftkit.linalg.resilient.engine`) on a
:class:`ProductForm`: what the routine computes, as a product of operands the scheme can save, exchange with
deadlines and recompute from (the per-routine description of which operand blocks each output block needs).
:func:`resilient_pdgemm` and :func:`resilient_pdsymm` are such forms; the panel exchanges of the iterate
phase are in :mod:`ftkit.linalg.resilient._failure_exchange`, the settle phase in
:mod:`ftkit.linalg.resilient._settle`.

What the result check guards, and why it cannot be skipped
    A block checksum only proves that a tile is the product of the operands it was computed from; it cannot
    see wrong operands (the checksums are taken from the same data). So no wrong operand may reach a tile:
    every stored piece a survivor needs is read, and its shape checked, *before* the survivors agree that
    the inputs are complete (a piece that cannot be read fails the call on every survivor, where it was
    once silently replaced by zeros, which the checksums then happily confirmed); with
    :func:`~ftkit.linalg.protect_operands` the multiply uses the very operands that were saved
    (no second redistribution, which a failure could interrupt on some ranks and not on others); a failure
    while the operands are being redistributed (``store=`` a directory) fails the call uniformly. Then the
    survivors agree, in one ULFM agreement every one of them takes part in, that every block of every dead
    process was verified (or could not be checked: non-finite data, counted in
    :attr:`ResilientResult.tiles_unchecked`) and that the whole result reached the survivors' grid;
    otherwise every survivor raises the same :class:`~ftkit.errors.ABFTError` (or
    :class:`~ftkit.errors.ProcessFailure`). No path returns a result without that agreement.

Where the result lives (ownership change)
    Without failures the result is the caller's ``C``, on the caller's grid, as with ``pdgemm``. With failures
    the original grid contains dead processes and can no longer run collectives, so the whole matrix C (every
    entry, also those outside the updated submatrix) is **redistributed onto a new, most-square grid of the
    survivors** (``ProcessGrid.square`` of the repaired communicator, same block sizes and sources):
    survivors send their own blocks; a dead process's recomputed tiles are sent by the survivors that
    recomputed them, and its entries outside the submatrix come from its stored C.
    :attr:`ResilientResult.C` is
    that matrix, :attr:`ResilientResult.grid` / ``comm`` the new grid and communicator to keep working on. The
    caller's ``C`` object still holds the survivors' own updated blocks on the old grid.

A process that was declared dead while alive (too slow: see :mod:`ftkit.failure.detect`) joins the agreement,
gets no part of the result, and raises :class:`~ftkit.failure.Fenced`. If a dead process's inputs cannot
be read back (it died before saving them, or more failures than the store survives), or a process failed
while the operands were being redistributed, every survivor raises the same
:class:`~ftkit.errors.ProcessFailure`; nothing hangs. A process that cannot save its inputs (a full disk)
makes every process raise the same :class:`~ftkit.errors.StorageError`. A process whose own code raises
during the multiply (not a failure) withdraws: the others treat it as dead at once and finish without it,
and it raises its error after the agreements, so nobody waits for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ...failure import FailureDetector
from ...storage.inputs import InputStore
from .._grid_failure import handles_failures
from ..matrix import DistributedMatrix
from ..pblas.gemm import _symmetric_copy, check_gemm_args, check_symm_args
from ._call_state import ResilientResult
from .engine import resilient_call
from .form import ProductForm
from .form_protection import check_protected, protect_form
from .protected import ProtectedOperands, check_algorithm, operands_key

__all__ = ["ProductForm", "ResilientResult", "resilient_call", "resilient_pdgemm", "resilient_pdsymm",
           "protect_pdsymm"]


@handles_failures
def resilient_pdgemm(
    transa: str,
    transb: str,
    m: int,
    n: int,
    k: int,
    alpha: float,
    A: DistributedMatrix,
    ia: int,
    ja: int,
    B: DistributedMatrix,
    ib: int,
    jb: int,
    beta: float,
    C: DistributedMatrix,
    ic: int,
    jc: int,
    *,
    store: InputStore | str | ProtectedOperands,
    timeout: float | None = None,
    width: int | None = None,
    detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None,
    stats: dict[str, float] | None = None,
    algorithm: str = "summa",
) -> ResilientResult:
    """Compute ``C(ic:,jc:) = alpha*op(A)(ia:,ja:) @ op(B)(ib:,jb:) + beta*C(ic:,jc:)``, surviving failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdgemm` (SUMMA). See the module
    docstring for the phases and for where the result lives after a failure.

    Parameters
    ----------
    store
        Where every process's inputs are saved and a dead process's inputs are read back: an
        :class:`~ftkit.storage.inputs.InputStore` or a directory path readable by every rank (the L4 /
        ``glbl_dir`` directory), where ftkit checkpoint files
        (:class:`~ftkit.storage.inputs.CheckpointFileStore`, without fsync: why, and how to have it, in
        :mod:`~ftkit.linalg.resilient.protected`) are written. The call's files are removed when it returns
        (each process its own; after a failure, by the survivors). Or the
        :class:`~ftkit.linalg.ProtectedOperands` of :func:`~ftkit.linalg.protect_operands`
        for this A, B and these arguments: A and B were saved once beforehand and this call writes at most C
        (only if ``beta != 0`` or it updates part of C), which makes its error-free cost the failure-aware
        SUMMA alone.
    timeout
        Seconds to wait for a peer before declaring it dead (default: 10 x measured round trip, at least
        :data:`ftkit.failure.detect.DEFAULT_MIN_TIMEOUT`).
    width
        SUMMA step width in k (default as pdgemm).
    detector
        A :class:`~ftkit.failure.FailureDetector` on C's grid communicator to reuse (default: a new one).
    on_step
        Called with the step index before each step's exchange starts (fault-injection hook for tests).
    algorithm
        ``"summa"`` (any grid) or ``"cannon"`` (square grids: each step passes A one process left and B one
        process up; a dead neighbour's hop is replaced by reading the piece's owner's stored operand).
    stats
        If given, filled with this process's phase times in seconds: ``protect_s`` (saving inputs and the
        synchronization after), ``iterate_s`` (the SUMMA steps), ``settle_s`` (agreement, repair, recompute,
        redistribution); after a failure also the parts of ``settle_s`` after the first agreement:
        ``agree_s``, ``repair_s``, ``recompute_s`` and ``redistribute_s``.

    Returns
    -------
    ResilientResult
        On every surviving process.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdgemm), or protected operands that do not belong to this call.
    ProcessFailure
        If the state table already marks a process of this grid dead, or a dead process's inputs cannot be
        read back, or a further failure strikes while the survivors repair; the same on every survivor.
    Fenced
        On a process that was declared dead while alive (it missed the deadline).
    ABFTError
        If a recomputed tile fails its block checksum twice.
    StorageError
        If some process could not save its inputs (e.g. a full disk); the same on every process, naming
        the cause (errno).
    """
    ta, tb, m, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_gemm_args(
        "PDGEMM", transa, transb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    check_algorithm(C.grid, algorithm, 19)
    if isinstance(store, ProtectedOperands):
        store.check(A, B, operands_key(ta, tb, m, n, k, ia, ja, ib, jb, C, ic, jc, algorithm))
    form = ProductForm("PDGEMM", ta, tb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats, algorithm=algorithm)  # fmt: skip


def _symm_form(side: str, uplo: str, m: int, n: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
               B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
               jc: int) -> ProductForm:
    """PDSYMM as a product: the symmetric matrix built from A's ``uplo`` triangle, times B (or B times it)."""
    side, uplo, m, n, alpha, ia, ja, ib, jb, beta, ic, jc, na = check_symm_args(
        "PDSYMM", side, uplo, m, n, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)

    def prepare() -> tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]:
        W = _symmetric_copy(A, ia, ja, na, uplo)
        return (W, ia, ja, B, ib, jb) if side == "L" else (B, ib, jb, W, ia, ja)

    return ProductForm("PDSYMM", "N", "N", m, n, na, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc, prepare,
                       flags=(side, uplo))  # fmt: skip


@handles_failures
def resilient_pdsymm(
    side: str,
    uplo: str,
    m: int,
    n: int,
    alpha: float,
    A: DistributedMatrix,
    ia: int,
    ja: int,
    B: DistributedMatrix,
    ib: int,
    jb: int,
    beta: float,
    C: DistributedMatrix,
    ic: int,
    jc: int,
    *,
    store: InputStore | str | ProtectedOperands,
    timeout: float | None = None,
    width: int | None = None,
    detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None,
    stats: dict[str, float] | None = None,
) -> ResilientResult:
    """Compute ``C = alpha*A@B + beta*C`` (side "L") or ``alpha*B@A + beta*C`` (side "R"), A symmetric,
    surviving failures.

    Collective on C's grid; arguments and semantics as :func:`ftkit.linalg.pdsymm` (only the ``uplo``
    triangle of A is read), the keyword arguments and the result as :func:`resilient_pdgemm`. The
    symmetric matrix is built from its triangle first (a collective, as pdsymm does): a process that fails
    then fails the call alike on every survivor; from the moment the inputs are saved, a failure is survived.
    ``store=`` may be the handle of :func:`protect_pdsymm` for these A, B and arguments: the symmetric matrix
    is then built, and both operands saved, once.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdsymm), or protected operands that do not belong to this call
        (position 18).
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`resilient_pdgemm`.
    """
    form = _symm_form(side, uplo, m, n, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    check_protected(form, store, 18)
    return resilient_call(form, store=store, timeout=timeout, width=width, detector=detector, on_step=on_step,
                          stats=stats)  # fmt: skip


@handles_failures
def protect_pdsymm(side: str, uplo: str, m: int, n: int, A: DistributedMatrix, ia: int, ja: int,
                   B: DistributedMatrix, ib: int, jb: int, C: DistributedMatrix, ic: int, jc: int, *,
                   store: InputStore | str | os.PathLike[str],
                   timeout: float | None = None) -> ProtectedOperands:
    """Build the symmetric matrix once and save it and B aligned, for later :func:`resilient_pdsymm` calls.

    Collective on C's grid. Arguments as :func:`resilient_pdsymm` without alpha and beta; contract, release
    and errors as :func:`~ftkit.linalg.protect_operands` (A and B must not change while the handle is in use).

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdsymm).
    StorageError, ProcessFailure
        As :func:`~ftkit.linalg.protect_operands`.
    """
    return protect_form(_symm_form(side, uplo, m, n, 1.0, A, ia, ja, B, ib, jb, 0.0, C, ic, jc), store=store,
                        timeout=timeout)  # fmt: skip
