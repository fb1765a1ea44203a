"""Block recomputation for FT_PDPOTRF: a block column whose checks found errors they could not locate (two
wrong elements in one column of a segment, say) is computed again from the original matrix and the factored
panels, before its diagonal block is factored or its panel used in an update.

At panel ``k`` the block column ``J = [s, e)`` of the work matrix is ``A_{:,J} - sum_{t<k} P_t P_{t,J}.T``,
where ``P_t`` is panel ``t`` below its diagonal block, now stored in ``W``'s factored columns ``< s``
(verified when each was a panel). A process whose segments of ``J`` are ``"uncorrected"`` asks for the
factored rows it needs (its rows ``>= s`` and the rows of ``J``); every process sends its piece of them (one
allgather of the requests, one of the pieces). This runs only on detection, and the error-free run sends no
extra message for it: the diagonal block's owner, for that block, says so in its broadcast of ``L_kk``
(:meth:`CholeskySteps.factor_diagonal`'s ``hold``), before the panel is solved; a process whose rows below
the diagonal block its panel solve's check found wrong and could not correct, in the flag of its shared
panel (``ft_pdpotrf`` then recomputes, solves the panel again and shares it again, before any update reads
it). The process then repeats the
plain updates of its rows of ``J`` from A's values: the same ``gemm`` calls, operand shapes and order as
:meth:`CholeskySteps.apply_update`, so the recomputed block equals the error-free one bit for bit (the same
BLAS calls on the same values). The block column is verified again against its carried checksums (which
errors in ``W`` do not touch); what still disagrees stays ``"uncorrected"`` and ``ft_pdpotrf`` raises
:class:`~ftkit.errors.ABFTError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .._blas import gemm_update
from ..abft.report import BlockEvent
from ._abft import UpdateChecks
from ._steps import CholeskySteps

__all__ = ["recompute_column", "rebuild_trailing", "factored_rows", "replay_updates"]


def factored_rows(steps: CholeskySteps, k: int, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(need, L[need, :s])``: the rows ``need`` (the sorted union of every process's ``want`` and
    panel ``k``'s rows ``[s, e)``) of the factored columns ``< s``, on every process.

    Collective on the grid: one allgather of the requests and one of the pieces.
    """
    g, (s, e) = steps.grid, steps.panels[k]
    rglob, cglob = steps.rows.indices_on(g.myrow), steps.cols.indices_on(g.mycol)
    need = np.union1d(np.concatenate(g.comm.allgather(np.asarray(want, np.int64))), np.arange(s, e))
    sel, csel = np.flatnonzero(np.isin(rglob, need)), np.flatnonzero(cglob < s)
    piece = (rglob[sel], cglob[csel], np.ascontiguousarray(steps.w[np.ix_(sel, csel)]))
    low = np.zeros((len(need), s))
    for rows_g, cols_g, vals in g.comm.allgather(piece):
        low[np.ix_(np.searchsorted(need, rows_g), cols_g)] = vals
    return need, low


def replay_updates(steps: CholeskySteps, k: int, big_j: int, need: np.ndarray, low: np.ndarray,
                   base: np.ndarray) -> None:
    """Set this process's rows of block column ``big_j`` (rows ``>= `` its first) to ``base``'s minus the
    updates of panels ``0 .. k-1``, with the plain updates' ``gemm`` calls (shapes, order), from ``low`` =
    ``L[need, :s_k]`` (:func:`factored_rows`)."""
    g, (cs, ce) = steps.grid, steps.panels[big_j]
    r = steps.rows.range_on(g.myrow, cs, steps.rows.n)
    if r.stop == r.start:
        return
    cl = steps.cols.range_on(g.mycol, cs, ce)
    blk = np.array(base[r, cl], order="F")
    mine_rows = np.searchsorted(need, steps.rows.indices_on(g.myrow)[r])
    j_rows = np.searchsorted(need, np.arange(cs, ce))
    for ts, te in steps.panels[:k]:  # P_t's rows >= cs times P_t's rows of the block column, in order
        gemm_update(-1.0, np.asfortranarray(low[mine_rows, ts:te]), np.asfortranarray(low[j_rows, ts:te]).T,
                    blk)
    steps.w[r, cl] = blk


def recompute_column(checks: UpdateChecks, k: int, events: list[BlockEvent],
                     original: Callable[[], np.ndarray]) -> list[BlockEvent]:
    """Recompute this process's rows of block column ``k`` if its ``events`` hold an uncorrected block.

    Collective on the grid (call it on every process when a process of the block column said so).

    Parameters
    ----------
    checks
        The factorization's carried checksums (and through them its panel engine ``checks.steps``).
    k
        The panel whose block column is recomputed.
    events
        This process's events from ``checks.verify(k)``.
    original
        Returns this process's piece of the original work matrix (collective: it may redistribute A).

    Returns
    -------
    list of BlockEvent
        ``events`` with every ``"uncorrected"`` one ``"recomputed"`` if the block column now agrees with its
        checksums, unchanged otherwise.
    """
    st = checks.steps
    mine = any(ev.action == "uncorrected" for ev in events)
    r = st.rows.range_on(st.grid.myrow, st.panels[k][0], st.rows.n)
    need, low = factored_rows(st, k, checks.rglob[r] if mine else np.empty(0, np.int64))
    orig = original()
    if not mine:
        return events
    replay_updates(st, k, k, need, low, orig)
    _, still = checks.verify(k)
    if any(ev.action == "uncorrected" for ev in still):
        return events
    return [dataclasses.replace(ev, action="recomputed") if ev.action == "uncorrected" else ev
            for ev in events]


def rebuild_trailing(steps: CholeskySteps, k: int) -> None:
    """Compute the trailing block columns ``>= k`` of ``steps.w`` (holding A's values there) from the factored
    columns, as the updates of panels ``0 .. k-1`` left them (bit for bit: the same ``gemm`` calls).

    Collective on the grid; what a resumed factorization runs instead of reading its trailing matrix from a
    checkpoint.
    """
    g, s = steps.grid, steps.panels[k][0]
    rglob, cglob = steps.rows.indices_on(g.myrow), steps.cols.indices_on(g.mycol)
    need, low = factored_rows(steps, k, np.union1d(rglob[rglob >= s], cglob[cglob >= s]))
    for big_j, (cs, _) in enumerate(steps.panels):
        if big_j >= k and int(steps.cols.owners[cs]) == g.mycol:
            replay_updates(steps, k, big_j, need, low, steps.w)
