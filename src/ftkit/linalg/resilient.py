"""PDGEMM that survives process failures in the middle: "keep going, settle up at the end" (FT-PBLAS 2.3).

:func:`resilient_pdgemm` runs SUMMA with a failure-aware panel exchange and proceeds in four phases.

1. **Protect.** Every process saves its aligned local operands (its rows of op(A), its columns of op(B))
   and its whole local C (as it was on entry) in an :class:`~ftkit.storage.inputs.InputStore` every rank
   can read (a directory on the shared file system: the checkpoint L4 level), then all synchronize with a
   deadline. The grid's failure detector is set up between the two, once per grid (later calls reuse it):
   after the saves, so a process killed during the set-up has saved its inputs, and the set-up survives
   its death (the survivors start with it dead; :mod:`ftkit.linalg.protected`).
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
   with the block checksums and rigorous bound of :mod:`ftkit.linalg.abft` (:mod:`ftkit.linalg._settle`).
   The call ends with one ``Agree`` (never a plain collective), so every survivor leaves with the same
   decision: a survivor that returns and exits cannot look like a failure to one still inside.

Each phase is one function below (:func:`_protect`, :func:`_iterate`, :func:`_agree_and_repair`,
:func:`_settle_up`); the panel exchanges of the iterate phase are in :mod:`ftkit.linalg._resilient_exchange`.

What the result check guards, and why it cannot be skipped
    A block checksum only proves that a tile is the product of the operands it was computed from; it cannot
    see wrong operands (the checksums are taken from the same data). So no wrong operand may reach a tile:
    every stored piece a survivor needs is read, and its shape checked, *before* the survivors agree that
    the inputs are complete (a piece that cannot be read fails the call on every survivor, where it was
    once silently replaced by zeros, which the checksums then happily confirmed); with
    :func:`~ftkit.linalg.protected.protect_operands` the multiply uses the very operands that were saved
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

import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from ..errors import ProcessFailure, StorageError
from ..failure import (
    FailureDetector,
    Fenced,
    agree_on_dead,
    get_state_table,
    record_failures,
    repair,
    revoke,
)
from ..failure.ulfm import agree_flag, require_ulfm
from ..storage.inputs import InputStore, open_store
from ._operands import aligned_operands
from ._resilient_call import PhaseTimer, ResilientCall, ResilientResult, at_stage, record_phases
from ._resilient_exchange import FailureAwareExchange, run_cannon
from ._settle import Tile, plan_tiles, prefetch, settle_up
from ._summa import plan_summa, run_summa
from .grid import ProcessGrid
from .matrix import DistributedMatrix
from .pblas import _scale, check_gemm_args, check_width
from .protected import (
    ProtectedOperands,
    call_name,
    check_algorithm,
    detector_for,
    forget_detector,
    operands_key,
    reusable_detector,
    save_failed,
)

__all__ = ["ResilientResult", "resilient_pdgemm"]


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
        (:class:`~ftkit.storage.inputs.CheckpointFileStore`)
        are written. The call's files are removed when it succeeds. Or the
        :class:`~ftkit.linalg.protected.ProtectedOperands` of :func:`~ftkit.linalg.protected.protect_operands`
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
    check_width("PDGEMM", width)
    grid = C.grid
    check_algorithm(grid, algorithm, 19)
    _check_state_table(grid)
    protected = store if isinstance(store, ProtectedOperands) else None
    if protected is not None:
        protected.check(A, B, operands_key(ta, tb, m, n, k, ia, ja, ib, jb, C, ic, jc, algorithm))
    # Phase 1 (protect) starts here: capability checks (ULFM support) come first, before the detector (whose
    # set-up already uses ULFM's agreement) and before anything is saved.
    if grid.size > 1:  # a single process has no peer whose failure it would have to survive
        require_ulfm(grid.comm, "resilient_pdgemm")
    where = (protected.store if protected is not None
             else open_store(store, rank=grid.rank, nranks=grid.size))  # type: ignore[arg-type]  # fmt: skip
    prefix = call_name(grid, "pdgemm")
    ops_prefix = protected.prefix if protected is not None else prefix
    call = ResilientCall(ta, tb, m, n, k, alpha, beta, C, ic, jc, where, prefix,
                 {"a": ops_prefix, "b": ops_prefix, "c": prefix}, algorithm, width, on_step,
                 C.row_map(ic, m), C.col_map(jc, n))  # fmt: skip
    det = detector or reusable_detector(grid, timeout)
    if call.multiply:
        _take_operands(call, protected, A, ia, ja, B, ib, jb, det)

    t0 = time.perf_counter()
    _save(call)
    if det is None:  # the grid's first call: set the detector up now that the inputs are saved
        at_stage("setup")
        det = detector_for(grid, timeout)
    call.det = det
    exchange, lost_any = _synchronize(call)
    t1 = time.perf_counter()
    own = _iterate(call, exchange) if not lost_any and not det.fenced else None
    t2 = time.perf_counter()
    dead = _agree(call)
    if not dead and not lost_any:  # the common case: one quick barrier and Agree are all the extra
        exchange.release()  # every transfer completed (with a failure, sends to the dead may be pending)
        state = record_failures(grid.shape, set(), writer=det.rank == 0)
        if det.rank == 0 and call.saved:
            where.remove(prefix)
        record_phases(stats, t0, t1, t2)
        return ResilientResult(C, grid, grid.comm, (), state, {}, 0, exchange.storage_reads, det.timeout)  # type: ignore[arg-type]
    tick = PhaseTimer(stats)
    try:
        new_comm, state, tiles, reassigned = _agree_and_repair(call, exchange, dead, lost_any, tick)
    except Fenced:
        if own is not None:  # this process withdrew after its own error: that error is what the caller sees
            raise own from None
        raise
    result = settle_up(call, exchange, dead, new_comm, state, tiles, reassigned, tick)
    record_phases(stats, t0, t1, t2)
    return result


def _check_state_table(grid: ProcessGrid) -> None:
    """Raise :class:`ProcessFailure` if the process-state table marks a process of ``grid`` dead."""
    table = get_state_table()
    if table is not None and table.shape == grid.shape and not table.all():
        marked = [grid.rank_of(int(p), int(q)) for p, q in zip(*np.nonzero(table == 0), strict=False)]
        raise ProcessFailure(
            f"the state table marks grid ranks {marked} dead: this grid can no longer compute; "
            f"continue on the survivors' grid (ResilientResult.grid) or reset_state() after a "
            f"restart",
            marked,
        )


def _take_operands(call: ResilientCall, protected: ProtectedOperands | None, A: DistributedMatrix, ia: int,
                   ja: int, B: DistributedMatrix, ib: int, jb: int, det: FailureDetector | None) -> None:
    """Set ``call.ops``: the protected operands themselves, or A and B aligned now (collective).

    The redistribution is a plain collective on the grid: a process that dies in it can leave it completed
    on some ranks and failed on others. A rank where it failed revokes the grid's communicator (so no live
    peer waits in it for this rank), marks itself ``lost`` (no operands) instead of raising, and says so at
    the protect phase's barrier, so that every survivor fails the call alike.
    """
    if protected is not None and protected.operands is not None:
        call.ops = protected.operands
    else:
        try:
            call.ops = aligned_operands(call.ta, call.tb, call.m, call.n, call.k, A, ia, ja, B, ib, jb,
                                        call.C, call.ic, call.jc,
                                        same_kmap=call.algorithm == "cannon")  # fmt: skip
        except MPI.Exception:  # ULFM reports a peer's death here as MPI_ERR_PROC_FAILED or MPI_ERR_OTHER
            revoke(call.grid.comm)  # a live peer still inside the redistribution must not wait for this one
            if det is not None:  # else the detector's set-up, which comes later, finds the dead
                det.check_failures()
            call.lost = True
            return
    grid, ops = call.grid, call.ops
    for r in range(grid.size):  # every rank's piece shapes are pure index arithmetic
        p, q = grid.coords(r)
        call.shapes[("a", r)] = (ops.crows.count(p), ops.ka.count(q))
        call.shapes[("b", r)] = (ops.kb.count(p), ops.ccols.count(q))


def _save(call: ResilientCall) -> None:
    """Phase 1, first half: save this process's inputs (local; a failure to save is said at the barrier)."""
    grid, where = call.grid, call.where
    d = call.C.desc
    for r in range(grid.size):
        call.shapes[("c", r)] = d.local_shape(*grid.coords(r), grid.nprow, grid.npcol)
    me = grid.rank
    try:
        if call.save_c:
            where.save(f"{call.prefix}/c.{me}", call.C.local)
        if call.save_ops and call.ops is not None:
            where.save(f"{call.prefix}/a.{me}", np.asfortranarray(call.ops.a))
            where.save(f"{call.prefix}/b.{me}", np.asfortranarray(call.ops.b))
    except StorageError as exc:  # e.g. a full disk: said at the barrier, raised alike everywhere later
        call.store_errno = exc.errno or getattr(exc.__cause__, "errno", None) or 0


def _synchronize(call: ResilientCall) -> tuple[FailureAwareExchange, bool]:
    """Phase 1, second half: synchronize with a deadline, so everyone's pieces are readable before anyone
    can need them.

    Returns the failure-aware exchange for the next phases and whether some process has no operands
    (``lost``: the same answer on every live process, which then all skip the iterate phase).
    """
    grid, det, where = call.grid, call.det, call.where
    exchange = FailureAwareExchange(det, grid, where, call.prefixes, call.shapes, call.on_step)
    bad = call.lost or call.store_errno is not None
    lost_any = bad
    if call.saved or bad:  # everyone's pieces are readable before anyone can need them
        try:
            lost_any |= bool(det.barrier(ok=not bad))
        except Fenced:
            pass
    return exchange, lost_any


def _iterate(call: ResilientCall, exchange: FailureAwareExchange) -> Exception | None:
    """Phase 2: the multiply's steps, reading dead owners' pieces from the store (nobody computes the dead's
    C blocks yet). A process that learns it was fenced off stops here.

    An error of this process's own (not a peer's failure: e.g. ``MemoryError``, or an exception from
    ``on_step``) must leave nobody waiting: the process withdraws (its peers treat it as dead at once), takes
    part in the agreements that follow and then raises that error. Returns it (``None`` if there was none).
    """
    c = call.C.local_view(call.ic, call.jc, call.m, call.n)
    try:
        if not call.multiply:
            if call.m and call.n:
                _scale(c, call.beta)
            return None
        ops = call.ops
        assert ops is not None
        if call.algorithm == "cannon":
            _scale(c, call.beta)
            run_cannon(exchange, ops.a, ops.b, c, ops.ka, call.alpha)
        else:  # beta is applied by the first local GEMM, as pdgemm does (no separate pass over C)
            run_summa(call.grid, ops.a, ops.b, c, ops.ka, ops.kb, call.alpha, exchange=exchange,
                      steps=plan_summa(ops.ka, ops.kb, call.width), beta=call.beta)  # fmt: skip
    except Fenced:
        pass
    except Exception as exc:  # noqa: BLE001 - any error of our own: withdraw, re-raised after the agreements
        call.det.withdraw(f"{type(exc).__name__}: {exc}")
        return exc
    return None


def _agree(call: ResilientCall) -> frozenset[int]:
    """Agree with the live processes on the dead ones (fault-tolerant collective).

    ULFM's agreement busy-polls: ranks that finish early would spin in it, taking the shared cores from the
    ranks still computing; they wait for them asleep first.
    """
    det = call.det
    if not det.fenced:
        try:
            det.barrier()
        except Fenced:
            pass
    return agree_on_dead(det.comm, det.dead, abstain=det.fenced)


# Bits of the agreement that ends phase 3 (a failure during it makes it 0 everywhere: "not whole" first).
_WHOLE = 1  # the repaired communicator holds exactly the agreed survivors (nobody else died meanwhile)
_INPUTS = 2  # every stored piece the settle phase needs was read, and nobody lost its operands
_STORED = 4  # every process saved its inputs
_ERRNO_SHIFT = 8  # bits 8-15: the complement of a failed save's errno (the AND keeps the OR of errnos)


def _agree_and_repair(
    call: ResilientCall,
    exchange: FailureAwareExchange,
    dead: frozenset[int],
    lost_any: bool,
    tick: PhaseTimer,
) -> tuple[MPI.Intracomm, np.ndarray, list[Tile], dict[int, dict[int, int]]]:
    """Phase 3: read every stored piece the settle phase needs, build the survivors' communicator, agree
    (one ULFM ``Agree``) that all could be read and that the communicator holds exactly the survivors, and
    record the dead in the state table.

    The check of the repaired communicator is part of the agreement: a process that dies after the
    agreement on the dead and before ``Shrink`` leaves a communicator one rank short, whose tiles nobody
    planned; every survivor then raises the same :class:`ProcessFailure`.

    Returns the communicator, the state table, the tiles of the dead processes' C and the reassignment.

    Raises
    ------
    Fenced
        On a process that was declared dead while alive (or withdrew after its own error).
    ProcessFailure
        On every survivor alike, if some input cannot be read back, some process lost its operands, or a
        further process failed while the communicator was being repaired.
    StorageError
        On every survivor alike, if some process could not save its inputs (e.g. a full disk).
    """
    grid, det = call.grid, call.det
    forget_detector(grid)
    survivors = [r for r in range(grid.size) if r not in dead]
    tiles: list[Tile] = []
    reassigned: dict[int, dict[int, int]] = {}
    if survivors and not det.fenced and not lost_any:
        d = call.C.desc
        tiles, reassigned = plan_tiles(grid, sorted(dead), survivors, call.crows, call.ccols, d.mb, d.nb)
        prefetch(call, exchange, tiles)
    at_stage("repair")
    try:
        new_comm = repair(det.comm, dead)
        whole = det.fenced or (new_comm is not None and new_comm.Get_size() == len(survivors))
    except ProcessFailure:
        new_comm, whole = None, False
    tick("repair_s")
    errno = call.store_errno or 0
    flag = (_WHOLE * whole | _INPUTS * (not lost_any and not exchange.unrecoverable)
            | _STORED * (call.store_errno is None) | (~errno & 0xFF) << _ERRNO_SHIFT)  # fmt: skip
    decided = agree_flag(det.comm, flag, clear_on_failure=True)
    tick("agree_s")
    if not decided & _WHOLE:
        # Name the same ranks everywhere: agree on them (the fenced take part, then leave as fenced).
        gone = sorted(agree_on_dead(det.comm, det.dead | dead, abstain=det.fenced))
        det.raise_if_fenced()
        raise ProcessFailure(
            f"ranks {gone} failed, the last of them while the survivors were repairing the communicator "
            f"(after agreeing on ranks {sorted(dead)}): the product cannot be completed; continue on the "
            f"survivors (ftkit.failure.repair) and multiply again, or restart from a checkpoint",
            gone,
        )
    if new_comm is None or det.fenced:
        det.raise_if_fenced()
        raise Fenced(f"rank {det.rank} was declared dead by its peers and fenced off", [det.rank])
    state = record_failures(grid.shape, {grid.coords(r) for r in dead}, writer=new_comm.Get_rank() == 0)
    if not decided & _STORED:
        raise save_failed(call.where, ~(decided >> _ERRNO_SHIFT) & 0xFF)
    if not decided & _INPUTS:
        if lost_any:
            raise ProcessFailure(
                f"ranks {sorted(dead)} failed while the operands were being redistributed, before they "
                f"could be protected: the product cannot be completed; continue on the survivors and "
                f"multiply again (or protect_operands() first)",
                sorted(dead),
            )
        raise ProcessFailure(
            f"ranks {sorted(dead)} failed and their inputs cannot be read back from {call.where!r} "
            f"(they died before saving them, or the store lost them): the product cannot be "
            f"completed; restart from a checkpoint",
            sorted(dead),
        )
    return new_comm, state, tiles, reassigned
