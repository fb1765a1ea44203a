"""FT_PDPOTRF: a Cholesky factorization that survives silent errors (ABFT) and, given a checkpointer, a
relaunch after a process failure.

The factorization is :func:`~ftkit.linalg.pdpotrf`'s right-looking algorithm
(:mod:`ftkit.linalg.cholesky._steps`), the same BLAS calls (an error-free ``ft_pdpotrf`` returns
``pdpotrf``'s factor bit for bit), with its work protected (:mod:`ftkit.linalg.cholesky._abft`):

- the trailing updates (``W_{e:,e:} -= P P.T``, nearly all the flops): block checksums (column and row sums
  of every block of the lower block trapezoid) carried through every update by small products with the
  panel's own sums, and verified when a block column is read (its panel): the diagonal block by O(block)
  reductions before it is factored, the rows below through the panel solve's check (below), read again
  only where that check flags a segment; a wrong element is located and corrected in O(nb), a wrong row
  or column element by element; the rigorous bound never flags a correct factorization;
- the panel travels with its row and column sums: a value changed between the sender and the product in
  the rows a process's columns multiply is found and restored from its row sum before the product uses it
  (one changed in its own rows, the left operand, spoils elements that the carried checksums locate);
- a block column whose errors cannot be located (two wrong elements in one column of a segment) is
  recomputed from A and the factored panels before the diagonal block is factored or the panel used in
  an update (:mod:`._column_recompute`: the same BLAS calls as the plain updates, so the factor is still
  ``pdpotrf``'s bit for bit; only on detection);
- every panel solve ``P L_kk^T = W_{e:,k}`` is checked against block column ``k``'s carried checksums:
  ``(e^T P_I) L_kk^T = e^T W_I`` for every segment ``I`` (plain and index-weighted sums, a rigorous bound;
  O(nb) per segment column, no pass over the panel beyond its sums), before the solution overwrites the
  panel. A flagged segment is verified in the panel: wrong values are located and corrected (or the block
  column recomputed) and the panel solved again; if the values agree, the solve was wrong and is done
  again.

Given a checkpointer (duck-typed: anything with ``protect``, ``checkpoint``, ``recover``, ``restarted`` and
``array``, such as :class:`ftkit.Checkpointer`; linalg does not import the checkpoint package), the
factorization's state is checkpointed every ``ckpt_every`` panels: the factored block columns of the work
matrix on and below their diagonal blocks (``ftkit.potrf.L``, packed, a resizable buffer that grows with the
panels, :mod:`._factored`: a checkpoint costs the factored lower part, not the whole matrix, nor the scratch
rows above the diagonal blocks; each checkpoint copies in only the block columns factored since the previous
one, and the Checkpointer writes the whole buffer), the index of the next panel (``ftkit.potrf.state``)
and the carried checksums (``ftkit.potrf.chk.*``, ``2 / bs`` of the matrix). The trailing matrix is not
written: on a restart (``ckpt.restarted``) ``ft_pdpotrf`` calls ``ckpt.recover()`` itself (which also fills
every other array the application protected), checks that the stored state belongs to a factorization of the
same order, offsets, ``uplo`` and layout, puts the factored columns back and rebuilds the trailing matrix from
A's values and the factored panels (:func:`._column_recompute.rebuild_trailing`: the updates again, the same
BLAS calls, so bit for bit what the killed run had); the rebuilt matrix is then checked against the carried
checksums like any other. A must therefore hold the same matrix as in the first run (a different one is
reported by those checks). A rank killed in panel ``k`` costs a recovery plus the panels since the last
checkpoint, not the factorization, and the factor is bit for bit the failure-free one (same grid, same
operations). A restart without any checkpoint of it starts from the beginning. Call it before any other
``recover()`` of the same checkpointer, on a grid of all the checkpointer's ranks (``ckpt.checkpoint`` is
collective on its communicator). The factored part stays protected after the call (a later ``protect`` of
the same names releases it). Recovery is by relaunch; online recovery with spare ranks is not wired in.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ...errors import ABFTError, PBLASArgumentError
from ...inject import InjectionPlan
from .._grid_failure import grid_failure, names_failures
from ..abft._blocks import Threshold
from ..abft.level3 import _as64
from ..abft.report import ABFTReport, BlockEvent, check_ft_args
from ..matrix import DistributedMatrix
from ..pblas._panel_buffers import pooled_buffer, release_pool
from ..pblas.add import trapezoid_mask
from ._abft import UpdateChecks
from ._column_recompute import recompute_column
from ._factored import CKPT_L, CKPT_STATE, FactoredColumns, resume
from ._fused import FusedUpdate, supports_fused
from ._lookahead import PanelFlight
from ._panel_sums import (
    direct_part,
    gather_panel,
    gathered_part,
    panel_buffer,
    share_panel,
)
from ._steps import HOLD, CholeskySteps
from ._tally import Tally, uncorrected
from .potrf import CholeskyWork, FactorizationError, check_potrf_args

__all__ = ["ft_pdpotrf", "CKPT_L", "CKPT_STATE"]


@names_failures("FT_PDPOTRF", "A")  # the panel and the checkpoint are named inside
def ft_pdpotrf(uplo: str, n: int, A: DistributedMatrix, ia: int, ja: int, ckpt: Any = None,
               bs: int | None = None, tol: float | str | None = None, *, ckpt_every: int | None = None,
               ckpt_level: int = 1, inject: InjectionPlan | None = None, inject_panel: int = 0,
               on_panel: Callable[[int], None] | None = None) -> ABFTReport:
    """Compute :func:`~ftkit.linalg.pdpotrf`, every update checked by ABFT, progress checkpointed.

    Collective on A's grid.

    Parameters
    ----------
    uplo, n, A, ia, ja
        As ``pdpotrf``.
    ckpt
        A checkpointer (``protect``, ``checkpoint``, ``recover``, ``restarted``) or ``None``.
    bs, tol
        Checksum block height (rows; default and at most the block size) and threshold (``None`` or
        ``"statistical"``: the rigorous bound; a number ``t``: ``t`` times the magnitudes) of the update
        checks.
    ckpt_every
        Checkpoint after every this many panels (default: about 8 checkpoints per factorization).
    ckpt_level
        Checkpoint level passed to ``ckpt.checkpoint``.
    inject, inject_panel
        Bit flips made in the update of panel ``inject_panel``: ``"A"`` in this process's received rows of
        the panel, ``"B"`` in the rows of the panel its columns multiply, ``"C"`` in the local trailing
        matrix (step 0: before the update, 1: after the update of block column ``inject_panel + 1``, which
        the look-ahead reads next, before the rest's; a flip above the block diagonal hits what nothing
        reads, scratch or, factored in place, A's other triangle, and is not reported).
    on_panel
        Called with the panel index after each panel (progress display; tests kill a rank there).

    Returns
    -------
    ABFTReport
        Totals over all checks: update events have the panel indices of the block (row, column) and its
        first row / column (submatrix coordinates); events of a panel element restored in transit have block
        ``(k, -1)`` for panel ``k``; panel-solve events have ``(-1, -1)`` and their first flagged local row
        as ``row0``.

    Raises
    ------
    PBLASArgumentError
        As ``pdpotrf``; ``ckpt`` is position 7, ``bs`` / ``tol`` / ``inject`` 8 / 9 / 11.
    FactorizationError
        If a leading minor is not positive definite.
    ABFTError
        If an update could not be corrected, not even by recomputing its block column (A's triangle is then
        left unchanged).
    RecoveryError
        On every process, if the restart's checkpoint holds another factorization, was taken on another
        grid or layout, or cannot be recovered (the message names why).
    ProcessFailure
        If a process of the grid failed (MPI reported it: ULFM), the grid's communicators revoked: the message
        names the panel and says how to go on (a relaunch resumes after the last checkpoint).
    """
    r = "FT_PDPOTRF"
    uplo, n, ia, ja = check_potrf_args(r, uplo, n, A, ia, ja)
    check_ft_args(r, 8, bs, tol, "correct", inject)
    needs = ("protect", "checkpoint", "recover", "restarted", "array")
    if ckpt is not None and not all(hasattr(ckpt, a) for a in needs):
        raise PBLASArgumentError(r, 7, "ckpt must be a Checkpointer (protect/checkpoint/recover/restarted/"
                                 f"array), got {type(ckpt).__name__}")
    threshold = Threshold.parse(tol)
    if n == 0:
        return ABFTReport(threshold=threshold.name)
    A64 = _as64(A)
    # an aligned lower layout is factored in A64 itself, A's lower part saved for the recomputations in a
    # cached buffer (CholeskyWork.original), copied in the checksums' pass over A; any other in a copy
    pool: dict[object, np.ndarray] = {}
    try:
        work = CholeskyWork(uplo, n, A64, ia, ja, in_place=True,
                            saved=functools.partial(pooled_buffer, pool, "original"), copy_saved=False)
        if ckpt is not None and ckpt.restarted:
            work.save()  # before the resume puts the factored columns into A64
        panels = work.steps.panels
        d = A.desc
        state = np.array([0, n, ia, ja, uplo == "U", len(panels), d.mb, d.nb], dtype=np.int64)
        checks = UpdateChecks(work.steps, threshold.tol, bs)
        done = None if ckpt is None else FactoredColumns(
            work.steps, getattr(ckpt, "protected", {}).get(CKPT_L))  # the last call's buffer, if any
        start = resume(ckpt, done, state, checks) if done is not None else 0
        if start == 0:
            work.save(copied=checks.init(0, save=work.unsaved()))
        every = max(1, int(ckpt_every) if ckpt_every else len(panels) // 8)
        tally = Tally(A.grid.rank)
        def at(j: int) -> InjectionPlan | None:  # the injection plan of panel j's update
            return inject if j == inject_panel else None

        k, saved = start, start  # the panel under way, the first one after the last checkpoint
        try:
            panel: _Launched | None = _launch(work, checks, start, at(start), tally)
            for k in range(start, len(panels)):  # panel k launched (factored, solved, sent): the look-ahead
                assert panel is not None
                bad, events, got = _arrive(work, checks, panel, at(k), tally)
                if bad >= 0:
                    tally.add(panel.checked, events)
                    _finish(work, A, A64, uplo, n, ia, ja)
                    raise FactorizationError(r, bad + 1, n)
                checked, panel = panel.checked, _update(work, checks, panel, got, at, tally)
                tally.add(checked, events)
                if done is not None and (k + 1) % every == 0 and k + 1 < len(panels):
                    state[0] = k + 1
                    ckpt.protect(CKPT_L, done.pack(k + 1), resizable=True)  # copies in the new block columns
                    ckpt.checkpoint(level=ckpt_level)
                    saved = k + 1
                if on_panel is not None:
                    on_panel(k)
            report = tally.report(A.grid.comm, threshold, checks.bs)
        except MPI.Exception as exc:
            failure = grid_failure(exc, A.grid, f"FT_PDPOTRF: a process of the grid failed in panel {k} of "
                                   f"{len(panels)}; " + _how_to_go_on(ckpt is not None, saved, every))
            if failure is None:
                raise
            raise failure from exc
        if report.uncorrected:
            work.restore()  # in place: A's values back (a copy left A unchanged)
            bad_blocks = [(ev.row_block, ev.col_block) for ev in report.events if ev.action == "uncorrected"]
            raise ABFTError(f"ft_pdpotrf: {len(bad_blocks)} block(s) {bad_blocks[:8]} (panel row, panel "
                            "column) still disagree with their checksums after correction and recomputation "
                            "(a factored panel or a carried checksum is wrong too): "
                            "A is left unchanged; factor again (from the last checkpoint if one was taken)",
                            report=report)
        _finish(work, A, A64, uplo, n, ia, ja)
        return report
    finally:
        release_pool(pool)


def _how_to_go_on(checkpointed: bool, saved: int, every: int) -> str:
    """What a user whose factorization lost a process can do (``saved``: the first panel after the last
    checkpoint, taken every ``every`` panels)."""
    if not checkpointed:
        return "nothing was checkpointed (no ckpt): factor A again (pass a Checkpointer as ckpt to resume)"
    if saved == 0:
        return (f"no checkpoint of this factorization yet (one every {every} panels): relaunch the program, "
                "the factorization starts again from panel 0")
    return f"its progress is checkpointed up to panel {saved}: relaunch the program, it resumes there"


@dataclasses.dataclass
class _Launched:
    """Panel ``k`` launched (:func:`_launch`): its messages under way, the diagonal block's verification
    (``checked`` segments, ``events``), the panel solve's events on its process column (``found``), its
    encoded buffer ``ext`` and its ``views`` (:func:`._panel_sums.panel_views`: this process's rows of P,
    their sums), and ``L_kk`` on the panel's process column."""

    k: int
    flight: PanelFlight
    checked: int
    events: list[BlockEvent]
    found: list[BlockEvent]
    ext: np.ndarray
    views: tuple[np.ndarray, ...]
    low: np.ndarray | None


def _launch(work: CholeskyWork, checks: UpdateChecks, k: int, plan: InjectionPlan | None,
            tally: Tally) -> _Launched:
    """Verify and factor diagonal block ``k``, solve panel ``k`` (checked) on its process column, start its
    messages (:class:`PanelFlight`); ``plan``'s ``"A"`` flips land in the received rows once they have
    arrived (and been sent on, where they are)."""
    steps = work.steps
    g, (s, e) = steps.grid, steps.panels[k]
    # diagonal block k, before its owner factors it (the rows below: checked with the panel's solve)
    checked, events = checks.verify(k, "diagonal")
    # (hold read on the owner only; L_kk is read only on the panel's process column, as in pdpotrf)
    diagonal = steps.start_diagonal(k, hold=uncorrected(events), column_only=True)
    ext, views = panel_buffer(steps, k, checks)
    rows = views[1]
    on_rows = None if plan is None else functools.partial(_inject_received, plan, g.size, g.rank, rows)
    # down the process columns only what each column's products and their checks read, as in pdpotrf: on a
    # square grid the diagonal process's part, the flags beside; else, straight from the panel's process
    # column, each column's rows with their sums and the flag (direct_part)
    sent, per_row, extra = gathered_part(steps, k)
    flight = PanelFlight(steps, k, diagonal, ext, sent, per_row, extra, on_rows=on_rows,
                         columns="own" if steps.square else "direct", flag_at=0 if steps.square else None,
                         pack=None if steps.square else functools.partial(direct_part, steps, k, ext, rows))
    found: list[BlockEvent] = []
    low = None
    if g.mycol == int(steps.cols.owners[s]):
        diagonal.wait_arrival(flight.deadline)  # the passing on is left under way
        bad, low = diagonal.result()
        if bad == -1 and e < steps.rows.n:
            assert low is not None
            found = _solve(steps, checks, k, low, views, tally)
    flight.progress()
    return _Launched(k, flight, checked, events, found, ext, views, low)


def _inject_received(plan: InjectionPlan, size: int, rank: int, rows: np.ndarray, _buf: object) -> None:
    """Make ``plan``'s ``"A"`` flips in this process's received rows of the panel."""
    plan.resolve(size, 1)
    plan.apply("A", rank, 0, rows)


def _arrive(work: CholeskyWork, checks: UpdateChecks, panel: _Launched, plan: InjectionPlan | None,
            tally: Tally) -> tuple[int, list[BlockEvent], tuple]:
    """Wait for panel ``k``'s messages; return ``(bad, the block column's events, (colp, its row sums, the
    sums of squares of P's rows this process's checks read, pieces))`` (:func:`gather_panel`). A held
    diagonal block, or rows of the block column a process could not correct (their flag travels with the
    panel: no extra round trip error-free), are recomputed by every process, then solved and shared again,
    before any update reads them."""
    steps, k, ext, views = work.steps, panel.k, panel.ext, panel.views
    g, e = steps.grid, steps.panels[panel.k][1]
    bad, events, found, low = panel.flight.wait(), panel.events, panel.found, panel.low
    flight: PanelFlight | None = panel.flight
    if bad == HOLD:  # the diagonal block: every process joins the recomputation of the block column now
        events = recompute_column(checks, k, events, work.original)
        bad, low = steps.factor_diagonal(k)
        if bad == -1 and e < steps.rows.n:
            assert low is not None
            found = _solve(steps, checks, k, low, views, tally)
            share_panel(steps, k, ext)
            if plan is not None:
                _inject_received(plan, g.size, g.rank, views[1], ext)
        flight = None  # shared again: gathered whole
    if bad >= 0 or e == steps.rows.n:
        return bad, events, ()
    events, pending = events + found, uncorrected(found)
    colp, squares, flagged = gather_panel(steps, k, ext, flight, views)
    if flagged:  # rows the checks could not correct: recomputed from A, solved and shared again
        events = recompute_column(checks, k, events, work.original)
        if steps.owns_diagonal(k):  # the recomputation set the block's unfactored values again
            assert low is not None
            steps.diagonal_block(k)[...] = low
        if pending:
            assert low is not None
            events += _solve(steps, checks, k, low, views, tally)
        share_panel(steps, k, ext)
        colp, squares, _ = gather_panel(steps, k, ext)
    return bad, events, (colp, squares)


def _update(work: CholeskyWork, checks: UpdateChecks, panel: _Launched, got: tuple,
            at: Callable[[int], InjectionPlan | None], tally: Tally) -> _Launched | None:
    """Apply panel ``k``'s update (its checksums carried, the rows of P its columns multiply repaired
    first) with the look-ahead: block column ``k+1`` first, then panel ``k+1`` launched, then the rest while
    its messages travel; return panel ``k+1`` launched (``None`` after the last). ``at(k)``'s flips land in
    the rows of P the columns multiply (``"B"``) and the trailing piece (``"C"``, step 0 before the update,
    1 after block column ``k+1``'s: the rest is updated after panel ``k+1`` has read that block column)."""
    steps, k, rows = work.steps, panel.k, panel.views[1]
    g, (s, e) = steps.grid, steps.panels[k]
    n, last, plan = steps.rows.n, len(steps.panels) - 1, at(k)
    if e == n:
        return None
    colp, squares = got
    if plan is not None:
        flipped = colp.stacked()
        if plan.apply("B", g.rank, 0, flipped):
            colp.put(flipped)
        below0, c0 = steps.rows.range_on(g.myrow, e, n).start, steps.cols.range_on(g.mycol, e, n).start
        trail = steps.w[below0:, c0:]

        def to_global(i: int, j: int) -> tuple[int, int]:
            return int(checks.rglob[below0 + i % trail.shape[0]]), int(checks.cglob[c0 + j % trail.shape[1]])

        plan.apply("C", g.rank, 0, trail, to_global)
    # the rows of P this process's columns multiply, against their senders' row sums: a changed value is
    # restored before the carry and the product read it (a change in this process's own rows that its
    # columns do not multiply, the product's left operand only, is left to the carried checksums: their
    # sums were taken before the panel travelled)
    def repair(j: int) -> None:
        for row, t, ok in colp.repair(j):
            tally.operand(k, row, s + t, ok)

    fused = (FusedUpdate(steps, checks, k, rows, colp, panel.views[5], repair)
             if supports_fused(steps, checks, rows, colp, panel.views[5]) else None)
    if fused is not None:
        # each block column's rows checked, then its GEMM, then its carry, while the rows are in cache
        checks.take_squares(squares)
        fused.check_early()
        fused.run(k + 2)  # block column k+1 first: panel k+1 needs it
    else:
        checks.update(k, panel.views[5], colp, squares, repair)  # reads no W
        right = colp.operand()
        steps.apply_update(k, rows, right, range(k + 1, k + 2))
    if plan is not None:  # "after the update": the last moment before panel k+1 reads its block column
        plan.apply("C", g.rank, 1, trail, to_global)
    nxt = _launch(work, checks, k + 1, at(k + 1), tally)
    if fused is not None:
        fused.run(between=nxt.flight.progress)
    else:
        steps.apply_update(k, rows, right, range(k + 2, last + 1), between=nxt.flight.progress)
    return nxt


def _solve(steps: CholeskySteps, checks: UpdateChecks, k: int, low: np.ndarray, views: tuple[np.ndarray, ...],
           tally: Tally) -> list[BlockEvent]:
    """Solve panel ``k`` into its rows in the encoded buffer (``views``:
    :func:`._panel_sums.panel_views`), checked (:meth:`._tally.Tally.check_panel`), and, on the panel's
    process column, encode the buffer around them, its flag set if rows are left to recompute; return the
    events of the panel's values (this process's rows below the diagonal block)."""
    rows = views[1]
    found: list[BlockEvent] = []
    check = functools.partial(tally.check_panel, checks, k, views, found)
    steps.solve_panel(k, low, broadcast=False, check=check, out=rows)
    if steps.grid.mycol == int(steps.cols.owners[steps.panels[k][0]]):
        if not rows.shape[0]:  # not filled by the check
            checks.encode(k, rows.T, views)
        views[0][0] = float(uncorrected(found))
    return found


def _finish(work: CholeskyWork, A: DistributedMatrix, A64: DistributedMatrix, uplo: str, n: int, ia: int,
            ja: int) -> None:
    """Write the factor into A64's triangle and, for a float32 A, round it into A's."""
    work.write_back()
    if A is not A64:
        view = A.local_view(ia, ja, n, n)
        view[...] = np.where(trapezoid_mask(A, ia, ja, n, n, uplo), A64.local_view(ia, ja, n, n), view)
