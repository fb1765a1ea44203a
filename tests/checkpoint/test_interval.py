"""Time-based snapshot intervals: agreement only at sync points, FTI issue #51, Daly's automatic interval."""

from __future__ import annotations

import numpy as np
import pytest

from ftkit.checkpoint.schedule import SnapshotSchedule
from ftkit.errors import ConfigError
from ftkit.models import daly_interval


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class CountingAgree:
    """Elementwise max over several simulated ranks' last values (in-process stand-in for the allreduce)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, values: np.ndarray) -> np.ndarray:
        self.calls += 1
        return values


def run(schedule: SnapshotSchedule, clock: FakeClock, iter_seconds: float, n: int, *, auto: bool = False,
        ckpt_seconds: float = 0.0) -> list[tuple[int, int]]:
    taken = []
    for _ in range(n):
        clock.t += iter_seconds
        lvl = schedule.tick(auto=auto)
        if lvl:
            clock.t += ckpt_seconds
            schedule.record_checkpoint(lvl, ckpt_seconds)
            taken.append((schedule.iteration, lvl))
    return taken


def test_minutes_intervals_are_honoured_and_sync_is_rare():
    clock, agree = FakeClock(), CountingAgree()
    s = SnapshotSchedule([1, 0, 0, 3], max_sync_intv=16, agree=agree, clock=clock)
    taken = run(s, clock, 1.0, 600)                      # 1 s per iteration, 10 minutes
    l4 = [i for i, lvl in taken if lvl == 4]
    l1 = [i for i, lvl in taken if lvl == 1]
    assert l4 == [180, 360, 540]
    assert len(l1) == 7 and all(i % 60 == 0 and i % 180 != 0 for i in l1)
    # Sync points at 1, 3, 7, 15, 31, then every 16 iterations: ~41 allreduces for 600 iterations.
    assert agree.calls < 600 / 10
    assert s.iter_time == pytest.approx(1.0)


def test_iteration_longer_than_interval_still_checkpoints():
    """FTI issue #51: an iteration of 2 minutes with a 1-minute interval must checkpoint every iteration."""
    clock = FakeClock()
    s = SnapshotSchedule([1, 0, 0, 0], clock=clock)
    taken = run(s, clock, 120.0, 5)
    assert [i for i, _ in taken] == [1, 2, 3, 4, 5]


def test_checkpoint_time_is_not_counted_as_iteration_time():
    clock = FakeClock()
    s = SnapshotSchedule([0, 0, 1, 0], max_sync_intv=4, clock=clock)
    run(s, clock, 1.0, 200, ckpt_seconds=30.0)
    assert s.iter_time == pytest.approx(1.0)


def test_agreed_slowest_rank_drives_the_decision():
    clock = FakeClock()
    slow = 2.0
    s = SnapshotSchedule([1, 0, 0, 0], max_sync_intv=8, clock=clock,
                         agree=lambda v: np.maximum(v, np.array([slow, -1.0, 0.0])))
    taken = run(s, clock, 1.0, 200)
    assert [i for i, _ in taken][:3] == [30, 60, 90]    # 60 s / 2 s per iteration on the slowest rank


def test_iterations_unit_needs_no_agreement():
    agree = CountingAgree()
    s = SnapshotSchedule([2, 0, 5, 0], unit="iterations", agree=agree)
    taken = run(s, FakeClock(), 1.0, 10)
    assert taken == [(2, 1), (4, 1), (5, 3), (6, 1), (8, 1), (10, 3)]   # FTI: count % interval == 0
    assert agree.calls == 0


def test_auto_uses_daly_interval_from_measured_cost():
    clock = FakeClock()
    mtbf, cost = 3600.0, 4.0
    s = SnapshotSchedule([0, 0, 0, 0], mtbf=mtbf, auto_level=2, max_sync_intv=8, clock=clock)
    taken = run(s, clock, 1.0, 400, auto=True, ckpt_seconds=cost)
    assert taken[0] == (1, 2)                             # calibration checkpoint measures the cost
    expected = int(daly_interval(cost, mtbf) / 1.0)       # ~165 iterations of 1 s
    gaps = np.diff([i for i, _ in taken[1:]])
    assert taken[1][0] - 1 == expected and all(g == expected for g in gaps)
    assert s.interval_seconds(auto=True) == pytest.approx(daly_interval(cost, mtbf))


def test_bad_configuration():
    with pytest.raises(ConfigError, match="ckpt_l2"):
        SnapshotSchedule([1, -1, 0, 0])
    with pytest.raises(ConfigError, match="interval_unit"):
        SnapshotSchedule([1, 0, 0, 0], unit="hours")
    with pytest.raises(ConfigError, match="max_sync_intv"):
        SnapshotSchedule([1, 0, 0, 0], max_sync_intv=0)
    with pytest.raises(ConfigError, match="mtbf"):
        SnapshotSchedule([1, 0, 0, 0]).tick(auto=True)


def test_probe_is_agreed_at_sync_points_only():
    """A background failure flagged on one rank raises the alarm on every rank, at the same sync point."""
    clock = FakeClock()
    other = {"flag": 0.0}                                # the flag of another (simulated) rank
    s = SnapshotSchedule([1, 0, 0, 0], max_sync_intv=4, clock=clock, probe=lambda: 0.0,
                         agree=lambda v: np.maximum(v, np.array([0.0, -1.0, other["flag"]])))
    alarms = []
    for i in range(1, 20):
        clock.t += 1.0
        if i == 6:
            other["flag"] = 1.0
        s.tick()
        alarms.append(s.alarm)
    # Sync points at iterations 1, 3, 7, 11, 15, 19: the flag raised at 6 is seen at 7 and later syncs only.
    assert [i + 1 for i, a in enumerate(alarms) if a] == [7, 11, 15, 19]


def test_auto_calibrates_after_a_restart():
    """After recovery restores the snapshot count, the automatic schedule still measures and checkpoints."""
    clock = FakeClock()
    s = SnapshotSchedule([0, 0, 0, 0], mtbf=3600.0, max_sync_intv=8, clock=clock)
    s.count = 500                                         # what recover() does
    taken = run(s, clock, 1.0, 400, auto=True, ckpt_seconds=4.0)
    assert taken[0] == (501, 4) and len(taken) >= 3


def test_importing_ftkit_checkpoint_leaves_the_models_package_for_the_first_auto_interval():
    import subprocess
    import sys

    code = ("import mpi4py; mpi4py.rc.initialize = False; import sys, ftkit.checkpoint; "
            "print('ftkit.models' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
