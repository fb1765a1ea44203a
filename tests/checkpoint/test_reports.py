"""``ckpt.recoveries`` / ``ckpt.shrinks`` entries: seconds per phase and a repr showing them (issue 36)."""

from __future__ import annotations

from ftkit.checkpoint.handover import RepairReport, ShrinkReport


def test_repair_report_shows_durations_not_clock_values():
    r = RepairReport(number=2, dead=(3,), detected=1000.25, rebuilt=1000.5, adopted=1001.0, restored=1003.0,
                     checkpoint_id=7, level=2)
    assert r.phases() == {"repair": 0.25, "adopt": 0.5, "restore": 2.0} and r.seconds == 2.75
    assert repr(r) == ("RepairReport(number=2, dead=(3,), checkpoint_id=7, level=2, repair=0.250 s, "
                       "adopt=0.500 s, restore=2.000 s, total=2.750 s)")
    assert "1000" not in repr(r)
    pending = RepairReport(dead=(1,), detected=5.0, rebuilt=6.0)   # not adopted nor restored yet
    assert pending.phases() == {"repair": 1.0, "adopt": 0.0, "restore": 0.0}


def test_shrink_report_repr():
    s = ShrinkReport(8, 7, (5,), checkpoint_id=4, level=1, number=1,
                     phases={"repair": 0.1, "adopt": 0.02, "restore": 0.3})
    assert repr(s) == ("ShrinkReport(number=1, old_size=8, new_size=7, failed=(5,), checkpoint_id=4, "
                       "level=1, repair=0.100 s, adopt=0.020 s, restore=0.300 s, total=0.420 s)")
    assert abs(s.seconds - 0.42) < 1e-12
