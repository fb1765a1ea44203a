"""The checked product behind :func:`~ftkit.linalg.abft.ft_pdgemm` and :func:`~ftkit.linalg.abft.ft_pdsymm`
(how it works: :mod:`ftkit.linalg.abft`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..._wait import wait_requests
from ...errors import ABFTError, PBLASArgumentError
from ...inject import InjectionPlan
from .. import checksums
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix
from ..pblas._operands import AlignedOperands, aligned_operands
from ..pblas._panel_buffers import pooled_buffer, release_pool
from ..pblas._summa import AllgatherExchange, PanelExchange, plan_summa, run_summa
from ..pblas.gemm import (
    _scale,
    _symmetric_copy,
    check_gemm_args,
    check_symm_args,
    check_width,
)
from ..pblas.rank_k import Staircase
from ..resilient.multiply import resilient_pdgemm
from ._blocks import BlockSegmentation, Threshold
from ._encoded_exchange import _ChecksumExchange
from ._recompute import recompute_blocks
from .report import ABFTReport, BlockEvent, check_ft_args, threshold_name

__all__ = ["ft_pdgemm", "ft_pdsymm"]

#: One more term ``op(A) op(B)`` of a checked product: ``(A, ia, ja, B, ib, jb)``.
Term = tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]


# ---------------------------------------------------------------- public routines
@names_failures("FT_PDGEMM", "C", "resilient_pdgemm")
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
        :func:`ftkit.linalg.checksums.choose_bs` from the block sizes and ``k``.
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
        An input store (:class:`ftkit.storage.inputs.InputStore`), a directory every rank can read, or the
        :class:`~ftkit.linalg.ProtectedOperands` of an earlier ``protect_operands``: run the
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
    check_ft_args(r, 20, bs, tol, mode, inject)
    check_width(r, width)
    if protect_inputs is not None:  # the process-failure path (issue 8)
        if inject is not None or exchange is not None:
            raise PBLASArgumentError(r, 24, "protect_inputs cannot be combined with inject= or exchange=")
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


@names_failures("FT_PDSYMM", "C", "resilient_pdsymm")
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
    :func:`ft_pdgemm` (PBLAS positions 19-22). The symmetric A is expanded from its triangle first (as
    ``pdsymm`` does); the checksums
    are taken from that expansion, so they protect the multiply.

    Raises
    ------
    PBLASArgumentError, ABFTError
        As :func:`ft_pdgemm`.
    """
    r = "FT_PDSYMM"
    side, uplo, m, n, alpha, ia, ja, ib, jb, beta, ic, jc, na = check_symm_args(
        r, side, uplo, m, n, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    check_ft_args(r, 19, bs, tol, mode, inject)
    if m == 0 or n == 0:
        return ABFTReport(threshold=threshold_name(tol))
    pool: dict[object, np.ndarray] = {}
    W = _symmetric_copy(A, ia, ja, na, uplo, pool) if alpha != 0.0 else A
    left, right = ((W, ia, ja), (B, ib, jb)) if side == "L" else ((B, ib, jb), (W, ia, ja))
    report = _ft_gemm("N", "N", m, n, m if side == "L" else n, alpha, *left, *right, beta, C, ic, jc, bs, tol,
                      mode, None, None, inject, unchecked_is_error)  # fmt: skip
    release_pool(pool)  # not after an exception: a transfer of W's panels may be pending
    return report


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
    c_before: np.ndarray | None = None,
    more_terms: Sequence[Term] = (),
    aligned: Sequence[AlignedOperands] | None = None,
    stairs: Staircase | None = None,
) -> ABFTReport:
    """The checked product (arguments already validated): encode, multiply, verify, correct, report.

    ``c_before``: a local array equal to C's submatrix before the call (its local part, same shape) that
    the caller keeps unchanged during it; a recomputation then reads C0 from it instead of a copy taken here.
    ``more_terms``: further ``(A, ia, ja, B, ib, jb)`` whose ``alpha op(A) op(B)`` (same ``ta``, ``tb``,
    sizes) is added to C after the first by SUMMA runs of their own; their checksums go into the same
    prediction (inner dimension ``k`` per term), so C is verified once, and a recomputation sums every term
    (PDSYR2K's two terms without copying its operands side by side).
    ``aligned``: the terms' operands already aligned with C's submatrix (one per term, in order), used
    instead of aligning them here.
    ``stairs``: a triangle of C's submatrix (:class:`~ftkit.linalg.pblas.rank_k.Staircase`): only its tiles
    are scaled, multiplied, read and verified (the blocks outside are neither checked nor counted); its
    elements outside the triangle must be zero in C (the caller puts them back); a "C" flip lands inside it.
    """
    grid = C.grid
    threshold = Threshold.parse(tol)
    if m == 0 or n == 0:
        return ABFTReport(threshold=threshold.name)
    seg = BlockSegmentation.of(C, ic, jc, m, n, int(bs) if bs is not None else checksums.choose_bs(C.desc.mb,
                                                                                               C.desc.nb, k))
    c = C.local_view(ic, jc, m, n)
    pool: dict[object, np.ndarray] = {}  # the copy of C0 in a buffer kept between calls, as panels are
    try:
        # C0's share of the expected sums (and a copy for recomputing blocks), before the beta scaling
        keep = stairs.keep if stairs is not None else None
        inside = _inside(seg, keep)
        c0, c0_sums = _summarize_c0(c, seg, beta, mode, c_before, keep, pool)
        product = checksums.ChecksumProduct(seg.nr, seg.nc, threshold.kinds)  # squared sums: statistical only
        ops = _multiply_encoded(ta, tb, m, n, k, alpha, [(A, ia, ja, B, ib, jb), *more_terms], beta, C, ic,
                                jc, seg, product, width, exchange, inject, aligned, stairs)  # fmt: skip
        pred = product.predict(alpha, beta, c0_sums)
        sums = checksums.block_sums_sq(c, seg.rb, seg.cb, keep=keep)
        thr = threshold.bounds(pred, seg, alpha, beta, csq=sums[4])
        v = _only(checksums.verify_blocks(c, seg.rb, seg.cb, pred.expected, thr, sums), inside)
        events, rest, final, t_fix = _verify_and_correct(c, seg, v, pred.expected, thr, mode, grid.rank,
                                                         inside)
        # One non-blocking reduction (waited without spinning: ranks that finish first sleep instead of
        # polling for the slowest) tells every process the report's totals and whether any block must be
        # recomputed; the collective recomputation and the exchange of events only run when there is
        # something to share.
        n_unchecked = int(v.unchecked.sum())
        (n_rest, n_events, checked, unchecked), (max_ratio, t_max) = _reduce(
            grid.comm, [len(rest), len(events), (seg.nr * seg.nc if inside is None else int(inside.sum()))
                        - n_unchecked, n_unchecked],
            [_ratio(final), t_fix],
        )
        if n_rest:
            more, t_re = recompute_blocks(
                grid, ops, rest, c, c0, seg.rb, seg.cb, alpha, beta, pred.expected, thr, pred, threshold.tol,
                lambda bi, bj, action: seg.event(bi, bj, grid.rank, action),
            )
            events += more
            t0 = time.perf_counter()
            final = (_only(checksums.verify_blocks(c, seg.rb, seg.cb, pred.expected, thr), inside) if events
                     else v)
            t_fix += t_re + time.perf_counter() - t0
            (n_events,), (max_ratio, t_max) = _reduce(grid.comm, [len(events)], [_ratio(final), t_fix])
        all_events = [e for evs in grid.comm.allgather(events) for e in evs] if n_events else []
        all_events.sort(key=lambda e: (e.row_block, e.col_block))
        report = _report_of(all_events, checked, unchecked, max_ratio, t_max, threshold.name, seg.bs)
        _raise_if_failed(report, mode, unchecked_is_error)
        return report
    finally:
        release_pool(pool)


def _report_of(events: list[BlockEvent], checked: float, unchecked: float, max_ratio: float, seconds: float,
              threshold: str, bs: int) -> ABFTReport:
    """The report of a checked product from every process's ``events`` (sorted) and the reduced totals."""
    return ABFTReport(
        blocks_checked=int(checked),
        detected=sum(e.action not in ("rounding", "unchecked") for e in events),
        corrected=sum(e.action in ("located", "recomputed") for e in events),
        rounding_alarms=sum(e.action == "rounding" for e in events),
        events=tuple(events), max_ratio=float(max_ratio), correct_seconds=float(seconds), threshold=threshold,
        bs=bs, unchecked=int(unchecked),
    )


def _summarize_c0(c: np.ndarray, seg: BlockSegmentation, beta: float, mode: str, c_before: np.ndarray | None,
                  keep: np.ndarray | None, pool: dict[object, np.ndarray]) -> tuple[Any, Any]:
    """C0's block sums (``None`` if ``beta == 0``) and what a recomputation reads C0 from (``None`` if none
    will): ``c_before``, or a copy taken in the same pass (into a buffer of ``pool``: a fresh array of C's
    size costs page faults and the kernel's zeroing, a pass of its own). ``keep``: only the rows
    ``keep[0, j]:keep[1, j]`` of column ``j`` are read (and copied)."""
    if beta == 0.0:
        return None, None
    if mode != "correct" or c_before is not None:
        return c_before if mode == "correct" else None, checksums.summarize_c0(c, seg.rb, seg.cb, keep=keep)
    c0 = pooled_buffer(pool, "c0", c.shape)
    return c0, checksums.summarize_c0(c, seg.rb, seg.cb, c0, keep=keep, zero_rest=False)  # copy in the pass


def _inside(seg: BlockSegmentation, keep: np.ndarray | None) -> np.ndarray | None:
    """Which blocks lie in the kept rows (``None``: all of them); a block is wholly in or out."""
    if keep is None:
        return None
    k0, k1 = keep[0, seg.cb[:-1]][None, :], keep[1, seg.cb[:-1]][None, :]
    return (seg.rb[:-1, None] >= k0) & (seg.rb[1:, None] <= k1) & (k1 > k0)


def _only(v: checksums.Verification, inside: np.ndarray | None) -> checksums.Verification:
    """``v`` with the blocks outside ``inside`` neither flagged nor unchecked, their residuals zero."""
    if inside is None:
        return v
    res = {f: np.where(inside, getattr(v, f), 0.0) for f in ("res_ee", "res_we", "res_ew", "res_ww")}
    return dataclasses.replace(v, **res, flagged=v.flagged & inside, unchecked=v.unchecked & inside)


def _multiply_encoded(
    ta: str, tb: str, m: int, n: int, k: int, alpha: float, terms: Sequence[Term], beta: float,
    C: DistributedMatrix, ic: int, jc: int, seg: BlockSegmentation, product: checksums.ChecksumProduct,
    width: int | None, exchange: PanelExchange | None, inject: InjectionPlan | None,
    aligned: Sequence[AlignedOperands] | None = None, stairs: Staircase | None = None,
) -> list[Any]:
    """Scale C by beta and add ``alpha op(A) op(B)`` of every term by SUMMA with the checksums in the panels
    (collective); return the terms' aligned operands (empty if nothing was multiplied), which a recomputation
    needs. An injection plan's steps are the first term's; its last "C" step comes after every term."""
    grid = C.grid
    c = C.local_view(ic, jc, m, n)
    # beta == 0 without injections: left to the first local GEMM, as pdgemm does (one pass over C fewer,
    # same bits); a C flip planned before the first update must land in a C that is then read, so not then
    fused_beta0 = beta == 0.0 and inject is None and alpha != 0.0 and k > 0
    if not fused_beta0:
        for rs, cs in [(slice(None), slice(None))] if stairs is None else stairs.tiles:
            _scale(c[rs, cs], beta)
    c_inj, to_global = c, seg.to_global  # where a C flip may land: inside the triangle, given stairs
    if stairs is not None:
        rs, cs = stairs.inner
        c_inj, r0, q0 = c[rs, cs], rs.start, cs.start
        to_global = lambda i, j: seg.to_global(i + r0, j + q0)  # noqa: E731
    if alpha == 0.0 or k == 0:
        if inject is not None:
            inject.resolve(grid.size, 0)
            inject.apply("C", grid.rank, 0, c_inj, to_global)
        return []
    all_ops = [aligned[t] if aligned is not None
               else aligned_operands(ta, tb, m, n, k, A, ia, ja, B, ib, jb, C, ic, jc)
               for t, (A, ia, ja, B, ib, jb) in enumerate(terms)]
    if inject is None and exchange is None and len(all_ops) > 1:
        # Without injections every term goes through one pipeline, as pdsyr2k's do: the next term's first
        # exchange (its pieces encoded) is in flight during the previous term's last GEMM instead of after
        # it. Same local GEMMs, same checksums into the same prediction.
        shared = AllgatherExchange()
        chk = _ChecksumExchange(shared, c.shape[0], c.shape[1], seg.rb, seg.cb, product, c_inj, None,
                                grid.rank, to_global)  # fmt: skip
        first = all_ops[0]
        run_summa(grid, first.a, first.b, first.c, first.ka, first.kb, alpha, exchange=chk, width=width,
                  beta=0.0 if fused_beta0 else 1.0, tiles=None if stairs is None else stairs.tiles,
                  more=[(op.a, op.b, op.ka, op.kb) for op in all_ops[1:]])  # fmt: skip
        chk.release()
        shared.release()
        return all_ops
    last = 0
    for t, ops in enumerate(all_ops):
        steps = plan_summa(ops.ka, ops.kb, width)
        plan = inject if t == 0 else None
        if plan is not None:
            plan.resolve(grid.size, len(steps))
            last = len(steps)
        own = AllgatherExchange() if exchange is None else None
        inner: PanelExchange = exchange if exchange is not None else own  # type: ignore[assignment]
        chk = _ChecksumExchange(inner, c.shape[0], c.shape[1], seg.rb, seg.cb, product, c_inj, plan,
                                grid.rank, to_global)  # fmt: skip
        run_summa(grid, ops.a, ops.b, ops.c, ops.ka, ops.kb, alpha, exchange=chk, steps=steps,
                  beta=0.0 if fused_beta0 and t == 0 else 1.0,
                  tiles=None if stairs is None else stairs.tiles)  # fmt: skip
        chk.release()  # extended-piece and panel buffers back to the pool, as pdgemm does
        if own is not None:
            own.release()
    if inject is not None:
        inject.apply("C", grid.rank, last, c_inj, to_global)
    return all_ops


def _verify_and_correct(
    c: np.ndarray, seg: BlockSegmentation, v: checksums.Verification, expected: list[np.ndarray],
    thr: np.ndarray, mode: str, rank: int, inside: np.ndarray | None = None,
) -> tuple[list[BlockEvent], list[tuple[int, int]], checksums.Verification, float]:
    """Local part of the check: events of the unchecked and flagged blocks, blocks a single-element
    correction fixed in place (``mode="correct"``), and the blocks left to recompute.

    Returns ``(events, blocks to recompute, final verification, seconds spent correcting)``.
    """
    events = [seg.event(int(bi), int(bj), rank, "unchecked") for bi, bj in zip(*np.nonzero(v.unchecked),
                                                                               strict=True)]  # fmt: skip
    if mode == "detect":
        flagged = zip(*np.nonzero(v.flagged), strict=True)
        return events + [seg.event(int(bi), int(bj), rank, "detected") for bi, bj in flagged], [], v, 0.0
    if not v.flagged.any():
        return events, [], v, 0.0
    t0 = time.perf_counter()
    fixed, rest = checksums.correct_flagged(c, seg.rb, seg.cb, v, expected)
    for bi, bj, i, j in fixed:
        element = (int(seg.rows_here[seg.rb[bi]]) + i, int(seg.cols_here[seg.cb[bj]]) + j)
        events.append(seg.event(bi, bj, rank, "located", element))
    final = _only(checksums.verify_blocks(c, seg.rb, seg.cb, expected, thr), inside) if fixed else v
    return events, rest, final, time.perf_counter() - t0


def _ratio(final: checksums.Verification) -> float:
    """Largest ``|residual| / threshold`` of the blocks that passed (0 if none)."""
    ok = ~final.flagged & np.isfinite(final.thr) & (final.thr > 0)
    return float(np.max(np.abs(final.res_ee[ok]) / final.thr[ok])) if np.any(ok) else 0.0


def _raise_if_failed(report: ABFTReport, mode: str, unchecked_is_error: bool) -> None:
    """Raise :class:`ABFTError` (on every process: the report is the same everywhere) if the call failed."""
    if mode == "correct" and report.uncorrected:
        bad = [(e.row_block, e.col_block) for e in report.events if e.action == "uncorrected"]
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


def _reduce(comm: MPI.Comm, sums: list[float], maxes: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Return the sums and maxima of the processes' values (collective, non-blocking, waited by sleeping)."""
    s, mx = np.asarray(sums, dtype=np.float64), np.asarray(maxes, dtype=np.float64)
    s_out, mx_out = np.empty_like(s), np.empty_like(mx)
    wait_requests([comm.Iallreduce(s, s_out, op=MPI.SUM), comm.Iallreduce(mx, mx_out, op=MPI.MAX)])
    return s_out, mx_out
