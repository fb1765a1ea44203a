"""The engine of the failure-tolerant Level-3 routines: :func:`resilient_call` runs a :class:`ProductForm`.

The four phases (protect, iterate, agree and repair, settle up) and what they guarantee are described in
:mod:`ftkit.linalg.resilient`; each is one function below (:func:`_save` and :func:`_synchronize`,
:func:`_iterate`, :func:`_agree_and_repair`, then :func:`ftkit.linalg.resilient._settle.settle_up`).

A routine plugs in by saying what it computes as a :class:`ProductForm`: ``C(ic:ic+m, jc:jc+n) =
alpha * op(A)(ia:, ja:) @ op(B)(ib:, jb:) + beta * C(ic:, jc:)``, with, if it needs one, a collective
``prepare`` step that builds the operands it multiplies (PDSYMM: the symmetric matrix from its stored
triangle). That form is also the per-routine descriptor of which operand blocks each output block needs:
block ``(I, J)`` of C needs row block ``I`` of op(A) (every k) and column block ``J`` of op(B), which is
what the iterate phase exchanges, what the protect phase saves (every process's aligned pieces) and what the
settle phase reads back to recompute a dead process's tiles and verify them with block checksums.
"""


from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from ...errors import ProcessFailure, StorageError
from ...failure import (
    FailureDetector,
    Fenced,
    agree_on_dead,
    get_state_table,
    record_failures,
    repair,
)
from ...failure.ulfm import agree_flag, require_ulfm
from ...storage.inputs import InputStore, open_store, recycles
from .._grid_failure import handles_failures
from ..grid import ProcessGrid
from ..pblas._operands import aligned_operands
from ..pblas._summa import plan_summa, run_summa
from ..pblas.gemm import _scale, check_width
from ._call_state import PhaseTimer, ResilientCall, ResilientResult, at_stage, hold_decision, record_phases
from ._failure_exchange import FailureAwareExchange, run_cannon
from ._grid_detector import detector_for, forget_detector, reusable_detector
from ._part import TriangularBands, UpdatedPart, band_width
from ._settle import Tile, discard_inputs, plan_tiles, prefetch, settle_up
from .form import ProductForm
from .protected import FSYNC_INPUTS, Built, ProtectedOperands, call_name, revoke_grid, save_failed, spare_key

__all__ = ["resilient_call", "build_operands"]


@handles_failures
def resilient_call(
    form: ProductForm,
    *,
    store: InputStore | str | ProtectedOperands,
    timeout: float | None = None,
    width: int | None = None,
    detector: FailureDetector | None = None,
    on_step: Callable[[int], None] | None = None,
    stats: dict[str, float] | None = None,
    algorithm: str = "summa",
) -> ResilientResult:
    """Run ``form`` surviving process failures: the four phases of :mod:`ftkit.linalg.resilient`.

    Collective on C's grid. The keyword arguments are :func:`~ftkit.linalg.resilient.resilient_pdgemm`'s
    (``width`` checked here; ``algorithm``, and that protected operands belong to this form, by the caller).

    Length: the four phases in order, with the error-free shortcut after the first agreement; each phase is
    a function of its own, and cutting the sequence that hands them their state would only hide it.

    Returns
    -------
    ResilientResult
        On every surviving process.

    Raises
    ------
    ProcessFailure, Fenced, ABFTError, StorageError
        As :func:`~ftkit.linalg.resilient.resilient_pdgemm`.
    """
    f, grid = form, form.C.grid
    check_width(f.routine, width)
    _check_state_table(grid)
    protected = store if isinstance(store, ProtectedOperands) else None
    sides = protected.sides if protected is not None else ""
    name = f"resilient_{f.routine.lower()}"
    # Phase 1 (protect) starts here: capability checks (ULFM support) come first, before the detector (whose
    # set-up already uses ULFM's agreement) and before anything is saved.
    if grid.size > 1:  # a single process has no peer whose failure it would have to survive
        require_ulfm(grid.comm, name)
    where = (protected.store if protected is not None
             else open_store(store, rank=grid.rank, nranks=grid.size,  # type: ignore[arg-type]
                             fsync=FSYNC_INPUTS))  # fmt: skip
    prefix = call_name(grid, f.routine.lower())
    prefixes = {s: protected.prefix if s in sides else prefix for s in "ab"}  # type: ignore[union-attr]
    call = ResilientCall(f.ta, f.tb, f.m, f.n, f.k, f.alpha, f.beta, f.C, f.ic, f.jc, where, prefix,
                 {**prefixes, "c": prefix}, algorithm, width, on_step,
                 f.C.row_map(f.ic, f.m), f.C.col_map(f.jc, f.n), routine=f.routine, keep=f.keep,
                 triangle=f.triangle, triangular=f.triangular)  # fmt: skip
    if protected is not None and recycles(where):
        call.spares = protected.prefix  # this process's saved inputs are kept between calls on the handle
    det = detector or reusable_detector(grid, timeout)
    if call.multiply:
        _take_operands(call, protected, form, det)

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
    if not dead and not lost_any:  # the common case: one quick barrier and two Agrees are all the extra
        hold_decision(det.comm, 1)  # nobody returns (and maybe exits) before every peer knows it may return
        exchange.release()  # every transfer completed (with a failure, sends to the dead may be pending)
        known = get_state_table()  # all alive (checked on entry): write the persisted table only when new
        fresh = known is None or known.shape != grid.shape
        state = record_failures(grid.shape, set(), writer=det.rank == 0 and fresh)
        _remove_inputs(call)
        record_phases(stats, t0, t1, t2)
        return ResilientResult(f.C, grid, grid.comm, (), state, {}, 0, exchange.storage_reads, det.timeout)  # type: ignore[arg-type]
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


def _take_operands(call: ResilientCall, protected: ProtectedOperands | None, form: ProductForm,
                   det: FailureDetector | None) -> None:
    """Set ``call.ops``: the protected operands themselves, or A and B aligned now (collective).

    The redistribution (and the form's ``prepare`` step) is a plain collective on the grid: a process that
    dies in it can leave it completed on some ranks and failed on others. A rank where it failed revokes the
    grid's communicators (its row and column communicators too: PDTRSM's ``prepare`` broadcasts on them, and
    a live peer blocked in a row broadcast whose root left with the error would otherwise wait forever), marks
    itself ``lost`` (no operands) instead of raising, and says so at the protect phase's barrier, so that
    every survivor fails the call alike. The ``"prepare"`` stage of :data:`~._call_state.fault_hook` comes
    just before a form's ``prepare``.
    """
    saved = protected.operands if protected is not None else None
    if saved is not None and protected.sides == "ab":  # type: ignore[union-attr]
        call.ops = saved
    else:
        try:
            call.ops = build_operands(form, call.algorithm, protected)[0]
        except MPI.Exception:  # ULFM reports a peer's death here as MPI_ERR_PROC_FAILED or MPI_ERR_OTHER
            revoke_grid(call.grid)  # a live peer still inside the redistribution must not wait for this one
            if det is not None:  # else the detector's set-up, which comes later, finds the dead
                det.check_failures()
            call.lost = True
            return
        if saved is not None:  # the saved side is computed with exactly the pieces that were saved
            for side in protected.sides:  # type: ignore[union-attr]
                setattr(call.ops, side, getattr(saved, side))
    grid, ops = call.grid, call.ops
    for r in range(grid.size):  # every rank's piece shapes are pure index arithmetic
        p, q = grid.coords(r)
        call.shapes[("a", r)] = (ops.crows.count(p), ops.ka.count(q))
        call.shapes[("b", r)] = (ops.kb.count(p), ops.ccols.count(q))


def build_operands(form: ProductForm, algorithm: str, protected: ProtectedOperands | None = None) -> Built:
    """The form's aligned operands built now (collective), and the operands they were aligned from: its
    ``align`` step, or its ``prepare`` step then the redistribution (given ``protected``, the handle of a
    partial protection, whose fixed side they reuse). The ``"prepare"`` stage of
    :data:`~._call_state.fault_hook` comes just before ``align`` or ``prepare``."""
    if form.prepare is not None or form.align is not None:
        at_stage("prepare")
    if form.align is not None:
        return form.align(protected.operands if protected is not None else None), None
    previous = protected.prepared if protected is not None else None
    built = (form.prepare(previous) if form.prepare is not None and previous is not None
             else form.prepare() if form.prepare is not None
             else (form.A, form.ia, form.ja, form.B, form.ib, form.jb))  # fmt: skip
    A, ia, ja, B, ib, jb = built
    return aligned_operands(form.ta, form.tb, form.m, form.n, form.k, A, ia, ja, B, ib, jb, form.C, form.ic,
                            form.jc, same_kmap=algorithm == "cannon"), built  # fmt: skip


def _own_inputs(call: ResilientCall) -> dict[str, tuple[np.ndarray, str | None]]:
    """This process's inputs the call saves, by key (C as on entry; the aligned operands not protected),
    each with the spare key it is kept under between calls (``None``: not kept)."""
    me = call.grid.rank
    whats = ["c"] if call.save_c else []
    whats += [side for side in "ab" if call.saves(side) and call.ops is not None]
    return {f"{call.prefix}/{what}.{me}": (call.C.local if what == "c" else getattr(call.ops, what),
                                           spare_key(call.spares, what, me) if call.spares else None)
            for what in whats}  # fmt: skip


def _save(call: ResilientCall) -> None:
    """Phase 1, first half: save this process's inputs (local; a failure to save is said at the barrier)."""
    grid, where = call.grid, call.where
    d = call.C.desc
    for r in range(grid.size):
        call.shapes[("c", r)] = d.local_shape(*grid.coords(r), grid.nprow, grid.npcol)
    try:
        for key, (array, spare) in _own_inputs(call).items():
            if spare is None or not recycles(where):  # a spare is set for a recycling store only
                where.save(key, np.asfortranarray(array))
            else:  # the previous call's file rewritten in place: no page allocated, truncated or freed
                where.save(key, np.asfortranarray(array), recycle=spare)
    except StorageError as exc:  # e.g. a full disk: said at the barrier, raised alike everywhere later
        call.store_errno = exc.errno or getattr(exc.__cause__, "errno", None) or 0


def _remove_inputs(call: ResilientCall) -> None:
    """Remove the inputs of an error-free call (local; once every live process holds the decision, nobody
    reads them): each process its own files, then rank 0 the call's directory with whatever is left in it,
    so that no process carries every deletion at the end of the call. A call on a handle instead has each
    process keep its files under their spare keys, for the next call on the handle to rewrite, and the last
    one to move its files out removes the directory (rank 0 removing it might take the others' files)."""
    if call.spares is not None and recycles(call.where):  # spares are set for a recycling store only
        for key, (_, spare) in _own_inputs(call).items():
            if spare is not None:
                call.where.retire(key, spare)
        return
    for key in _own_inputs(call):
        call.where.remove(key)
    if call.grid.rank == 0 and call.saved:
        call.where.remove(call.prefix)


def _synchronize(call: ResilientCall) -> tuple[FailureAwareExchange, bool]:
    """Phase 1, second half: synchronize with a deadline, so everyone's pieces are readable before anyone
    can need them.

    Returns the failure-aware exchange for the next phases and whether some process has no operands
    (``lost``: the same answer on every live process, which then all skip the iterate phase).
    """
    grid, det, where = call.grid, call.det, call.where
    exchange = FailureAwareExchange(det, grid, where, call.prefixes, call.shapes, call.on_step, call.C.dtype)
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
    part = UpdatedPart(call, c)  # what the routine updates: a triangle's tiles, or all of c (then masked)
    try:
        if not call.multiply:
            if call.m and call.n:
                part.scale(c, call.beta)
        elif call.algorithm == "cannon":
            ops = call.ops
            assert ops is not None
            _scale(c, call.beta)
            run_cannon(exchange, ops.a, ops.b, c, ops.ka, call.alpha)
        elif call.triangular is None:  # beta is applied by the first local GEMM, as pdgemm does
            ops = call.ops
            assert ops is not None
            run_summa(call.grid, ops.a, ops.b, c, ops.ka, ops.kb, call.alpha, exchange=exchange,
                      steps=plan_summa(ops.ka, ops.kb, call.width), beta=part.first_beta(c, call.beta),
                      tiles=part.tiles)  # fmt: skip
        else:
            _iterate_banded(call, exchange, c)
    except Fenced:
        pass
    except Exception as exc:  # noqa: BLE001 - any error of our own: withdraw, re-raised after the agreements
        call.det.withdraw(f"{type(exc).__name__}: {exc}")
        return exc
    part.restore(c)  # the entries the routine does not update get their values back, bit for bit
    return None


def _iterate_banded(call: ResilientCall, exchange: FailureAwareExchange, c: np.ndarray) -> None:
    """The steps of a product with a triangular operand, each multiplied only into the band of ``c`` it
    reaches (:class:`~._part.TriangularBands`): one SUMMA pipeline whose steps have their own tiles, so the
    next step's exchange is in flight during this step's GEMMs."""
    ops = call.ops
    assert ops is not None
    bands = TriangularBands(call)
    steps = plan_summa(ops.ka, ops.kb, call.width or band_width(ops.ka, ops.kb))
    run_summa(call.grid, ops.a, ops.b, c, ops.ka, ops.kb, call.alpha, exchange=exchange, steps=steps,
              beta=bands.first_beta(c, steps[0], call.beta), tiles=bands.tiles)  # fmt: skip


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
    hold_decision(det.comm, decided)  # those that raise below may leave: not before everyone has decided
    tick("agree_s")
    if not decided & _WHOLE:
        # Name the same ranks everywhere: agree on them (the fenced take part, then leave as fenced).
        gone = sorted(agree_on_dead(det.comm, det.dead | dead, abstain=det.fenced))
        det.raise_if_fenced()
        discard_inputs(call, gone, first=det.rank == min(set(range(grid.size)) - set(gone), default=-1))
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
    if decided & (_STORED | _INPUTS) != _STORED | _INPUTS:  # the call fails on every survivor
        discard_inputs(call, dead, first=new_comm.Get_rank() == 0)
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
