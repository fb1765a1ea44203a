"""When ``snapshot()`` checkpoints: FTI's time-based intervals, agreed cheaply, and Daly's automatic interval.

FTI's ``ckpt_l1`` .. ``ckpt_l4`` are intervals in minutes (each level's key is its record in the level
table, :mod:`ftkit.storage.levels`). A checkpoint is a collective decision, so every
rank must decide the same thing at the same ``snapshot()`` call without talking at every iteration. As FTI
does, :class:`SnapshotSchedule` measures on every rank the compute time per iteration (time between snapshot
calls, minus the time spent checkpointing); at *sync points* the ranks agree on the slowest mean iteration
time and the largest checkpoint cost (one small allreduce). Between sync points every rank advances the same
*job clock* by the agreed iteration time at each call, so all reach the same decision with no communication.
Sync points come after 1, 2, 4, ... iterations, the gap doubling up to ``max_sync_intv`` iterations.

Level L is due when the job clock crosses a multiple of its interval (FTI's rule: ``minutes % ckpt_lL == 0``;
with ``interval_unit = iterations`` the clock counts calls); when several are due the highest level is taken.
An iteration longer than the interval crosses a multiple, so it checkpoints: FTI issue #51 converted the
interval to ``rint(60 / iteration time)`` iterations, which is 0 for long iterations, and never checkpointed.

With ``auto=True`` the interval is Daly's optimum (:func:`ftkit.models.daly_interval`) for the agreed
checkpoint cost (the blocking time of the last checkpoint) and the configured MTBF. The first automatic
checkpoint is taken at the first sync point to measure that cost (a calibration checkpoint).

The contract: every rank calls :meth:`SnapshotSchedule.tick` the same number of times (the application's
iteration loop), as FTI requires of ``FTI_Snapshot``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..storage import levels as table

__all__ = ["SnapshotSchedule", "mpi_max_agree"]

#: Agreement function: elementwise maximum of a small float vector over all ranks (collective).
Agree = Callable[[np.ndarray], np.ndarray]


def mpi_max_agree(comm, timeout: float = 300.0) -> Agree:  # type: ignore[no-untyped-def]
    """Return an :data:`Agree`: elementwise maximum over the ranks of ``comm`` (collective, ``timeout`` s).

    The returned function raises :class:`~ftkit.errors.TimeoutFailure` or
    :class:`~ftkit.errors.ProcessFailure` when a rank does not take part in time or failed.
    """
    from mpi4py import MPI

    from .post import wait_request

    def agree(values: np.ndarray) -> np.ndarray:
        send = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty_like(send)
        wait_request(comm.Iallreduce(send, out, op=MPI.MAX), timeout, "snapshot interval agreement")
        return out

    return agree


def _daly_interval(cost: float, mtbf: float) -> float:
    # ftkit.models (its package imports every model) is imported at the first automatic interval, not with
    # every Checkpointer: ~10 % of importing ftkit.checkpoint.
    from ..models import daly_interval

    return float(daly_interval(cost, mtbf))


class SnapshotSchedule:
    """Decide at each ``snapshot()`` whether to checkpoint, and at which level.

    Parameters
    ----------
    intervals
        Interval per level (level number → interval; a sequence gives the table's levels in order, e.g.
        ``(ckpt_l1, ckpt_l2, ckpt_l3, ckpt_l4)``), in minutes (``unit="minutes"``) or in iterations
        (``unit="iterations"``); 0 disables a level.
    unit
        ``"minutes"`` (FTI's meaning) or ``"iterations"``.
    max_sync_intv
        Largest number of iterations between two agreements on the iteration time (FTI's ``max_sync_intv``).
    agree
        Collective elementwise maximum over the application ranks (:func:`mpi_max_agree`); None for a
        single process.
    mtbf
        Mean time between failures of the job (s), needed by ``auto=True``.
    auto_level
        Level of the automatic (Daly) checkpoints.
    clock
        Time source in seconds (tests pass a fake clock).
    probe
        A local flag agreed (maximum) at every sync point for free, exposed as :attr:`alarm`; the
        checkpointer uses it to raise a background failure at the same snapshot call on every rank.
    dcp_l4
        FTI's ``dcp_l4``: interval of differential checkpoints at ``dcp_level``, in the unit of ``intervals``
        (0 = off). That level is due at the multiples of its interval and of ``dcp_l4``; with ``enable_dcp``
        every L4 checkpoint is differential.
    dcp_level
        The level ``dcp_l4`` checkpoints (default: the table's level with a differential key, L4).

    Raises
    ------
    ConfigError
        On a negative interval, an unknown unit or level, or ``max_sync_intv < 1``.
    """

    def __init__(self, intervals: Sequence[float] | Mapping[int, float], *, unit: str = "minutes",
                 max_sync_intv: int = 512, agree: Agree | None = None, mtbf: float | None = None,
                 auto_level: int | None = None, clock: Callable[[], float] = time.monotonic,
                 probe: Callable[[], float] | None = None, dcp_l4: float = 0.0,
                 dcp_level: int | None = None) -> None:
        by_level = _by_level(intervals)
        if not (math.isfinite(float(dcp_l4)) and float(dcp_l4) >= 0):
            raise ConfigError(f"dcp_l4 = {dcp_l4}: an interval must be >= 0 (0 disables it)")
        if unit not in ("minutes", "iterations"):
            raise ConfigError(f"interval_unit = {unit!r}: allowed values are 'minutes' and 'iterations'")
        if int(max_sync_intv) < 1:
            raise ConfigError(f"max_sync_intv = {max_sync_intv}: must be >= 1 iteration")
        auto_level = max(table.numbers()) if auto_level is None else auto_level
        if auto_level not in table.numbers():
            raise ConfigError(f"automatic checkpoint level {auto_level}: must be one of the levels "
                              f"{list(table.numbers())}")
        #: Interval of each level with one, in the unit of ``unit`` (0: level off).
        self.intervals = by_level
        self.unit = unit
        self.max_sync_intv = int(max_sync_intv)
        self.agree = agree
        self.mtbf = mtbf
        self.auto_level = auto_level
        self.clock = clock
        self.probe = probe
        #: True after a sync point at which some rank's ``probe()`` was positive (reset at every tick).
        self.alarm = False
        self.iteration = 0
        self.job_clock = 0.0                    # agreed compute seconds (iterations in iterations mode)
        self.auto_iters = 0                     # 0: unknown yet
        self.iter_time = math.nan               # agreed compute seconds per iteration
        self.ckpt_cost = math.nan               # agreed blocking seconds of one checkpoint
        self.syncs = 0
        self._gap = 1
        self._next_sync = 1
        self._last = clock()
        self._window_time = 0.0                 # compute seconds measured since the last sync
        self._window_iters = 0
        self._ckpt_time = 0.0                   # checkpoint seconds inside the current iteration
        self._local_cost = math.nan
        self._since_auto = 0
        self._calibrated = False
        #: Length of each level's interval in job-clock units, by level number (0: level off).
        self.periods = {lv: (v if unit == "iterations" else 60.0 * v) for lv, v in by_level.items()}
        #: Length of the differential interval in job-clock units (0: off), and its level.
        self.dcp_period = float(dcp_l4) if unit == "iterations" else 60.0 * float(dcp_l4)
        self.dcp_level = _differential_level() if dcp_level is None else dcp_level

    @classmethod
    def from_config(cls, config: Any, comm: Any = None,
                    probe: Callable[[], float] | None = None) -> SnapshotSchedule:
        """Build the schedule of a :class:`ftkit.Config` (intervals, unit, ``max_sync_intv``, ``mtbf``).

        ``max_sync_intv = 0`` means FTI's default, 512 iterations. Automatic checkpoints use the highest level
        with an interval configured (the lowest level if none is). As in FTI, every interval is divided by
        ``fast_forward``, and ``dcp_l4`` counts only with ``enable_dcp = 1``.
        """
        ff = config.fast_forward
        intervals = {s.number: table.interval(config, s.number) / ff for s in table.specs()}
        dcp_level = _differential_level()
        dcp_key = table.spec(dcp_level).differential_key if dcp_level else None
        dcp_l4 = getattr(config, dcp_key) / ff if dcp_key and config.enable_dcp else 0.0
        auto_level = max([lv for lv, v in intervals.items() if v > 0], default=min(intervals))
        multi = comm is not None and comm.Get_size() > 1
        agree = mpi_max_agree(comm, config.failure_timeout) if multi else None
        return cls(intervals, unit=config.interval_unit, max_sync_intv=config.max_sync_intv or 512,
                   agree=agree, mtbf=config.mtbf or None, auto_level=auto_level, probe=probe, dcp_l4=dcp_l4,
                   dcp_level=dcp_level)

    @property
    def count(self) -> int:
        """Snapshot calls counted so far (saved with each checkpoint, restored on recovery)."""
        return self.iteration

    @count.setter
    def count(self, value: int) -> None:
        # Every rank restores the same count, so the sync points stay aligned across ranks.
        self.iteration = int(value)
        self.job_clock = float(self.iteration) if self.unit == "iterations" else 0.0
        self._next_sync = self.iteration + 1
        self._gap = 1
        self._since_auto = 0
        self._last = self.clock()
        self._window_time, self._window_iters, self._ckpt_time = 0.0, 0, 0.0

    def due(self, auto: bool = False) -> int:
        """Alias of :meth:`tick` (the checkpointer's name)."""
        return self.tick(auto)

    def checkpointed(self, level: int, seconds: float = 0.0) -> None:
        """Alias of :meth:`record_checkpoint` (the checkpointer's name)."""
        self.record_checkpoint(level, seconds)

    def record_checkpoint(self, level: int, seconds: float) -> None:
        """Account for a checkpoint at ``level`` that blocked the application for ``seconds``.

        Called by the checkpointer for every checkpoint (from snapshot or not): it restarts the automatic
        interval and keeps checkpoint time out of the measured iteration time.
        """
        self._since_auto = 0
        self._ckpt_time += max(0.0, float(seconds))
        self._local_cost = float(seconds)

    def _sync(self) -> None:
        mean = self._window_time / max(1, self._window_iters)
        cost = self._local_cost if math.isfinite(self._local_cost) else -1.0
        vals = np.array([mean, cost, float(self.probe()) if self.probe is not None else 0.0])
        if self.agree is not None:
            vals = self.agree(vals)
        self.alarm = bool(vals[2] > 0)
        self.iter_time = float(vals[0])
        self.ckpt_cost = float(vals[1]) if vals[1] >= 0 else math.nan
        self.syncs += 1
        self._window_time, self._window_iters = 0.0, 0
        if self.mtbf and math.isfinite(self.ckpt_cost) and self.ckpt_cost > 0:
            self.auto_iters = self._iters_for(_daly_interval(self.ckpt_cost, self.mtbf))
        self._gap = min(2 * self._gap, self.max_sync_intv)
        self._next_sync = self.iteration + self._gap

    def _iters_for(self, seconds: float) -> int:
        if seconds <= 0:
            return 0
        if not (self.iter_time > 0):
            return 1
        # At least one: an iteration longer than the interval checkpoints every time (FTI issue #51).
        return max(1, int(seconds / self.iter_time))

    def interval_seconds(self, auto: bool = False) -> float:
        """Return the current automatic (Daly) interval in seconds, or NaN when not yet known."""
        if auto and self.mtbf and math.isfinite(self.ckpt_cost) and self.ckpt_cost > 0:
            return _daly_interval(self.ckpt_cost, self.mtbf)
        return math.nan

    def tick(self, auto: bool = False) -> int:
        """Count one iteration and return the level to checkpoint now (0: none). Collective at sync points.

        Raises
        ------
        ConfigError
            If ``auto`` is requested without a configured MTBF.
        """
        if auto and not self.mtbf:
            raise ConfigError("snapshot(auto=True) needs the job's MTBF: set mtbf (seconds) in the config")
        now = self.clock()
        self._window_time += max(0.0, now - self._last - self._ckpt_time)
        self._window_iters += 1
        self._last, self._ckpt_time = now, 0.0
        self.iteration += 1
        self._since_auto += 1
        self.alarm = False
        synced = False
        if (self.unit == "minutes" or auto) and self.iteration >= self._next_sync:
            self._sync()
            synced = True
        before = self.job_clock
        self.job_clock += 1.0 if self.unit == "iterations" else self.iter_time
        if auto:
            if self.auto_iters == 0:
                # No cost measured yet on every rank: calibrate once, at the first sync point (after a
                # restart too). Sync points fall on the same call on every rank.
                if synced and not self._calibrated:
                    self._calibrated = True
                    return self.auto_level
                return 0
            return self.auto_level if self._since_auto >= self.auto_iters else 0
        level = 0
        for lvl in sorted(self.periods):  # the highest level due wins
            if self._crossed(self.periods[lvl], before):
                level = lvl
        if self._crossed(self.dcp_period, before):
            level = max(level, self.dcp_level)
        return level

    def _crossed(self, period: float, before: float) -> bool:
        # Crossing a multiple of the period, by exact arithmetic on the same numbers on every rank.
        return period > 0 and math.floor(self.job_clock / period + 1e-9) > math.floor(before / period + 1e-9)


def _by_level(intervals: Sequence[float] | Mapping[int, float]) -> dict[int, float]:
    """``intervals`` as level number → interval, checked (a sequence: the table's levels in order)."""
    known = table.numbers()
    if isinstance(intervals, Mapping):
        pairs = list(intervals.items())
    elif len(intervals) > len(known):
        raise ConfigError(f"expected at most {len(known)} intervals (one per level {list(known)}), got "
                          f"{len(intervals)}")
    else:
        pairs = list(zip(known, intervals, strict=False))
    out: dict[int, float] = {}
    for lv, v in pairs:
        if lv not in known:
            raise ConfigError(f"an interval for level {lv}, which is not a level ({list(known)})")
        name = table.spec(lv).interval_key or f"the interval of level {lv}"
        if not (math.isfinite(float(v)) and float(v) >= 0):
            raise ConfigError(f"{name} = {v}: an interval must be >= 0 (0 disables the level)")
        out[lv] = float(v)
    return out


def _differential_level() -> int:
    """The level of differential checkpoints (the table's level with a differential key; 0: none)."""
    return next((s.number for s in table.specs() if s.differential_key), 0)
