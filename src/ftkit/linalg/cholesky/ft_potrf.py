"""FT_PDPOTRF: a Cholesky factorization that survives silent errors (ABFT) and, given a checkpointer, a
relaunch after a process failure.

The factorization is :func:`~ftkit.linalg.pdpotrf`'s right-looking algorithm
(:mod:`ftkit.linalg.cholesky._steps`) with its work protected:

- the trailing update of every panel (``W_{e:,e:} -= P P.T``, nearly all the flops) is one checked product of
  ``ft_pdgemm``'s machinery (checksums in the SUMMA panels, location and O(1) correction of a single wrong
  element, block recomputation; the rigorous bound never flags a correct update);
- every panel solve ``P L_kk^T = W_{e:,k}`` is checked row by row against row sums, ``P (L_kk^T e) =
  W_{e:,k} e``, with a rigorous bound, and solved again from the saved panel when a row disagrees.

Given a checkpointer (duck-typed: anything with ``protect``, ``checkpoint``, ``recover`` and ``restarted``,
such as :class:`ftkit.Checkpointer`; linalg does not import the checkpoint package), the factorization's
state, the work matrix and the index of the next panel, is protected under ``ftkit.potrf.W`` /
``ftkit.potrf.state`` and checkpointed every ``ckpt_every`` panels. When the run is a restart
(``ckpt.restarted``), ``ft_pdpotrf`` calls ``ckpt.recover()`` itself (which also fills every other array the
application protected), checks that the stored state belongs to a factorization of the same order, offsets,
``uplo`` and layout, and resumes at the stored panel: a rank killed in panel ``k`` costs the panels since the
last checkpoint, not the factorization, and the factor is bit for bit the failure-free one (same grid, same
operations). A restart without any checkpoint of it starts from the beginning. Call it before any other
``recover()`` of the same checkpointer, on a grid of all the checkpointer's ranks (``ckpt.checkpoint`` is
collective on its communicator). The work matrix stays protected after the call (a later ``protect`` of the
same names releases it). Recovery is by relaunch; online recovery with spare ranks is not wired in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import PBLASArgumentError, RecoveryError
from ...inject import InjectionPlan
from .. import checksums
from .._blas import trsm_left
from ..abft._blocks import Threshold
from ..abft.level3 import _as64
from ..abft.product import _ft_gemm
from ..abft.report import ABFTReport, BlockEvent, check_ft_args
from ..matrix import DistributedMatrix
from ..pblas.add import trapezoid_mask
from .potrf import CholeskyWork, FactorizationError, check_potrf_args

__all__ = ["ft_pdpotrf", "CKPT_W", "CKPT_STATE"]

#: Names under which the factorization's state is protected in the checkpointer.
CKPT_W, CKPT_STATE = "ftkit.potrf.W", "ftkit.potrf.state"


class _Tally:
    """What the checks of one factorization found: panel-solve rows and update reports."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.events: list[BlockEvent] = []
        self.reports: list[ABFTReport] = []
        self.panel_rows = 0

    def check_panel(self, before: np.ndarray, panel: np.ndarray, low: np.ndarray) -> None:
        """Check ``panel low^T == before`` by row sums; solve again from ``before`` if a row disagrees."""
        self.panel_rows += panel.shape[0]
        for attempt in range(2):
            e = np.ones(low.shape[0])
            with np.errstate(invalid="ignore", over="ignore"):
                res = np.abs(panel @ (low.T @ e) - before @ e)
                mag = np.abs(panel) @ (np.abs(low.T) @ e) + np.abs(before) @ e
            n_ops = 2 * low.shape[0] + 8
            thr = 2.0 * checksums.gamma(n_ops) * mag + 4.0 * n_ops * low.shape[0] * checksums.ETA
            bad = np.flatnonzero(~(res <= thr))
            if bad.size == 0:
                if attempt:
                    self.events[-1] = dataclasses.replace(self.events[-1], action="recomputed")
                return
            if attempt:
                self.events[-1] = dataclasses.replace(self.events[-1], action="uncorrected")
                return
            self.events.append(BlockEvent(-1, -1, int(bad[0]), 0, panel.shape[0], panel.shape[1], self.rank,
                                          "detected"))
            pt = np.asfortranarray(before.T)
            trsm_left(True, low, pt)
            panel[...] = pt.T

    def report(self, comm: Any, threshold: Threshold, bs: int) -> ABFTReport:
        """The report of the whole factorization (collective: panel events are gathered)."""
        events = [ev for evs in comm.allgather(self.events) for ev in evs]
        for rep in self.reports:
            events.extend(rep.events)
        acts = [ev.action for ev in events]
        return ABFTReport(
            blocks_checked=sum(r.blocks_checked for r in self.reports) + int(comm.allreduce(self.panel_rows)),
            detected=sum(a not in ("rounding", "unchecked") for a in acts),
            corrected=sum(a in ("located", "recomputed") for a in acts),
            rounding_alarms=sum(a == "rounding" for a in acts), events=tuple(events),
            max_ratio=max((r.max_ratio for r in self.reports), default=0.0),
            correct_seconds=sum(r.correct_seconds for r in self.reports), threshold=threshold.name,
            bs=max((r.bs for r in self.reports), default=bs or 0),
            unchecked=sum(r.unchecked for r in self.reports))


def _resume(ckpt: Any, work: CholeskyWork, state: np.ndarray) -> int:
    """Protect the state in ``ckpt``; on a restart recover it and return the panel to resume at."""
    flat = work.W.local.reshape(-1, order="F")  # a C-contiguous 1-D view of the F-order local array
    ckpt.protect(CKPT_W, flat)
    ckpt.protect(CKPT_STATE, state)
    if not ckpt.restarted:
        return 0
    want = state.copy()
    try:
        ckpt.recover()
    except RecoveryError:
        state[...] = want  # no checkpoint to resume from: start again
        return 0
    if not np.array_equal(state[1:], want[1:]):
        raise RecoveryError(f"ft_pdpotrf: the checkpointed factorization ({state[1:].tolist()}: order, "
                            f"offsets, uplo, panels) is not this one ({want[1:].tolist()}); use a fresh "
                            "checkpoint directory (or exec_id) for a different matrix")
    return int(state[0])


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
        Checksum block size and threshold of the update products, as in ``ft_pdgemm``.
    ckpt_every
        Checkpoint after every this many panels (default: about 8 checkpoints per factorization).
    ckpt_level
        Checkpoint level passed to ``ckpt.checkpoint``.
    inject, inject_panel
        Bit flips (``ft_pdgemm``'s injection points) made in the update product of panel ``inject_panel``.
    on_panel
        Called with the panel index after each panel (progress display; tests kill a rank there).

    Returns
    -------
    ABFTReport
        Totals over all checks; panel-solve events have block coordinates ``(-1, -1)`` and their first
        flagged local row as ``row0``; update events are those of the panel's product.

    Raises
    ------
    PBLASArgumentError
        As ``pdpotrf``; ``ckpt`` is position 7, ``bs`` / ``tol`` / ``inject`` 8 / 9 / 11.
    FactorizationError
        If a leading minor is not positive definite.
    ABFTError
        If an update could not be corrected (A's triangle is then left unchanged).
    RecoveryError
        If the restart's checkpoint holds another factorization.
    """
    r = "FT_PDPOTRF"
    uplo, n, ia, ja = check_potrf_args(r, uplo, n, A, ia, ja)
    check_ft_args(r, 8, bs, tol, "correct", inject)
    needs = ("protect", "checkpoint", "recover", "restarted")
    if ckpt is not None and not all(hasattr(ckpt, a) for a in needs):
        raise PBLASArgumentError(r, 7, f"ckpt must be a Checkpointer (protect/checkpoint/recover/restarted), "
                                 f"got {type(ckpt).__name__}")
    threshold = Threshold.parse(tol)
    if n == 0:
        return ABFTReport(threshold=threshold.name)
    A64 = _as64(A)
    work = CholeskyWork(uplo, n, A64, ia, ja)
    panels = work.steps.panels
    d = A.desc
    state = np.array([0, n, ia, ja, uplo == "U", len(panels), d.mb, d.nb], dtype=np.int64)
    start = _resume(ckpt, work, state) if ckpt is not None else 0
    every = max(1, int(ckpt_every) if ckpt_every else len(panels) // 8)
    tally = _Tally(A.grid.rank)
    W, wi, wj = work.W, work.wi, work.wj
    for k in range(start, len(panels)):
        s, e = panels[k]
        bad, low = work.steps.factor_diagonal(k)
        if bad >= 0:
            _finish(work, A, A64, uplo, n, ia, ja)
            raise FactorizationError(r, bad + 1, n)
        work.steps.solve_panel(k, low, broadcast=False, check=tally.check_panel)  # type: ignore[arg-type]
        if e < n:
            rep = _ft_gemm("N", "T", n - e, n - e, e - s, -1.0, W, wi + e, wj + s, W, wi + e, wj + s, 1.0, W,
                           wi + e, wj + e, bs, tol, "correct", None, None,
                           inject if k == inject_panel else None, False)
            tally.reports.append(dataclasses.replace(rep, events=tuple(
                dataclasses.replace(ev, row0=ev.row0 + e, col0=ev.col0 + e) for ev in rep.events)))
        if ckpt is not None and (k + 1) % every == 0 and k + 1 < len(panels):
            state[0] = k + 1
            ckpt.checkpoint(level=ckpt_level)
        if on_panel is not None:
            on_panel(k)
    _finish(work, A, A64, uplo, n, ia, ja)
    return tally.report(A.grid.comm, threshold, int(bs or 0))


def _finish(work: CholeskyWork, A: DistributedMatrix, A64: DistributedMatrix, uplo: str, n: int, ia: int,
            ja: int) -> None:
    """Write the factor into A64's triangle and, for a float32 A, round it into A's."""
    work.write_back()
    if A is not A64:
        view = A.local_view(ia, ja, n, n)
        view[...] = np.where(trapezoid_mask(A, ia, ja, n, n, uplo), A64.local_view(ia, ja, n, n), view)
