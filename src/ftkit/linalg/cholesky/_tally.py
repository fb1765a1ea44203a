"""The tally of FT_PDPOTRF's checks: what the checks of one factorization found (the blocks they verified
and their events, gathered into one :class:`~ftkit.linalg.abft.report.ABFTReport`), and the panel solve's
check (:meth:`Tally.check_panel`): the solution checked against the carried checksums, a flagged segment
verified in the panel's values (located and corrected, or left for the block column's recomputation), the
panel solved again. Kept apart from :mod:`.ft_potrf`'s panel loop, which calls it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from mpi4py import MPI

from ..._wait import deadline_after, wait_requests
from .._blas import trsm_right_lower_t
from ..abft._blocks import Threshold
from ..abft.report import ABFTReport, BlockEvent
from ._abft import UpdateChecks
from ._steps import WAIT_TIMEOUT

__all__ = ["Tally", "uncorrected"]


class Tally:
    """What the checks of one factorization found: panel-solve rows and update reports."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.events: list[BlockEvent] = []
        self.checked = 0

    def add(self, checked: int, events: list[BlockEvent]) -> None:
        """Count the blocks an update check verified and keep its events."""
        self.checked += checked - sum(ev.action == "unchecked" for ev in events)
        self.events.extend(events)

    def operand(self, k: int, row: int, col: int, ok: bool) -> None:
        """Record a panel element restored (``ok``) or not after it changed in transit."""
        self.events.append(BlockEvent(k, -1, row, col, 1, 1, self.rank, "located" if ok else "uncorrected",
                                      (row, col)))

    def check_panel(self, checks: UpdateChecks, k: int, views: tuple[np.ndarray, ...],
                    found: list[BlockEvent], before: np.ndarray, p: np.ndarray, low: np.ndarray) -> None:
        """Check panel ``k``'s values and solve ``p`` (``P``, its rows in the encoded buffer ``views``) by the
        carried checksums (:meth:`UpdateChecks.check_solve`, which fills the buffer with the rows' sums). A
        segment flagged, or with a bound that is not finite (a huge wrong value can overflow in the
        solution), is verified in ``before`` (the panel, not yet overwritten): a wrong value there is located
        and corrected (or found uncorrectable: its rows are then recomputed, see ``ft_potrf._arrive``),
        and its events go to ``found``; the panel is then solved again, as it is when the values agree and
        the solve does not."""
        checked, bad, unchecked = checks.check_solve(k, p.T, low, views)
        self.checked += checked
        if not (bad.any() or unchecked.any()):
            return  # error-free
        ii1 = int(checks.seg0[k + 1])
        in_values: set[int] = set()  # segments whose values are not finite: reported by their verification
        if (bad | unchecked).any():
            fixed = []
            for i in np.flatnonzero(bad | unchecked):
                evs = checks.verify_segments(k, ii1 + int(i), ii1 + int(i) + 1)[1]
                in_values.update(int(i) for ev in evs if ev.action == "unchecked")
                fixed += evs
            found.extend(fixed)
            if uncorrected(fixed):
                return  # the block column is recomputed before anything reads these rows
            if any(ev.action == "located" for ev in fixed):  # the values were wrong: solve the corrected ones
                p[...] = before
                trsm_right_lower_t(low, p)
                _, bad, unchecked = checks.check_solve(k, p.T, low, views)
        found.extend(checks.unchecked_event(k, ii1 + int(i)) for i in np.flatnonzero(unchecked)
                     if int(i) not in in_values)
        for attempt in range(2):  # the values agree: the solve was wrong
            if not bad.any():
                if attempt:
                    self.events[-1] = dataclasses.replace(self.events[-1], action="recomputed")
                return
            if attempt:
                self.events[-1] = dataclasses.replace(self.events[-1], action="uncorrected")
                return
            first = int(np.flatnonzero(bad)[0])
            self.events.append(BlockEvent(-1, -1, int(checks.rlo[ii1 + first] - checks.rlo[ii1]), 0,
                                          p.shape[0], p.shape[1], self.rank, "detected"))
            p[...] = before
            trsm_right_lower_t(low, p)
            bad = checks.check_solve(k, p.T, low, views)[1]

    def report(self, comm: Any, threshold: Threshold, bs: int) -> ABFTReport:
        """The report of the whole factorization (collective: the counts summed, events gathered if any)."""
        # the counts first, waited by sleeping: the ranks reach this at different times, and a blocking
        # collective busy-polls the core the last ones need; events (rare) only if some rank has one
        mine, total = np.array([self.checked, len(self.events)], np.int64), np.zeros(2, np.int64)
        wait_requests([comm.Iallreduce(mine, total, op=MPI.SUM)], deadline_after(WAIT_TIMEOUT),
                      "the report's counts")
        if not total[1]:
            return ABFTReport(blocks_checked=int(total[0]), threshold=threshold.name, bs=bs)
        every = comm.allgather((self.checked, self.events))
        events = sorted((ev for _, evs in every for ev in evs), key=lambda ev: (ev.row_block, ev.col_block))
        acts = [ev.action for ev in events]
        return ABFTReport(
            blocks_checked=int(sum(c for c, _ in every)),
            detected=sum(a not in ("rounding", "unchecked") for a in acts),
            corrected=sum(a in ("located", "recomputed") for a in acts), events=tuple(events),
            threshold=threshold.name, bs=bs, unchecked=sum(a == "unchecked" for a in acts))


def uncorrected(events: list[BlockEvent]) -> bool:
    """Whether ``events`` hold a block the checks could not correct."""
    return any(ev.action == "uncorrected" for ev in events)
