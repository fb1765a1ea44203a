"""FT_PDGEMM and FT_PDSYMM: PBLAS products protected against silent errors by block checksums (FT-PBLAS 2.2).

How :func:`ft_pdgemm` works (the checksum algebra and its bounds are in :mod:`ftkit.linalg.abft`):

1. **Encode, locally, inside the panels.** The SUMMA engine (:func:`~ftkit.linalg._summa.run_summa`) runs
   with a panel exchange that wraps the normal one (:mod:`ftkit.linalg._ft_exchange`): when a process copies
   its piece of an A panel into its panel slot, the same pass (one numba kernel) writes the piece's checksum
   rows under it (plain, index-weighted and absolute sums of every row segment of C, plus squared sums for
   ``tol="statistical"``, the only threshold that needs them); likewise the checksum columns beside its B
   piece. They travel in the same messages as the data; no separate message, no extra synchronisation, no
   extra copy of the piece.
2. **Predict.** On arrival each process multiplies the checksum rows of the A panel with the checksum
   columns of the B panel (a GEMM ``1/bs^2`` the size of the data GEMM), which accumulates for every
   ``bs x bs`` block of its C the expected plain / weighted sums and the ``|A||B|`` magnitude that scales the
   rounding bound.
3. **Verify** each local block's sums against the prediction (``tol``: rigorous bound, statistical bound or a
   relative number). The report gives the largest residual / threshold ratio of the blocks that passed.
   Without errors the only synchronisation after the multiply is one non-blocking reduction of the report's
   totals, waited by sleeping (a blocking collective busy-polls on the ranks that finish first: with more
   ranks than cores that CPU is taken from the slowest one); events are exchanged, and the collective
   recomputation below runs, only when some process has flagged a block.
4. **Correct** (``mode="correct"``): a block with a single wrong element is fixed in O(1) from the weighted
   checksums; any other flagged block is recomputed by its owner from its rows of op(A) and columns of op(B),
   fetched from the processes of its process row and column only (nothing global), then checked again. A
   block flagged only by the statistical threshold whose recomputation passes the rigorous bound was a
   rounding alarm (structured data whose rounding errors do not cancel), not a fault. If a block can still
   not be made consistent (e.g. op(A) itself was corrupted in memory after encoding, so the fetched rows
   are wrong too) every process raises :class:`~ftkit.errors.ABFTError` carrying the report.

Limits. A second wrong element in a block that also holds a large one is caught by the weighted checksums
only if it exceeds their threshold (about ``bs`` times the plain one, since the weights reach ``bs``); below
that the O(1) correction accepts the block and the second error stays (then within ``bs`` times the bound).
Smaller ``bs`` tightens this. Combining these checksums with the failure-aware exchange is not supported:
the final verification is a collective on the original grid.

``mode="detect"`` stops after step 3 and leaves C exactly as computed (for Krylov solvers that decide
themselves). :class:`ABFTPolicy` runs the checked product every ``check_every`` calls and plain ``pdgemm``
otherwise (the reference's CG recipe: checking every 10th product keeps the iteration path undisturbed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from ..errors import ABFTError, PBLASArgumentError
from ..inject import InjectionPlan
from . import abft
from ._ft_exchange import _ChecksumExchange
from ._operands import aligned_operands
from .._wait import wait_requests
from ._summa import AllgatherExchange, PanelExchange, plan_summa, run_summa
from .descriptor import BlockCyclic1D
from .grid import ProcessGrid
from .matrix import DistributedMatrix
from .pblas import (
    _check_dim,
    _check_flag,
    _check_matrix,
    _check_scalar,
    _is_int,
    _scale,
    _symmetric_copy,
    check_gemm_args,
    check_width,
)

__all__ = ["ABFTReport", "BlockEvent", "ABFTPolicy", "ft_pdgemm", "ft_pdsymm"]

MODES = ("correct", "detect")


@dataclass(frozen=True)
class BlockEvent:
    """One flagged C block: global block coordinates ``(row_block, col_block)`` (the block's index among C's
    row / column segments), its first row/column in C's submatrix,
    size, the grid rank owning it, and what happened: ``"located"`` (single element fixed in O(1) at
    ``element``, submatrix coordinates), ``"recomputed"``, ``"rounding"`` (statistical alarm cleared by the
    rigorous bound after recomputation), ``"uncorrected"``, ``"detected"`` (``mode="detect"``) or
    ``"unchecked"`` (its checksums or bound are not finite, so it could not be checked at all)."""

    row_block: int
    col_block: int
    row0: int
    col0: int
    rows: int
    cols: int
    rank: int
    action: str
    element: tuple[int, int] | None = None


@dataclass
class ABFTReport:
    """Outcome of one checked product; identical on every process of the grid.

    Attributes
    ----------
    blocks_checked
        Number of C blocks verified (over all processes); never includes an unchecked block.
    unchecked
        Number of C blocks that could not be checked: their expected sums or threshold are not finite (an
        ``Inf``, ``NaN`` or overflowing value such as ``1e300`` in op(A) or op(B) poisons the checksums of its
        whole block row or column). Each has an event with action ``"unchecked"``; with
        ``unchecked_is_error=True`` they raise :class:`~ftkit.errors.ABFTError`.
    detected
        Blocks whose checksums disagreed (excluding rounding alarms).
    corrected
        Detected blocks made consistent again (located or recomputed).
    rounding_alarms
        Blocks flagged by the statistical threshold that the rigorous bound cleared after recomputation.
    events
        One :class:`BlockEvent` per flagged block, sorted by ``(row_block, col_block)``.
    max_ratio
        Largest ``|residual| / threshold`` over the blocks that passed (final state): how far below the
        threshold the observed rounding residuals are (its inverse is the threshold's tightness).
    correct_seconds
        Wall time of the correction phase (locating, recomputing, re-verifying; slowest process), seconds.
    threshold
        ``"rigorous"``, ``"statistical"`` or ``"tol=<x>"``.
    bs
        Checksum block size used.
    failed_ranks
        Ranks lost to process failures (filled by the failure-aware path; empty here).
    result
        The failure-tolerant path's result object, if that path ran (after failures the product lives on a
        new grid of the survivors: ``result.C`` / ``result.grid``); ``None`` otherwise.
    """

    blocks_checked: int = 0
    detected: int = 0
    corrected: int = 0
    rounding_alarms: int = 0
    events: tuple[BlockEvent, ...] = ()
    max_ratio: float = 0.0
    correct_seconds: float = 0.0
    threshold: str = "rigorous"
    bs: int = 0
    failed_ranks: tuple[int, ...] = field(default_factory=tuple)
    result: Any = None
    unchecked: int = 0

    @property
    def uncorrected(self) -> int:
        """Detected blocks left inconsistent."""
        return sum(e.action in ("uncorrected", "detected") for e in self.events)

    @property
    def detected_blocks(self) -> list[tuple[int, int]]:
        """Global block coordinates ``(row_block, col_block)`` of the detected blocks."""
        return [(e.row_block, e.col_block) for e in self.events if e.action not in ("rounding", "unchecked")]

    @property
    def unchecked_blocks(self) -> list[tuple[int, int]]:
        """Global block coordinates ``(row_block, col_block)`` of the blocks that could not be checked."""
        return [(e.row_block, e.col_block) for e in self.events if e.action == "unchecked"]


# ---------------------------------------------------------------- argument checks
def _check_ft_args(routine: str, pos: int, bs: object, tol: object, mode: object, inject: object) -> None:
    if bs is not None and (not _is_int(bs) or int(bs) < 1):  # type: ignore[call-overload]
        raise PBLASArgumentError(routine, pos, f"bs={bs!r}; must be a positive integer or None (automatic)")
    if tol is not None and tol != "statistical":
        if (
            isinstance(tol, str)
            or not isinstance(tol, (int, float))
            or not (float(tol) >= 0.0 and np.isfinite(tol))
        ):
            raise PBLASArgumentError(
                routine,
                pos + 1,
                f"tol={tol!r}; use None (rigorous bound), 'statistical', or a finite relative tolerance >= 0",
            )
    if mode not in MODES:
        raise PBLASArgumentError(routine, pos + 2, f"mode={mode!r}; use 'correct' or 'detect'")
    if inject is not None and not isinstance(inject, InjectionPlan):
        raise PBLASArgumentError(
            routine, pos + 3, f"inject must be an ftkit.inject.InjectionPlan, got {type(inject).__name__}"
        )


def _threshold_name(tol: float | str | None) -> str:
    return "rigorous" if tol is None else ("statistical" if tol == "statistical" else f"tol={float(tol):g}")


# ---------------------------------------------------------------- public routines
def ft_pdgemm(
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
    bs: int | None = None,
    tol: float | str | None = None,
    mode: str = "correct",
    width: int | None = None,
    exchange: PanelExchange | None = None,
    inject: InjectionPlan | None = None,
    protect_inputs: Any = None,
    unchecked_is_error: bool = False,
) -> ABFTReport:
    """Compute ``C(ic:, jc:) = alpha * op(A) @ op(B) + beta * C`` as :func:`~ftkit.linalg.pdgemm`, checked.

    Collective on C's grid. Arguments as ``pdgemm`` plus:

    Parameters
    ----------
    bs
        Checksum block size (rows and columns of a checked block); ``None`` chooses it with
        :func:`ftkit.linalg.abft.choose_bs` from the block sizes and ``k``.
    tol
        ``None``: rigorous a-priori bound (a correct product is never flagged); ``"statistical"``:
        probabilistic bound, much tighter; a number ``t``: threshold ``t * (|alpha||A||B| + |beta||C|)``
        block sums.
    mode
        ``"correct"`` (fix what is found) or ``"detect"`` (report only, C left as computed).
    width, exchange
        SUMMA step width and panel exchange, as in ``pdgemm`` (the checksums wrap ``exchange``).
    inject
        Fault injection plan (:class:`ftkit.inject.InjectionPlan`), for tests and demos.
    protect_inputs
        An input store (:class:`ftkit.failure.protect.InputStore`), a directory every rank can read, or the
        :class:`~ftkit.linalg.protected.ProtectedOperands` of an earlier ``protect_operands``: run the
        process-failure-tolerant path instead (:func:`ftkit.linalg.resilient.resilient_pdgemm`: inputs saved
        there, a dead process's pieces read back, its C blocks recomputed by the survivors and verified by
        block checksums). The report then has ``failed_ranks`` and ``result`` (after failures the product is
        ``report.result.C`` on ``report.result.grid``); ``bs``, ``tol`` and ``mode`` do not apply.
    unchecked_is_error
        Treat blocks that could not be checked (non-finite checksums or bound, see
        :attr:`ABFTReport.unchecked`) as errors: raise :class:`~ftkit.errors.ABFTError` (in both modes).

    Returns
    -------
    ABFTReport
        The same on every process.

    Raises
    ------
    PBLASArgumentError
        Illegal argument (PBLAS positions as ``pdgemm``; ``bs``, ``tol``, ``mode``, ``inject`` are 20-23).
    ABFTError
        ``mode="correct"`` and a detected error could not be corrected, or ``unchecked_is_error`` and some
        block could not be checked; ``err.report`` holds the report.
    """
    r = "FT_PDGEMM"
    ta, tb, m, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_gemm_args(
        r, transa, transb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    _check_ft_args(r, 20, bs, tol, mode, inject)
    check_width(r, width)
    if protect_inputs is not None:  # the process-failure path (issue 8)
        if inject is not None or exchange is not None:
            raise PBLASArgumentError(r, 24, "protect_inputs cannot be combined with inject= or exchange=")
        from .resilient import resilient_pdgemm

        res = resilient_pdgemm(ta, tb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc,
                               store=protect_inputs, width=width)  # fmt: skip
        checked, unchecked = res.comm.allreduce(np.array([res.tiles_verified, res.tiles_unchecked]))
        report = ABFTReport(blocks_checked=int(checked), failed_ranks=res.failed_ranks, result=res,
                            unchecked=int(unchecked))  # fmt: skip
        if unchecked_is_error and report.unchecked:
            raise ABFTError(f"ft_pdgemm: {report.unchecked} recomputed block(s) could not be checked "
                            "(non-finite data)", report=report)  # fmt: skip
        return report
    return _ft_gemm(
        ta, tb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc, bs, tol, mode, width, exchange, inject,
        unchecked_is_error,
    )


def ft_pdsymm(
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
    bs: int | None = None,
    tol: float | str | None = None,
    mode: str = "correct",
    inject: InjectionPlan | None = None,
    unchecked_is_error: bool = False,
) -> ABFTReport:
    """Compute :func:`~ftkit.linalg.pdsymm` (A symmetric, only its ``uplo`` triangle read), checked.

    Arguments as ``pdsymm`` plus ``bs``, ``tol``, ``mode``, ``inject``, ``unchecked_is_error`` as in
    :func:`ft_pdgemm` (PBLAS positions 19-22). The symmetric A is expanded from its triangle first (as ``pdsymm`` does); the checksums
    are taken from that expansion, so they protect the multiply.

    Raises
    ------
    PBLASArgumentError, ABFTError
        As :func:`ft_pdgemm`.
    """
    r = "FT_PDSYMM"
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
    _check_ft_args(r, 19, bs, tol, mode, inject)
    if m == 0 or n == 0:
        return ABFTReport(threshold=_threshold_name(tol))
    W = _symmetric_copy(A, ia, ja, na, uplo) if alpha != 0.0 else A
    if side == "L":
        return _ft_gemm("N", "N", m, n, m, alpha, W, ia, ja, B, ib, jb, beta, C, ic, jc, bs, tol, mode, None,
                        None, inject, unchecked_is_error)  # fmt: skip
    return _ft_gemm("N", "N", m, n, n, alpha, B, ib, jb, W, ia, ja, beta, C, ic, jc, bs, tol, mode, None, None,
                    inject, unchecked_is_error)  # fmt: skip


# ---------------------------------------------------------------- the checked product
def _ft_gemm(
    ta: str,
    tb: str,
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
    bs: int | None,
    tol: float | str | None,
    mode: str,
    width: int | None,
    exchange: PanelExchange | None,
    inject: InjectionPlan | None,
    unchecked_is_error: bool = False,
) -> ABFTReport:
    grid = C.grid
    tname = _threshold_name(tol)
    if m == 0 or n == 0:
        return ABFTReport(threshold=tname)
    bs = int(bs) if bs is not None else abft.choose_bs(C.desc.mb, C.desc.nb, k)
    crows, ccols = C.row_map(ic, m), C.col_map(jc, n)
    rows_here, cols_here = crows.indices_on(grid.myrow), ccols.indices_on(grid.mycol)
    rb = abft.segment_bounds(rows_here, ic, C.desc.mb, bs)
    cbnd = abft.segment_bounds(cols_here, jc, C.desc.nb, bs)
    nr, nc = len(rb) - 1, len(cbnd) - 1
    c = C.local_view(ic, jc, m, n)

    # C0's share of the expected sums (and a copy for recomputing blocks), before the beta scaling
    c0 = None
    c0_sums = None
    if beta != 0.0:
        c0_sums = abft.summarize_c0(c, rb, cbnd)
        if mode == "correct":
            c0 = c.copy(order="F")
    # beta == 0 without injections: left to the first local GEMM, as pdgemm does (one pass over C fewer,
    # same bits); a C flip planned before the first update must land in a C that is then read, so not then
    fused_beta0 = beta == 0.0 and inject is None and alpha != 0.0 and k > 0
    if not fused_beta0:
        _scale(c, beta)

    def c_to_global(i: int, j: int) -> tuple[int, int]:
        return ic + int(rows_here[i]), jc + int(cols_here[j])

    product = abft.ChecksumProduct(nr, nc, abft.checksum_kinds(tol))  # squared sums: statistical only
    ops = None
    if alpha != 0.0 and k > 0:
        ops = aligned_operands(ta, tb, m, n, k, A, ia, ja, B, ib, jb, C, ic, jc)
        steps = plan_summa(ops.ka, ops.kb, width)
        if inject is not None:
            inject.resolve(grid.size, len(steps))
        own = AllgatherExchange() if exchange is None else None
        chk = _ChecksumExchange(
            exchange or own,  # type: ignore[arg-type]
            c.shape[0],
            c.shape[1],
            rb,
            cbnd,
            product,
            c,
            inject,
            grid.rank,
            c_to_global,
        )
        run_summa(
            grid,
            ops.a,
            ops.b,
            ops.c,
            ops.ka,
            ops.kb,
            alpha,
            exchange=chk,
            steps=steps,
            beta=0.0 if fused_beta0 else 1.0,
        )
        chk.release()  # extended-piece and panel buffers back to the pool, as pdgemm does
        if own is not None:
            own.release()
        if inject is not None:
            inject.apply("C", grid.rank, len(steps), c, c_to_global)
    elif inject is not None:
        inject.resolve(grid.size, 0)
        inject.apply("C", grid.rank, 0, c, c_to_global)

    pred = product.predict(alpha, beta, c0_sums)
    expected = pred.expected
    sums = abft.block_sums_sq(c, rb, cbnd)
    thr = pred.thresholds(rb, cbnd, tol, alpha, beta, csq=sums[4])
    v = abft.verify_blocks(c, rb, cbnd, expected, thr, sums)
    rlen, clen = np.diff(rb), np.diff(cbnd)

    row0 = rows_here[rb[:-1]] if nr else np.zeros(0, dtype=np.int64)
    col0 = cols_here[cbnd[:-1]] if nc else np.zeros(0, dtype=np.int64)
    gseg: list[np.ndarray] = []

    def event(bi: int, bj: int, action: str, element: tuple[int, int] | None = None) -> BlockEvent:
        if not gseg:  # global block coordinates of my segments: segments depend only on global indices
            gseg.append(abft.segment_bounds(np.arange(m), ic, C.desc.mb, bs))
            gseg.append(abft.segment_bounds(np.arange(n), jc, C.desc.nb, bs))
        r0, c0_ = int(row0[bi]), int(col0[bj])
        return BlockEvent(
            int(np.searchsorted(gseg[0], r0)),
            int(np.searchsorted(gseg[1], c0_)),
            r0,
            c0_,
            int(rlen[bi]),
            int(clen[bj]),
            grid.rank,
            action,
            element,
        )

    def ratio(final: abft.Verification) -> float:
        ok = ~final.flagged & np.isfinite(final.thr) & (final.thr > 0)
        return float(np.max(np.abs(final.res_ee[ok]) / final.thr[ok])) if np.any(ok) else 0.0

    events: list[BlockEvent] = [
        event(int(bi), int(bj), "unchecked") for bi, bj in zip(*np.nonzero(v.unchecked), strict=True)
    ]
    rest: list[tuple[int, int]] = []
    final = v
    t_fix = 0.0
    if mode == "detect":
        events += [event(int(bi), int(bj), "detected") for bi, bj in zip(*np.nonzero(v.flagged), strict=True)]
    elif v.flagged.any():
        t0 = time.perf_counter()
        fixed, rest = abft.correct_flagged(c, rb, cbnd, v, expected)
        events += [event(bi, bj, "located", (int(row0[bi]) + i, int(col0[bj]) + j)) for bi, bj, i, j in fixed]
        final = abft.verify_blocks(c, rb, cbnd, expected, thr) if fixed else v
        t_fix = time.perf_counter() - t0
    # One non-blocking reduction (waited without spinning: ranks that finish first sleep instead of polling
    # for the slowest) tells every process the report's totals and whether any block must be recomputed;
    # the collective recomputation and the exchange of events only run when there is something to share.
    n_unchecked = int(v.unchecked.sum())
    (n_rest, n_events, checked, unchecked), (max_ratio, t_max) = _reduce(
        grid.comm, [len(rest), len(events), nr * nc - n_unchecked, n_unchecked], [ratio(final), t_fix]
    )
    if n_rest:
        more, t_re = _recompute(
            grid, ops, rest, c, c0, rb, cbnd, alpha, beta, expected, thr, pred, tol, event
        )
        events += more
        t0 = time.perf_counter()
        final = abft.verify_blocks(c, rb, cbnd, expected, thr) if events else v
        t_fix += t_re + time.perf_counter() - t0
        (n_events,), (max_ratio, t_max) = _reduce(grid.comm, [len(events)], [ratio(final), t_fix])
    all_events = [e for evs in grid.comm.allgather(events) for e in evs] if n_events else []
    all_events.sort(key=lambda e: (e.row_block, e.col_block))
    report = ABFTReport(
        blocks_checked=int(checked),
        detected=sum(e.action not in ("rounding", "unchecked") for e in all_events),
        corrected=sum(e.action in ("located", "recomputed") for e in all_events),
        rounding_alarms=sum(e.action == "rounding" for e in all_events),
        events=tuple(all_events),
        max_ratio=float(max_ratio),
        correct_seconds=float(t_max),
        threshold=tname,
        bs=bs,
        unchecked=int(unchecked),
    )
    if mode == "correct" and report.uncorrected:
        bad = [(e.row_block, e.col_block) for e in all_events if e.action == "uncorrected"]
        raise ABFTError(
            f"ft_pdgemm: {len(bad)} C block(s) {bad[:8]} still disagree with their checksums after "
            "recomputation: op(A) or op(B) itself is corrupted (recompute from clean inputs)",
            report=report,
        )
    if unchecked_is_error and report.unchecked:
        raise ABFTError(
            f"ft_pdgemm: {report.unchecked} C block(s) {report.unchecked_blocks[:8]} could not be checked: "
            "their checksums or bounds are not finite (Inf, NaN or overflowing values in op(A) or op(B))",
            report=report,
        )
    return report


def _reduce(comm: MPI.Comm, sums: list[float], maxes: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Return the sums and maxima of the processes' values (collective, non-blocking, waited by sleeping)."""
    s, mx = np.asarray(sums, dtype=np.float64), np.asarray(maxes, dtype=np.float64)
    s_out, mx_out = np.empty_like(s), np.empty_like(mx)
    wait_requests([comm.Iallreduce(s, s_out, op=MPI.SUM), comm.Iallreduce(mx, mx_out, op=MPI.MAX)])
    return s_out, mx_out


def _gather_full(comm: MPI.Comm, piece: np.ndarray, kmap: BlockCyclic1D, axis: int) -> np.ndarray:
    """Allgather over ``comm`` every member's ``piece`` (its k-indices along ``axis``), in global k order."""
    pieces = comm.allgather(np.ascontiguousarray(piece))
    k = kmap.n
    shape = (piece.shape[0], k) if axis == 1 else (k, piece.shape[1])
    full = np.empty(shape)
    for p, pc in enumerate(pieces):
        idx = kmap.indices_on(p)
        if axis == 1:
            full[:, idx] = pc
        else:
            full[idx, :] = pc
    return full


def _recompute(
    grid: ProcessGrid,
    ops: Any,
    rest: list[tuple[int, int]],
    c: np.ndarray,
    c0: np.ndarray | None,
    rb: np.ndarray,
    cbnd: np.ndarray,
    alpha: float,
    beta: float,
    expected: list[np.ndarray],
    thr: np.ndarray,
    pred: abft.Prediction,
    tol: float | str | None,
    event: Callable[..., BlockEvent],
) -> tuple[list[BlockEvent], float]:
    """Recompute the ``rest`` blocks from op(A) rows / op(B) columns fetched within my process row / column.

    Collective over the row and column communicators (every process takes part, most with nothing to ask).
    Returns the events and the seconds spent after the request exchange (fetching, recomputing, checking).
    """
    my_rows = sorted({bi for bi, _ in rest})
    my_cols = sorted({bj for _, bj in rest})
    # processes of a process row hold the same rows of C (and of op(A)): one union of requests per row
    row_req = sorted(set().union(*grid.row_comm.allgather(my_rows)))
    col_req = sorted(set().union(*grid.col_comm.allgather(my_cols)))
    t0 = time.perf_counter()  # timed from here: the request exchange above is a synchronisation, not work
    a_rows = b_cols = None
    if row_req and ops is not None:
        ridx = np.concatenate([np.arange(rb[bi], rb[bi + 1]) for bi in row_req])
        a_rows = _gather_full(grid.row_comm, ops.a[ridx, :], ops.ka, axis=1)
    if col_req and ops is not None:
        cidx = np.concatenate([np.arange(cbnd[bj], cbnd[bj + 1]) for bj in col_req])
        b_cols = _gather_full(grid.col_comm, ops.b[:, cidx], ops.kb, axis=0)
    if not rest:
        return [], time.perf_counter() - t0
    rpos = {bi: p for p, bi in enumerate(row_req)}
    cpos = {bj: p for p, bj in enumerate(col_req)}
    roff = np.concatenate([[0], np.cumsum([rb[bi + 1] - rb[bi] for bi in row_req])])
    coff = np.concatenate([[0], np.cumsum([cbnd[bj + 1] - cbnd[bj] for bj in col_req])])
    thr_rig = thr if tol is None else pred.thresholds(rb, cbnd, None, alpha, beta)
    out = []
    for bi, bj in rest:
        blk = c[rb[bi] : rb[bi + 1], cbnd[bj] : cbnd[bj + 1]]
        new = np.zeros(blk.shape, order="F")
        if beta != 0.0 and c0 is not None:
            new[...] = beta * c0[rb[bi] : rb[bi + 1], cbnd[bj] : cbnd[bj + 1]]
        if a_rows is not None and b_cols is not None:
            ar = a_rows[roff[rpos[bi]] : roff[rpos[bi] + 1]]
            bc = b_cols[:, coff[cpos[bj]] : coff[cpos[bj] + 1]]
            new += alpha * (ar @ bc)
        sub_rb = np.array([0, blk.shape[0]])
        sub_cb = np.array([0, blk.shape[1]])
        exp = [np.array([[e[bi, bj]]]) for e in expected]
        v = abft.verify_blocks(new, sub_rb, sub_cb, exp, np.array([[thr[bi, bj]]]))
        if not v.flagged[0, 0]:
            blk[...] = new
            out.append(event(bi, bj, "recomputed"))
            continue
        vr = abft.verify_blocks(new, sub_rb, sub_cb, exp, np.array([[thr_rig[bi, bj]]]))
        if tol == "statistical" and not vr.flagged[0, 0]:
            blk[...] = new
            out.append(event(bi, bj, "rounding"))
        else:
            out.append(event(bi, bj, "uncorrected"))
    return out, time.perf_counter() - t0


from .ft_policy import ABFTPolicy  # noqa: E402  (moved; importable from here as before)
