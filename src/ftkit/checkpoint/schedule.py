"""When ``snapshot()`` checkpoints: FTI's per-level intervals ``ckpt_l1..ckpt_l4``.

With ``interval_unit = minutes`` (FTI's meaning) a level is due when that many minutes passed since its last
checkpoint; rank 0's clock decides and the decision is broadcast, so every rank takes the same checkpoint.
With ``interval_unit = iterations`` a level is due every ``ckpt_lN``-th snapshot call (no communication). When
several levels are due, the highest one is taken (FTI's rule). 0 turns a level off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..config import Config
from . import _mpi

__all__ = ["Schedule"]


class Schedule:
    """Decides, at each snapshot call, which level (if any) to checkpoint at.

    Parameters
    ----------
    config
        Intervals (``ckpt_l1..ckpt_l4``) and their unit (``interval_unit``).
    comm
        Internal communicator (minutes mode broadcasts rank 0's decision over it).
    clock
        Monotonic clock in seconds (tests may pass their own).
    """

    def __init__(self, config: Config, comm: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.comm = comm
        self.clock = clock
        self.count = 0                      # snapshot calls so far (restored on recovery)
        start = clock()
        self.last = {lv: start for lv in (1, 2, 3, 4)}

    def due(self) -> int:
        """Count one snapshot call and return the level due now (0 = none). Collective in minutes mode."""
        self.count += 1
        levels = [lv for lv in (4, 3, 2, 1) if self.config.interval(lv) > 0]
        if not levels:
            return 0
        if self.config.interval_unit == "iterations":
            for lv in levels:
                if self.count % self.config.interval(lv) == 0:
                    return lv
            return 0
        decision = 0
        if self.comm.Get_rank() == 0:
            now = self.clock()
            for lv in levels:
                if now - self.last[lv] >= 60.0 * self.config.interval(lv):
                    decision = lv
                    break
        return int(_mpi.bcast(self.comm, decision, 0, "snapshot schedule"))

    def checkpointed(self, level: int) -> None:
        """Note that a checkpoint at ``level`` was just taken (restarts that level's clock)."""
        self.last[level] = self.clock()
