"""``dcp_l4`` and ``fast_forward`` mean what they mean in FTI: ``dcp_l4`` schedules differential L4
checkpoints (with ``enable_dcp = 1``; FTI ignores it otherwise), ``fast_forward`` divides every interval."""

from __future__ import annotations

import re

import pytest

from ftkit import Config, ConfigWarning
from ftkit.checkpoint.schedule import SnapshotSchedule

from .conftest import REPO, run_python

PROGRAM = REPO / "tests" / "programs" / "config_snapshot.py"


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _levels(schedule: SnapshotSchedule, n: int, clock: FakeClock | None = None, step: float = 1.0):
    taken = []
    for it in range(1, n + 1):
        if clock is not None:
            clock.t += step
        lvl = schedule.tick()
        if lvl:
            taken.append((it, lvl))
    return taken


def test_dcp_l4_adds_differential_l4_checkpoints_to_the_schedule():
    cfg = Config(interval_unit="iterations", ckpt_l1=2, dcp_l4=3, enable_dcp=1)
    assert _levels(SnapshotSchedule.from_config(cfg), 12) == [
        (2, 1), (3, 4), (4, 1), (6, 4), (8, 1), (9, 4), (10, 1), (12, 4)]
    # FTI ignores dcp_l4 without enable_dcp ("L4 dCP interval set, but dCP is disabled")
    with pytest.warns(ConfigWarning, match=r"dcp_l4 = 3 \(enable_dcp = 0"):
        off = cfg.replace(enable_dcp=0)
    assert _levels(SnapshotSchedule.from_config(off), 12) == [(i, 1) for i in (2, 4, 6, 8, 10, 12)]
    # in minutes, with a full L4 interval too: L4 at the multiples of either
    clock = FakeClock()
    s = SnapshotSchedule([0, 0, 0, 5], dcp_l4=2, clock=clock, max_sync_intv=8)
    assert [it for it, lvl in _levels(s, 600, clock, 1.0) if lvl == 4] == [120, 240, 300, 360, 480, 600]


def test_fast_forward_divides_every_interval():
    # FTI's documentation: ckpt_l1 = 15 with fast_forward = 5 gives L1 checkpoints every 3 minutes
    s = SnapshotSchedule.from_config(Config(ckpt_l1=15, ckpt_l4=30, dcp_l4=10, enable_dcp=1, fast_forward=5))
    assert s.periods[1] == pytest.approx(180.0) and s.periods[4] == pytest.approx(360.0)
    assert s.dcp_period == pytest.approx(120.0)
    it = Config(interval_unit="iterations", ckpt_l1=4, ckpt_l4=12, fast_forward=2)
    assert _levels(SnapshotSchedule.from_config(it), 12) == [(2, 1), (4, 1), (6, 4), (8, 1), (10, 1), (12, 4)]
    assert SnapshotSchedule.from_config(Config(ckpt_l1=15)).periods[1] == pytest.approx(900.0)


@pytest.mark.mpi
@pytest.mark.parametrize("keys,expected", [
    ("ckpt_l1 = 2\ndcp_l4 = 3\nenable_dcp = 1\n", "2:1,3:4,4:1,6:4,8:1,9:4,10:1,12:4"),
    ("ckpt_l1 = 4\ndcp_l4 = 6\nenable_dcp = 1\n[advanced]\nfast_forward = 2\n",
     "2:1,3:4,4:1,6:4,8:1,9:4,10:1,12:4"),
    ("ckpt_l1 = 2\ndcp_l4 = 3\nenable_dcp = 0\n", "2:1,4:1,6:1,8:1,10:1,12:1"),
])
def test_snapshot_takes_differential_l4_checkpoints_under_mpi(tmp_path, keys, expected):
    (tmp_path / "c.ini").write_text(
        "[basic]\nckpt_dir = run/local\nglbl_dir = run/global\nmeta_dir = run/meta\nnode_size = 2\n"
        "dcp_block_size = 4096\n" + keys + "\n[ftkit]\ninterval_unit = iterations\nfailure_timeout = 120\n")
    res = run_python(4, PROGRAM, "--config", "c.ini", node_size=2, cwd=tmp_path, timeout=240).check()
    got = dict(re.findall(r"^R(\d+) levels=(\S*)$", res.stdout, re.M))
    assert sorted(got) == ["0", "1", "2", "3"] and set(got.values()) == {expected}, res.stdout
    maps = list((tmp_path / "run" / "global").rglob("dcp-r*.map"))
    assert bool(maps) == ("enable_dcp = 1" in keys), maps
