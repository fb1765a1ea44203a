"""Operands saved ahead of a failure-tolerant multiply, so the multiply itself writes nothing.

:func:`~ftkit.linalg.resilient.resilient_pdgemm` needs every process's aligned pieces of op(A) and op(B)
somewhere the survivors can read them if that process dies. Given a store, it saves them on every call (and
synchronizes), which costs a write of A and B per multiply. :func:`protect_operands` does that once and
returns a :class:`ProtectedOperands` handle; passed as ``store=`` to any number of later multiplies with the
same operands (an iterative method multiplying by the same matrix, or the reference's setting where the inputs
already sit on the parallel file system), their error-free cost is the failure-aware SUMMA alone.

Contract: while a handle is in use, the local data of A and B must not change (the saved copy is what the
survivors read back; a changed operand would make a recovered product silently wrong). Change them and
protect again. C is saved by the multiply itself when it is needed (``beta != 0``, or the multiply updates
only part of C): it changes with every call.

The other Level-3 routines take the same handle, made by their own protector (``protect_pdsymm``,
``protect_pdtrsm``, ``protect_pdtrmm``, ``protect_pdsyrk``, ``protect_pdsyr2k``; all through
:func:`protect_pieces`): it saves the operands of the routine's product that do not change between calls,
after building them once (PDSYMM's symmetric matrix, PDTRSM's inverse triangle, PDTRMM's triangle, PDSYR2K's
concatenated operands, PDSYRK's transposed A). For PDTRSM and PDTRMM that is the triangle's side only: B is
their output, so each call still saves its B.

What a call on a handle saves itself (that B; C where needed) is kept under the handle when the call ends
error-free (:func:`spare_key`), and the next call rewrites that file in place (a store's ``retire`` and
``save(..., recycle=)``, :mod:`ftkit.storage.inputs`): its pages in the page cache are reused, where a new
file per call had the kernel allocate, and its removal free, 32 MiB per rank at n = 4096 on 2 x 2 (most of
``resilient_pdtrmm``'s extra system time, issue 33). Readers see what a new file shows (whole or absent, and
a kept file names the call that wrote it). The kernel's writeback writes the kept, dirty pages out now and
then (every ~30 s by default); :meth:`ProtectedOperands.release` removes them.

A directory given as ``store=`` (here and to every resilient routine) is opened without fsync
(:data:`FSYNC_INPUTS`). The saved inputs serve one purpose: survivors of a process failure in the same job
read a dead process's pieces back, during the call (or the handle's life), and the files are removed at its
end; no restart ever reads them (that is what checkpoints are for, and they are fsynced). A killed process
leaves its written pages in the kernel's page cache, where every other process of the machine reads them,
and a shared file system's client hands them to the server on ``close`` (NFS's close-to-open consistency).
What fsync adds is surviving a crash of the machine that holds the pages: for a node-local store the files
die with the node whatever fsync did, and the ranks reading them die with it; for a shared store without
close-to-open flushing, the lost node's unflushed pieces read as missing or fail their digests, and the
survivors fail the call alike (:class:`~ftkit.errors.ProcessFailure`), never with a wrong result. So the
default does not pay it (~80 ms per call at n = 4096 on 2 x 2, the disk's time to take the call's 128 MiB,
which unflushed files removed at the end of the call never reach, and kept files reach in the background).
Where a lost node's pieces must be read back from such a file system, pass
``store=CheckpointFileStore(directory, fsync=True)``: an explicit store is used as it is, for the protected
operands and the calls' own saves alike.

This module also names the calls' files in a store (:func:`call_name`, :func:`spare_key`); the failure
detectors that resilient calls on a grid share are kept by :mod:`._grid_detector`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ...errors import FtkitError, PBLASArgumentError, ProcessFailure, StorageError
from ...failure import Fenced, revoke
from ...failure.ulfm import agree_flag, agree_on_dead
from ...storage.inputs import InputStore, open_store
from .._grid_failure import handles_failures
from ..grid import ProcessGrid
from ..matrix import DistributedMatrix
from ..pblas._operands import AlignedOperands, aligned_operands
from ..pblas.gemm import check_gemm_args
from ._grid_detector import detector_for, forget_detector

__all__ = ["ProtectedOperands", "protect_operands", "protect_pieces", "call_name", "spare_key",
           "remove_spares", "check_algorithm", "revoke_grid"]

#: Whether a directory given as ``store=`` is opened with fsync (the module docstring says why not).
FSYNC_INPUTS = False

_calls: dict[int, int] = {}
#: A product's built operands ``(A, ia, ja, B, ib, jb)``; with the aligned operands, what a protector builds.
Operands = tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]
Built = tuple[AlignedOperands, Operands | None]


def call_name(grid: ProcessGrid, kind: str) -> str:
    """Return a new name for a collective call on ``grid`` (local; the same on every rank, unique per job).

    Every rank must call it the same number of times, in the same order (once per collective call).
    """
    _calls[grid.context] = _calls.get(grid.context, 0) + 1
    return f"{kind}-{grid.token}-{_calls[grid.context]}"


def spare_key(prefix: str, what: str, rank: int) -> str:
    """The key under ``prefix`` (a protected handle's) where ``rank``'s saved input ``what`` (``"a"``,
    ``"b"``, ``"c"``) is kept between the calls that recycle it; no reader asks for it."""
    return f"{prefix}/spare-{what}.{rank}"


def remove_spares(store: InputStore, prefix: str, rank: int) -> None:
    """Remove every input ``rank``'s calls kept under ``prefix`` (:func:`spare_key`; local).

    Raises
    ------
    StorageError, UnsafePathError
        As the store's ``remove``.
    """
    for what in "abc":
        store.remove(spare_key(prefix, what, rank))


def check_algorithm(grid: ProcessGrid, algorithm: str, position: int) -> None:
    """Check a failure-tolerant multiply's ``algorithm`` argument (PBLAS argument number ``position``).

    Raises
    ------
    PBLASArgumentError
        Unless it is ``"summa"``, or ``"cannon"`` on a square grid.
    """
    if algorithm not in ("summa", "cannon"):
        raise PBLASArgumentError("PDGEMM", position, f"algorithm={algorithm!r}; use 'summa' or 'cannon'")
    if algorithm == "cannon" and grid.nprow != grid.npcol:
        raise PBLASArgumentError(
            "PDGEMM", position, f"algorithm='cannon' needs a square grid, C's is {grid.nprow} x {grid.npcol}"
        )


def operands_key(
    ta: str, tb: str, m: int, n: int, k: int, ia: int, ja: int, ib: int, jb: int,
    C: DistributedMatrix, ic: int, jc: int, algorithm: str,
) -> tuple[object, ...]:
    """What determines the aligned operand pieces of a multiply besides A and B themselves (local)."""
    d = C.desc
    return (ta, tb, m, n, k, ia, ja, ib, jb, ic, jc, algorithm, d.m, d.n, d.mb, d.nb, d.rsrc, d.csrc,
            C.grid.context)  # fmt: skip


def check_store(routine: str, position: int, store: object) -> None:
    """Check ``store=`` of a failure-tolerant routine that takes no protected operands (PDGEADD, PDTRADD,
    PDTRAN; PBLAS argument number ``position``).

    Raises
    ------
    PBLASArgumentError
        If ``store`` is :class:`ProtectedOperands`: these routines multiply by an identity built per call
        and by the operand they add, whose cost is the addition itself; there is nothing to save ahead.
    """
    if isinstance(store, ProtectedOperands):
        raise PBLASArgumentError(routine, position, "store= must be an input store or a directory: protected "
                                 "operands serve the multiplying routines (resilient_pdgemm, pdsymm, pdtrsm, "
                                 "pdtrmm, pdsyrk, pdsyr2k) only")  # fmt: skip


def revoke_grid(grid: ProcessGrid) -> None:
    """Revoke ``grid``'s communicators, its row and column communicators too (local).

    For a rank where a plain collective (an operand's redistribution, a routine's ``prepare``) failed: a live
    peer still inside it, or blocked in a row broadcast whose root left with the error, must not wait for
    this one.
    """
    for comm in (grid.comm, grid.row_comm, grid.col_comm):
        if comm != MPI.COMM_NULL:
            revoke(comm)


@dataclass
class ProtectedOperands:
    """A and B of one multiply, saved in ``store`` by :func:`protect_operands`; pass it as ``store=``.

    Attributes
    ----------
    store
        Where the pieces are (every rank can read every rank's pieces).
    prefix
        The keys' common prefix: ``<prefix>/a.<rank>``, ``<prefix>/b.<rank>``.
    A, B
        The protected matrices (the call must be given these very objects); ``B`` is ``None`` for the routines
        whose other operand is not protected (PDTRSM's and PDTRMM's B, their output) or is A itself (PDSYRK).
    key
        The multiply's other arguments the saved pieces depend on (see :func:`operands_key`).
    rank
        This process's rank in the grid.
    operands
        This process's aligned pieces, as saved: the multiply computes with exactly these (it never
        redistributes A or B again; that would be a collective a failure could interrupt on some ranks and
        not on others). They are views of A and B where no redistribution was needed, else copies.
    routine
        The routine the pieces serve (``"PDGEMM"``, ``"PDTRSM"``, ...).
    sides
        The saved sides of the routine's product: ``"ab"``, or ``"a"`` / ``"b"`` where the other operand
        changes between calls and each call saves it (PDTRSM and PDTRMM).
    prepared
        The built operands ``(A, ia, ja, B, ib, jb)`` of the product, for a partial handle of a form with a
        ``prepare`` step (PDTRSM): a call rebuilds only the unsaved side from them (its ``prepare`` step
        reuses the saved side's matrix; a form's ``align`` step reuses ``operands`` instead).
    """

    store: InputStore
    prefix: str
    A: DistributedMatrix
    B: DistributedMatrix | None
    key: tuple[object, ...]
    rank: int
    released: bool = False
    operands: AlignedOperands | None = None
    routine: str = "PDGEMM"
    sides: str = "ab"
    prepared: Operands | None = None

    def check(self, A: DistributedMatrix, B: DistributedMatrix | None, key: tuple[object, ...],
              routine: str = "PDGEMM", position: int = 17) -> None:
        """Check that a call of ``routine`` on ``A`` and ``B`` with arguments ``key`` may use these pieces.

        ``position`` is the PBLAS argument number of ``store=`` in that routine, for the error.

        Raises
        ------
        PBLASArgumentError
            If the handle was released, or belongs to another routine, other matrices or other arguments.
        """
        fix = "protect_operands()" if routine == "PDGEMM" else f"protect_{routine.lower()}()"
        if self.released:
            raise PBLASArgumentError(routine, position, "the protected operands were released: protect them "
                                     f"again with {fix}")  # fmt: skip
        if self.routine != routine:
            raise PBLASArgumentError(
                routine, position, f"store= holds operands protected for {self.routine}, not {routine}: call "
                f"{fix} for this call")  # fmt: skip
        if A is not self.A or B is not self.B:
            raise PBLASArgumentError(
                routine, position, "store= holds operands protected for other matrices: pass the same "
                f"DistributedMatrix objects, or {fix} for these")  # fmt: skip
        if key != self.key:
            raise PBLASArgumentError(
                routine, position, "store= holds operands protected for other arguments (flags, "
                "transpositions, sizes, offsets, C's layout or grid, or algorithm): call "
                f"{fix} with this call's arguments")  # fmt: skip

    def release(self) -> None:
        """Delete this process's saved pieces, and the inputs its calls kept for the next call to rewrite
        (local: call it on every rank that protected them)."""
        for what in self.sides:
            self.store.remove(f"{self.prefix}/{what}.{self.rank}")
        remove_spares(self.store, self.prefix, self.rank)
        self.released = True
        self.operands = None
        self.prepared = None

    def __enter__(self) -> ProtectedOperands:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def save_failed(where: InputStore, errno: int) -> StorageError:
    """The error every rank raises when some rank could not save its inputs in ``where`` (``errno`` 0: none
    known)."""
    cause = f"[Errno {errno}] {os.strerror(errno)}" if errno else "an error without errno"
    return StorageError(
        f"a process could not save its inputs in {where!r} ({cause}); nothing was computed: fix the store "
        f"(free space, permissions, links out of it) or pass another store=, then call again"
    )


@handles_failures
def protect_operands(
    transa: str,
    transb: str,
    m: int,
    n: int,
    k: int,
    A: DistributedMatrix,
    ia: int,
    ja: int,
    B: DistributedMatrix,
    ib: int,
    jb: int,
    C: DistributedMatrix,
    ic: int,
    jc: int,
    *,
    store: InputStore | str | os.PathLike[str],
    algorithm: str = "summa",
    timeout: float | None = None,
) -> ProtectedOperands:
    """Save every process's aligned pieces of op(A) and op(B) once, for later failure-tolerant multiplies.

    Collective on C's grid. Arguments as :func:`~ftkit.linalg.resilient.resilient_pdgemm` (without alpha and
    beta, which do not change what is saved). Every process writes its two pieces (ftkit checkpoint files
    for a directory ``store``), then all synchronize with a deadline, so once this returns every piece is
    readable by every process. Pass the result as ``store=`` to ``resilient_pdgemm`` (or as
    ``protect_inputs=`` to ``ft_pdgemm``) with the same A, B and arguments; call
    :meth:`ProtectedOperands.release` (or use it as a context manager) when done.

    Raises
    ------
    PBLASArgumentError
        For illegal arguments (as pdgemm).
    StorageError
        If a piece cannot be written.
    ProcessFailure
        If a process fails or misses the deadline while the pieces are redistributed or saved: the same on
        every live process (they agree on it).
    """
    ta, tb, m, n, k, _, ia, ja, ib, jb, _, ic, jc = check_gemm_args(
        "PDGEMM", transa, transb, m, n, k, 1.0, A, ia, ja, B, ib, jb, 0.0, C, ic, jc)  # fmt: skip
    check_algorithm(C.grid, algorithm, 15)

    def build() -> tuple[AlignedOperands, None]:
        return aligned_operands(ta, tb, m, n, k, A, ia, ja, B, ib, jb, C, ic, jc,
                                same_kmap=algorithm == "cannon"), None  # fmt: skip

    key = operands_key(ta, tb, m, n, k, ia, ja, ib, jb, C, ic, jc, algorithm)
    return protect_pieces(C.grid, "PDGEMM", build if m and n and k else None, "ab", A, B, key, store=store,
                          timeout=timeout)  # fmt: skip


@handles_failures
def protect_pieces(
    grid: ProcessGrid,
    routine: str,
    build: Callable[[], Built] | None,
    sides: str,
    A: DistributedMatrix,
    B: DistributedMatrix | None,
    key: tuple[object, ...],
    *,
    store: InputStore | str | os.PathLike[str],
    timeout: float | None = None,
) -> ProtectedOperands:
    """Build a routine's aligned operands once and save their ``sides`` (collective on ``grid``): the work of
    :func:`protect_operands` and of every routine's protector, with the same guarantees.

    Parameters
    ----------
    build
        Builds the aligned operands and, for a partial handle, the product's built operands (a plain
        collective: a failure in it fails the protection alike on every live process); ``None`` when the
        product is empty.
    sides
        ``"ab"``, ``"a"`` or ``"b"``: which aligned operands are saved.
    A, B, key
        What a call must pass to use the handle (:meth:`ProtectedOperands.check`).

    Raises
    ------
    StorageError
        If a piece cannot be written (on every process alike).
    ProcessFailure
        If a process fails or misses the deadline while the operands are built or saved: the same on every
        live process (they agree on it).
    """
    det = detector_for(grid, timeout)
    me = det.rank
    where = open_store(store, rank=me, nranks=grid.size, fsync=FSYNC_INPUTS)
    prefix = call_name(grid, "operands")
    ops = None
    prepared = None
    ok = True
    errno: int | None = None
    if build is not None:
        try:
            ops, prepared = build()
        except MPI.Exception:  # a peer died in the redistribution (ULFM: PROC_FAILED or ERR_OTHER)
            revoke_grid(grid)
            det.check_failures()
            ok = False
        try:
            if ops is not None:
                for side in sides:
                    where.save(f"{prefix}/{side}.{me}", np.asfortranarray(getattr(ops, side)))
        except StorageError as exc:  # e.g. a full disk: every rank raises it, after the agreement below
            errno = exc.errno or getattr(exc.__cause__, "errno", None) or 0
            ok = False
    try:
        ok = not det.barrier(ok=ok) and ok
    except Fenced:
        ok = False
    # A death during the barrier can be seen by some ranks and not others: agree, so all fail or none. Bit 0:
    # all went well; bit 1: every rank saved its pieces; bit 2: set by all (0 after a failure during the
    # agreement, which clears every bit); bits 8-15: the complement of a failed save's errno.
    flag = (int(ok and not det.dead and not det.fenced) | 2 * (errno is None) | 4
            | (~(errno or 0) & 0xFF) << 8)  # fmt: skip
    decided = agree_flag(det.comm, flag, clear_on_failure=True)
    if not decided & 1:
        dead = sorted(agree_on_dead(det.comm, det.dead, abstain=det.fenced))
        forget_detector(grid)
        det.raise_if_fenced()
        if me == min(set(range(grid.size)) - set(dead), default=-1):  # nothing protected: nobody reads them
            with contextlib.suppress(OSError, FtkitError):
                where.remove(prefix)
        if decided & 4 and not decided & 2:
            raise save_failed(where, ~(decided >> 8) & 0xFF)
        raise ProcessFailure(
            f"ranks {dead} failed while the operands were being protected: nothing usable was protected; "
            f"continue on the survivors (ftkit.failure.repair) and protect again",
            dead,
        )
    return ProtectedOperands(where, prefix, A, B, key, me, operands=ops, routine=routine, sides=sides,
                             prepared=prepared)  # fmt: skip
