"""Block recomputation for FT_PDPOTRF: a block column whose checks found errors they could not locate (two
wrong elements in one column of a segment, say) is computed again from the original matrix and the factored
panels, before its panel reads it.

At panel ``k`` the block column ``J = [s, e)`` of the work matrix is ``A_{:,J} - sum_{t<k} P_t P_{t,J}.T``,
where ``P_t`` is panel ``t`` below its diagonal block, now stored in ``W``'s factored columns ``< s``
(verified when each was a panel). A process whose segments of ``J`` are ``"uncorrected"`` asks for the
factored rows it needs (its rows ``>= s`` and the rows of ``J``); every process sends its piece of them (one
allgather of the requests, one of the pieces). This runs only on detection: the error-free cost is one small
reduction per panel telling every process whether any recomputation is needed. The process then repeats the
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

__all__ = ["needs_recompute", "recompute_column"]


def needs_recompute(comm: object, events: list[BlockEvent]) -> bool:
    """Whether any process has an ``"uncorrected"`` event (collective on ``comm``, every process agrees)."""
    mine = int(any(ev.action == "uncorrected" for ev in events))
    return bool(comm.allreduce(mine))  # type: ignore[attr-defined]


def recompute_column(checks: UpdateChecks, k: int, events: list[BlockEvent],
                     original: Callable[[], np.ndarray]) -> list[BlockEvent]:
    """Recompute this process's rows of block column ``k`` if its ``events`` hold an uncorrected block.

    Collective on the grid (call it on every process when :func:`needs_recompute` said so).

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
    g, (s, e), n = st.grid, st.panels[k], st.rows.n
    r = st.rows.range_on(g.myrow, s, n)
    rglob, cglob = checks.rglob, checks.cglob
    mine = any(ev.action == "uncorrected" for ev in events)
    want = rglob[r] if mine else np.empty(0, np.int64)
    need = np.union1d(np.concatenate(g.comm.allgather(want)), np.arange(s, e))
    # this process's piece of the factored rows L[need, :s]
    sel = np.flatnonzero(np.isin(rglob, need))
    csel = np.flatnonzero(cglob < s)
    piece = (rglob[sel], cglob[csel], np.ascontiguousarray(st.w[np.ix_(sel, csel)]))
    low = np.zeros((len(need), s))
    for rows_g, cols_g, vals in g.comm.allgather(piece):
        low[np.ix_(np.searchsorted(need, rows_g), cols_g)] = vals
    orig = original()
    if not mine:
        return events
    cl = st.cols.range_on(g.mycol, s, e)
    blk = np.array(orig[r, cl], order="F")
    mine_rows, j_rows = np.searchsorted(need, rglob[r]), np.searchsorted(need, np.arange(s, e))
    for ts, te in st.panels[:k]:  # the plain updates, in their order: P_t's rows >= s times P_t's rows of J
        gemm_update(-1.0, np.asfortranarray(low[mine_rows, ts:te]), np.asfortranarray(low[j_rows, ts:te]).T,
                    blk)
    st.w[r, cl] = blk
    _, still = checks.verify(k)
    if any(ev.action == "uncorrected" for ev in still):
        return events
    return [dataclasses.replace(ev, action="recomputed") if ev.action == "uncorrected" else ev
            for ev in events]
