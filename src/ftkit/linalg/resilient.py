"""PDGEMM that survives process failures in the middle: "keep going, settle up at the end" (FT-PBLAS 2.3).

:func:`resilient_pdgemm` runs SUMMA with a failure-aware panel exchange and proceeds in four phases.

1. **Protect.** Every process saves its aligned local operands (its rows of op(A), its columns of op(B))
   and its
   whole local C (after the ``beta`` scaling) in an :class:`~ftkit.failure.protect.InputStore` every rank
   can read
   (a directory on the shared file system: the checkpoint L4 level), then all synchronize with a deadline.
2. **Iterate.** SUMMA panels (or Cannon's neighbour shifts, ``algorithm="cannon"``) travel point to point
   with a deadline (:class:`~ftkit.failure.FailureDetector`). A process that dies (ULFM reports it) or misses
   the deadline is declared dead; everyone is told, stops talking to it, and from then on takes its share of
   every panel (in Cannon: the piece it would have passed on) from the stored operands instead of waiting
   for it. The survivors finish all the steps; nobody computes the dead processes' C blocks yet.
3. **Agree and repair.** Survivors agree (ULFM ``Agree``) on the set of dead processes, record it in the state
   table (identical everywhere) and build a repaired communicator (``Shrink`` + split) without them.
4. **Settle up.** Every dead process's piece of C is cut into ``mb x nb`` tiles, spread round-robin over the
   survivors (not all on one), recomputed from the stored operands, and each tile is verified with its block
   checksum (``sum(tile) == sum(C0) + alpha * (1^T A_rows)(B_cols 1)`` within a rounding bound).

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
be read
back (it died before saving them, or more failures than the store survives) every survivor raises the same
:class:`~ftkit.errors.ProcessFailure`; nothing hangs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ..errors import ABFTError, FtkitError, ProcessFailure
from ..failure import (
    FailureDetector,
    Fenced,
    agree_on_dead,
    get_state_table,
    guarded,
    record_failures,
    repair,
)
from ..failure.detect import Exchange
from ..failure.protect import InputStore, open_store
from ..failure.ulfm import agree_flag
from ._blas import gemm_update
from ._operands import aligned_operands
from ._summa import (
    SummaStep,
    extract_a_piece,
    extract_b_piece,
    plan_summa,
    pooled_buffer,
    release_pool,
    run_summa,
)
from .descriptor import BlockCyclic1D, indxg2l, indxg2p
from .grid import ProcessGrid
from .matrix import DistributedMatrix
from .pblas import _scale, check_gemm_args, check_width
from .protected import ProtectedOperands, check_algorithm, detector_for, forget_detector, operands_key

__all__ = ["ResilientResult", "resilient_pdgemm"]

_TAG_SPAN = 15000  # data tags wrap below the detector's notice tags


@dataclass
class ResilientResult:
    """What :func:`resilient_pdgemm` returns on a surviving process.

    Attributes
    ----------
    C
        The full result matrix: the caller's ``C`` if nobody failed, else a copy on the survivors' grid.
    grid, comm
        The grid ``C`` lives on and its communicator (the repaired one after failures).
    failed_ranks
        Ranks (of the original grid) that failed or were fenced off, agreed on by all survivors.
    state_table
        The process-state table after the agreement (``1`` alive, ``0`` dead), shaped like the original grid.
    reassigned
        ``{dead rank: {survivor rank: number of tiles it recomputed}}`` (ranks of the original grid).
    tiles_verified
        Recomputed tiles whose block checksum was verified on this process.
    storage_reads
        Stored pieces this process read instead of waiting for a dead owner, during the steps.
    timeout
        The exchange deadline used (s).
    """

    C: DistributedMatrix
    grid: ProcessGrid
    comm: MPI.Intracomm
    failed_ranks: tuple[int, ...]
    state_table: np.ndarray
    reassigned: dict[int, dict[int, int]] = field(default_factory=dict)
    tiles_verified: int = 0
    storage_reads: int = 0
    timeout: float = 0.0


def _slots(widths: list[int]) -> list[slice]:
    ends = np.cumsum([0, *widths]).tolist()
    return [slice(int(ends[i]), int(ends[i + 1])) for i in range(len(widths))]


class _Pending:
    def __init__(
        self,
        exchange: _FailureAwareExchange,
        step: SummaStep,
        ex: Exchange,
        a_panel: np.ndarray,
        b_panel: np.ndarray,
        b_scratch: dict[int, np.ndarray],
    ) -> None:
        self.x, self.step, self.ex = exchange, step, ex
        self.a_panel, self.b_panel, self.b_scratch = a_panel, b_panel, b_scratch

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        x, step, g = self.x, self.step, self.x.grid
        x.det.finish_exchange(self.ex)
        a_slots = _slots([s.stop - s.start for s in step.a_cols])
        b_slots = _slots([s.stop - s.start for s in step.b_rows])
        for q in range(g.npcol):  # A pieces of dead owners in my process row come from the store
            owner = g.rank_of(g.myrow, q)
            if q != g.mycol and not x.det.alive(owner):
                self.a_panel[:, a_slots[q]] = extract_a_piece(x.stored("a", owner), step, q)
                x.storage_reads += 1
        for p in range(g.nprow):
            owner = g.rank_of(p, g.mycol)
            if p == g.myrow:
                continue
            if x.det.alive(owner):
                self.b_panel[b_slots[p], :] = self.b_scratch[owner]
            else:
                self.b_panel[b_slots[p], :] = extract_b_piece(x.stored("b", owner), step, p)
                x.storage_reads += 1
        return self.a_panel, self.b_panel


class _FailureAwareExchange:
    """SUMMA panel exchange, point to point with deadlines; a dead owner's piece is read from the store.

    A pieces are received straight into their column slots of an F-order panel; B pieces (packed in F order)
    into scratch buffers copied into their row bands in ``wait``, as the default exchange does.
    """

    def __init__(
        self,
        det: FailureDetector,
        grid: ProcessGrid,
        store: InputStore,
        prefixes: dict[str, str],
        shapes: dict[tuple[str, int], tuple[int, int]],
        on_step: Callable[[int], None] | None,
    ) -> None:
        self.det, self.grid, self.store, self.prefixes = det, grid, store, prefixes
        self.shapes, self.on_step = shapes, on_step
        self.cache: dict[tuple[str, int], np.ndarray] = {}
        self.storage_reads = 0
        self.unrecoverable: set[int] = set()
        self._pool: dict[object, np.ndarray] = {}

    def _buffer(self, key: tuple[object, ...], shape: tuple[int, int]) -> np.ndarray:
        # Panels come from the buffers pdgemm keeps between multiplies: fresh memory costs a page fault and a
        # zeroing per page, a few ms per call at n = 2048, which was most of this path's error-free overhead.
        return pooled_buffer(self._pool, key, shape)

    def release(self) -> None:
        """Hand the panel buffers back for later multiplies (only once no transfer can touch them)."""
        release_pool(self._pool)

    def stored(self, what: str, rank: int) -> np.ndarray:
        key = (what, rank)
        if key not in self.cache:
            try:
                self.cache[key] = self.store.load(f"{self.prefixes[what]}/{what}.{rank}")
            except FtkitError:
                # Keep going with zeros so every survivor reaches the agreement, which then fails uniformly.
                self.unrecoverable.add(rank)
                self.cache[key] = np.zeros(self.shapes[key], order="F")
        return self.cache[key]

    def start(self, grid: ProcessGrid, step: SummaStep, a_piece: np.ndarray, b_piece: np.ndarray) -> _Pending:
        if self.on_step is not None:
            self.on_step(step.index)
        g, det = grid, self.det
        a_slots = _slots([s.stop - s.start for s in step.a_cols])
        b_slots = _slots([s.stop - s.start for s in step.b_rows])
        parity = step.index % 2  # two buffer sets: a panel stays valid until the second-next start()
        a_panel = self._buffer(("a", parity), (a_piece.shape[0], step.width))
        a_panel[:, a_slots[g.mycol]] = a_piece
        mine_a = a_panel[:, a_slots[g.mycol]]
        recv_a = {g.rank_of(g.myrow, q): a_panel[:, a_slots[q]] for q in range(g.npcol) if q != g.mycol}
        b_panel = self._buffer(("b", parity), (step.width, b_piece.shape[1]))
        b_panel[b_slots[g.myrow], :] = b_piece
        mine_b = np.asfortranarray(b_piece)
        recv_b = {
            g.rank_of(p, g.mycol): self._buffer(
                ("bs", p, parity), (b_slots[p].stop - b_slots[p].start, b_piece.shape[1])
            )
            for p in range(g.nprow)
            if p != g.myrow
        }
        tag = 2 * (step.index % _TAG_SPAN)
        # One exchange for both panels (row peers for A, column peers for B: never the same process), so one
        # wait polls all of a step's transfers, as pdgemm's does.
        ex = det.start_exchange({r: mine_a for r in recv_a}, recv_a, tag)
        det.start_exchange({r: mine_b for r in recv_b}, recv_b, tag + 1, into=ex)
        return _Pending(self, step, ex, a_panel, b_panel, recv_b)


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
        :class:`~ftkit.failure.protect.InputStore` or a directory path readable by every rank (the L4 /
        ``glbl_dir`` directory), where ftkit checkpoint files
        (:class:`~ftkit.failure.protect.CheckpointFileStore`)
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
    """
    ta, tb, m, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_gemm_args(
        "PDGEMM", transa, transb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    check_width("PDGEMM", width)
    grid = C.grid
    check_algorithm(grid, algorithm, 19)
    table = get_state_table()
    if table is not None and table.shape == grid.shape and not table.all():
        marked = [grid.rank_of(int(p), int(q)) for p, q in zip(*np.nonzero(table == 0), strict=False)]
        raise ProcessFailure(
            f"the state table marks grid ranks {marked} dead: this grid can no longer compute; "
            f"continue on the survivors' grid (ResilientResult.grid) or reset_state() after a "
            f"restart",
            marked,
        )
    protected = store if isinstance(store, ProtectedOperands) else None
    if protected is not None:
        protected.check(A, B, operands_key(ta, tb, m, n, k, ia, ja, ib, jb, C, ic, jc, algorithm))
    det = detector or detector_for(grid, timeout)
    me = det.rank
    where = protected.store if protected is not None else open_store(store, rank=me, nranks=grid.size)  # type: ignore[arg-type]
    prefix = f"pdgemm-{det.call_id()}"
    ops_prefix = protected.prefix if protected is not None else prefix
    prefixes = {"a": ops_prefix, "b": ops_prefix, "c": prefix}
    multiply = bool(m and n and k and alpha != 0.0)
    # C is saved as it was on entry (before beta), where it is needed to rebuild a dead process's piece: it
    # contributes (beta != 0) or has entries outside the updated submatrix (kept as they are).
    d = C.desc
    save_c = not multiply or beta != 0.0 or (ic, jc, m, n) != (0, 0, d.m, d.n)
    save_ops = multiply and protected is None
    saved = save_c or save_ops

    a: np.ndarray | None = None
    b: np.ndarray | None = None
    ka: BlockCyclic1D | None = None
    kb: BlockCyclic1D | None = None
    if multiply:
        ops = aligned_operands(
            ta, tb, m, n, k, A, ia, ja, B, ib, jb, C, ic, jc, same_kmap=algorithm == "cannon"
        )
        a, b, ka, kb, crows, ccols = ops.a, ops.b, ops.ka, ops.kb, ops.crows, ops.ccols
    else:  # nothing to multiply: the result is C scaled by beta
        crows, ccols = C.row_map(ic, m), C.col_map(jc, n)

    # Phase 1: protect. Shapes of every rank's pieces are pure index arithmetic, so readers can size buffers.
    shapes: dict[tuple[str, int], tuple[int, int]] = {}
    for r in range(grid.size):
        p, q = grid.coords(r)
        shapes[("c", r)] = d.local_shape(p, q, grid.nprow, grid.npcol)
        if ka is not None and kb is not None:
            shapes[("a", r)] = (crows.count(p), ka.count(q))
            shapes[("b", r)] = (kb.count(p), ccols.count(q))
    t0 = time.perf_counter()
    if save_c:
        where.save(f"{prefix}/c.{me}", C.local)
    if save_ops and a is not None and b is not None:
        where.save(f"{prefix}/a.{me}", np.asfortranarray(a))
        where.save(f"{prefix}/b.{me}", np.asfortranarray(b))
    exchange = _FailureAwareExchange(det, grid, where, prefixes, shapes, on_step)
    t2 = t1 = time.perf_counter()
    try:
        if saved:  # everyone's pieces are readable before anyone can need them
            det.barrier()
        t1 = time.perf_counter()
        # Phase 2: iterate, reading dead owners' pieces from the store.
        if not multiply:
            if m and n:
                _scale(C.local_view(ic, jc, m, n), beta)
        elif algorithm == "cannon":
            _scale(C.local_view(ic, jc, m, n), beta)
            _run_cannon(exchange, a, b, C.local_view(ic, jc, m, n), ka, alpha)  # type: ignore[arg-type]
        else:  # beta is applied by the first local GEMM, as pdgemm does (no separate pass over C)
            steps = plan_summa(ka, kb, width)  # type: ignore[arg-type]
            run_summa(grid, a, b, C.local_view(ic, jc, m, n), ka, kb, alpha,  # type: ignore[arg-type]
                      exchange=exchange, steps=steps, beta=beta)  # fmt: skip
    except Fenced:
        pass
    t2 = time.perf_counter()

    # Phase 3: agree on the dead, record them, repair. ULFM's agreement busy-polls: ranks that finish early
    # would spin in it, taking the shared cores from the ranks still computing; wait for them asleep first.
    if not det.fenced:
        try:
            det.barrier()
        except Fenced:
            pass
    dead = agree_on_dead(det.comm, det.dead, abstain=det.fenced)
    if not dead:  # the common case: one quick barrier and Agree are all the extra; nobody reads the store
        exchange.release()  # every transfer completed (with a failure, sends to the dead may be pending)
        state = record_failures(grid.shape, set(), writer=me == 0)
        if me == 0 and saved:
            where.remove(prefix)
        _record(stats, t0, t1, t2)
        return ResilientResult(C, grid, grid.comm, (), state, {}, 0, exchange.storage_reads, det.timeout)  # type: ignore[arg-type]
    forget_detector(grid)
    tick = _Ticker(stats)
    inputs_ok = agree_flag(det.comm, int(not (exchange.unrecoverable & set(dead))))
    tick("agree_s")
    new_comm = repair(det.comm, dead)
    tick("repair_s")
    if new_comm is None or det.fenced:
        det.raise_if_fenced()
        raise Fenced(f"rank {me} was declared dead by its peers and fenced off", [me])
    state = record_failures(grid.shape, {grid.coords(r) for r in dead}, writer=new_comm.Get_rank() == 0)
    if not inputs_ok:
        raise ProcessFailure(
            f"ranks {sorted(dead)} failed and their inputs cannot be read back from {where!r} "
            f"(they died before saving them, or the store lost them): the product cannot be "
            f"completed; restart from a checkpoint",
            sorted(dead),
        )

    # Phase 4: settle up.
    survivors = [r for r in range(grid.size) if r not in dead]
    tiles, reassigned = _plan_tiles(grid, sorted(dead), survivors, crows, ccols, d.mb, d.nb)
    pieces: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []  # (priority, rows, cols, data)
    own_rows, own_cols = C.global_rows(), C.global_cols()
    pieces.append((0, own_rows, own_cols, C.local))
    verified = 0
    for dead_rank, holder, rsl, csl in tiles:
        pd, qd = grid.coords(dead_rank)
        rows_g = _global(d.mb, pd, d.rsrc, grid.nprow, shapes[("c", dead_rank)][0])
        cols_g = _global(d.nb, qd, d.csrc, grid.npcol, shapes[("c", dead_rank)][1])
        if holder != me:
            continue
        if rsl is None:  # the dead process's whole stored C (entries outside the submatrix keep these values)
            if save_c:
                pieces.append((1, rows_g, cols_g, exchange.stored("c", dead_rank)))
            continue
        r0 = crows.local_start(pd)
        c0 = ccols.local_start(qd)
        lr = slice(r0 + rsl.start, r0 + rsl.stop)
        lc = slice(c0 + csl.start, c0 + csl.stop)
        if save_c:  # stored as it was on entry: apply beta here
            tile = np.array(exchange.stored("c", dead_rank)[lr, lc], order="F")
            _scale(tile, beta)
        else:  # beta == 0 over all of C: nothing of the old C survives
            tile = np.zeros((lr.stop - lr.start, lc.stop - lc.start), order="F")
        if a is not None and b is not None and ka is not None and kb is not None:
            a_rows = np.empty((rsl.stop - rsl.start, k), order="F")
            for q in range(grid.npcol):
                a_rows[:, ka.indices_on(q)] = _piece(exchange, "a", grid.rank_of(pd, q), a, me)[rsl, :]
            b_cols = np.empty((k, csl.stop - csl.start), order="F")
            for p in range(grid.nprow):
                b_cols[kb.indices_on(p), :] = _piece(exchange, "b", grid.rank_of(p, qd), b, me)[:, csl]
            tile, nblocks = _recompute_verified(alpha, a_rows, b_cols, tile, d.mb, d.nb)
            verified += nblocks
        pieces.append((2, rows_g[lr], cols_g[lc], tile))

    tick("recompute_s")
    new_grid = ProcessGrid.square(new_comm)
    result = _redistribute(pieces, new_grid, C)
    guarded(new_comm, "the final synchronization", new_comm.Barrier)
    tick("redistribute_s")
    if new_comm.Get_rank() == 0 and saved:
        where.remove(prefix)
    _record(stats, t0, t1, t2)
    return ResilientResult(
        result,
        new_grid,
        new_grid.comm,  # type: ignore[arg-type]
        tuple(sorted(dead)),
        state,
        reassigned,
        verified,
        exchange.storage_reads,
        det.timeout,
    )


def _run_cannon(
    x: _FailureAwareExchange, a: np.ndarray, b: np.ndarray, c: np.ndarray, kmap: BlockCyclic1D, alpha: float
) -> None:
    """Cannon's algorithm (see :mod:`ftkit.linalg._cannon`) with deadlines: a piece that does not arrive from
    the neighbour (dead, or fenced) is the stored operand of its owner, read from the store instead."""
    g, det = x.grid, x.det
    P, i, j = g.npcol, g.myrow, g.mycol
    rows, cols = a.shape[0], b.shape[1]

    def src(step: int) -> int:  # k-owner whose pieces (i, j) multiplies at this step
        return (i + j + step) % P

    def shift(cur_a, cur_b, step: int, a_to: int, a_from: int, b_to: int, b_from: int, tag: int):  # type: ignore[no-untyped-def]
        # A moves along my process row, B along my process column; a hop to myself is no hop.
        q = src(step)
        new_a = cur_a if a_from == j else np.empty((rows, kmap.count(q)), order="F")
        new_b = cur_b if b_from == i else np.empty((kmap.count(q), cols), order="F")
        sa = {g.rank_of(i, a_to): cur_a} if a_to != j else {}
        sb = {g.rank_of(b_to, j): cur_b} if b_to != i else {}
        ex_a = det.start_exchange(sa, {g.rank_of(i, a_from): new_a} if a_from != j else {}, tag)
        ex_b = det.start_exchange(sb, {g.rank_of(b_from, j): new_b} if b_from != i else {}, tag + 1)
        return new_a, new_b, ex_a, ex_b, q

    def finish(new_a, new_b, ex_a, ex_b, q):  # type: ignore[no-untyped-def]
        if det.finish_exchange(ex_a):  # the neighbour is dead: take the piece from its owner's stored operand
            new_a[...] = x.stored("a", g.rank_of(i, q))
            x.storage_reads += 1
        if det.finish_exchange(ex_b):
            new_b[...] = x.stored("b", g.rank_of(q, j))
            x.storage_reads += 1
        return new_a, new_b

    cur_a, cur_b = np.asfortranarray(a), np.asfortranarray(b)
    if P > 1:  # initial skew: my pieces go to whoever multiplies them first; mine come from owner src(0)
        cur_a, cur_b = finish(
            *shift(cur_a, cur_b, 0, (j - i) % P, src(0), (i - j) % P, src(0), 2 * _TAG_SPAN)
        )
    for step in range(P):
        if x.on_step is not None:
            x.on_step(step)
        pending = None
        if step + 1 < P:
            pending = shift(
                cur_a, cur_b, step + 1, (j - 1) % P, (j + 1) % P, (i - 1) % P, (i + 1) % P, 2 * step
            )
        gemm_update(alpha, cur_a, cur_b, c)
        if pending is not None:
            cur_a, cur_b = finish(*pending)


class _Ticker:
    """Adds the seconds since the previous tick to ``stats[key]`` (a no-op without ``stats``)."""

    def __init__(self, stats: dict[str, float] | None) -> None:
        self.stats, self.last = stats, time.perf_counter()

    def __call__(self, key: str) -> None:
        now = time.perf_counter()
        if self.stats is not None:
            self.stats[key] = self.stats.get(key, 0.0) + now - self.last
        self.last = now


def _record(stats: dict[str, float] | None, t0: float, t1: float, t2: float) -> None:
    if stats is not None:
        stats["protect_s"] = t1 - t0
        stats["iterate_s"] = t2 - t1
        stats["settle_s"] = time.perf_counter() - t2


def _global(nb: int, p: int, src: int, nprocs: int, count: int) -> np.ndarray:
    from .descriptor import indxl2g

    return indxl2g(np.arange(count, dtype=np.int64), nb, p, src, nprocs)


def _piece(exchange: _FailureAwareExchange, what: str, rank: int, mine: np.ndarray, me: int) -> np.ndarray:
    return mine if rank == me else exchange.stored(what, rank)


def _plan_tiles(
    grid: ProcessGrid,
    dead: list[int],
    survivors: list[int],
    crows: BlockCyclic1D,
    ccols: BlockCyclic1D,
    mb: int,
    nb: int,
) -> tuple[list, dict[int, dict[int, int]]]:  # type: ignore[type-arg]
    """Cut each dead process's submatrix piece into bands of whole mb x nb blocks, one band per survivor.

    The piece is cut along its longer block dimension into ``min(#survivors, #blocks)`` bands of nearly equal
    block counts, dealt round-robin (continuing over dead processes) so the recomputation is spread over the
    survivors, not all on one, and each survivor does one large GEMM instead of many small ones.

    Returns ``[(dead, holder, row slice, col slice)]`` (slices relative to the dead's submatrix piece; a
    ``None`` slice marks the entry that carries the dead's whole stored C) and ``{dead: {holder: blocks}}``.
    The plan is pure arithmetic on agreed data, so every survivor computes the same one.
    """
    tiles: list[tuple[int, int, slice | None, slice | None]] = []
    reassigned: dict[int, dict[int, int]] = {}
    turn = 0
    for dr in dead:
        pd, qd = grid.coords(dr)
        tiles.append((dr, survivors[dr % len(survivors)], None, None))
        nr, nc = crows.count(pd), ccols.count(qd)
        rblocks, cblocks = -(-nr // mb), -(-nc // nb)
        if rblocks == 0 or cblocks == 0:
            continue
        by_cols = cblocks >= rblocks
        nblocks, size, length = (cblocks, nb, nc) if by_cols else (rblocks, mb, nr)
        nbands = min(len(survivors), nblocks)
        for i in range(nbands):
            lo = i * nblocks // nbands * size
            hi = min(length, (i + 1) * nblocks // nbands * size)
            band = slice(lo, hi)
            holder = survivors[turn % len(survivors)]
            turn += 1
            rsl, csl = (slice(0, nr), band) if by_cols else (band, slice(0, nc))
            tiles.append((dr, holder, rsl, csl))
            count = -(-(rsl.stop - rsl.start) // mb) * -(-(csl.stop - csl.start) // nb)
            reassigned.setdefault(dr, {}).setdefault(holder, 0)
            reassigned[dr][holder] += count
    return tiles, reassigned


def _block_sums(x: np.ndarray, rb: int, cb: int) -> np.ndarray:
    """Sums of the ``rb x cb`` blocks of ``x`` (edge blocks may be smaller)."""
    r = np.add.reduceat(x, np.arange(0, x.shape[0], rb), axis=0) if x.shape[0] else x
    return np.add.reduceat(r, np.arange(0, x.shape[1], cb), axis=1) if x.shape[1] else r


def _recompute_verified(
    alpha: float, a_rows: np.ndarray, b_cols: np.ndarray, c0: np.ndarray, mb: int, nb: int
) -> tuple[np.ndarray, int]:
    """Return ``c0 + alpha * a_rows @ b_cols`` and its number of blocks, each ``mb x nb`` block verified.

    Block checksum (FT-PBLAS 2.2): the sum of a block must equal the sum of its ``c0`` block plus
    ``alpha * (1^T A_rows_I)(B_cols_J 1)``, within a rounding bound from the same sums of absolute values.
    A mismatch is recomputed once; a second mismatch raises.

    Raises
    ------
    ABFTError
        If a block fails its checksum twice.
    """
    k = a_rows.shape[1]
    ra = np.add.reduceat(a_rows, np.arange(0, a_rows.shape[0], mb), axis=0)  # (row blocks, k)
    cb = np.add.reduceat(b_cols, np.arange(0, b_cols.shape[1], nb), axis=1)  # (k, col blocks)
    expected = _block_sums(c0, mb, nb) + alpha * (ra @ cb)
    abs_a = np.add.reduceat(np.abs(a_rows), np.arange(0, a_rows.shape[0], mb), axis=0)
    abs_b = np.add.reduceat(np.abs(b_cols), np.arange(0, b_cols.shape[1], nb), axis=1)
    bound = abs(alpha) * (abs_a @ abs_b) + _block_sums(np.abs(c0), mb, nb)
    tol = 4.0 * (k + mb * nb + 2) * np.finfo(np.float64).eps * np.maximum(bound, np.finfo(np.float64).tiny)
    for _ in range(2):
        tile = np.asfortranarray(c0 + alpha * (a_rows @ b_cols))
        residual = np.abs(_block_sums(tile, mb, nb) - expected)
        if (residual <= tol).all():
            return tile, int(expected.size)
    worst = float((residual / tol).max())
    raise ABFTError(f"a recomputed block failed its checksum twice (residual {worst:.3g} x the bound)")


def _redistribute(
    pieces: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]], grid: ProcessGrid, C: DistributedMatrix
) -> DistributedMatrix:
    """Move pieces ``(priority, global rows, global cols, data)`` into a new matrix like C on ``grid``.

    Lower priorities are written first, so a recomputed tile (2) overwrites a dead process's stored C (1).
    """
    d = C.desc
    result = DistributedMatrix.zeros(
        grid, d.m, d.n, mb=d.mb, nb=d.nb, rsrc=d.rsrc % grid.nprow, csrc=d.csrc % grid.npcol
    )
    rd = result.desc
    outgoing: list[list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in range(grid.size)]
    for prio, rows, cols, data in pieces:
        rown = indxg2p(rows, rd.mb, rd.rsrc, grid.nprow)
        coln = indxg2p(cols, rd.nb, rd.csrc, grid.npcol)
        for r in range(grid.size):
            p, q = grid.coords(r)
            ri, ci = np.flatnonzero(rown == p), np.flatnonzero(coln == q)
            if ri.size and ci.size:
                outgoing[r].append((prio, rows[ri], cols[ci], np.ascontiguousarray(data[np.ix_(ri, ci)])))
    incoming = guarded(grid.comm, "the redistribution of the result", lambda: grid.comm.alltoall(outgoing))
    received = sorted((piece for batch in incoming for piece in batch), key=lambda x: x[0])
    for _, rows, cols, data in received:
        lr = indxg2l(rows, rd.mb, grid.nprow)
        lc = indxg2l(cols, rd.nb, grid.npcol)
        result.local[np.ix_(lr, lc)] = data
    return result
