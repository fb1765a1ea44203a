"""The disk's own counters around a timed call (issue 37: what ran beside it), for the benchmark programs and
:mod:`run_order`. No MPI import (the driver uses it too)."""

from __future__ import annotations

import os

__all__ = ["device_now", "device_text"]


def device_now(path: str) -> tuple[float, float, float, float]:
    """The whole device's counters for the disk holding ``path`` (``/sys/dev/block/M:m/stat``): MiB
    written, MiB discarded, milliseconds spent writing and discarding; and the machine's Dirty + Writeback
    MiB (``/proc/meminfo``). Every process's I/O counts: a call's delta shows what ran beside it (another
    job's writeback, the discard of a previous job's removed files). Zeros where unreadable."""
    dirty = 0.0
    try:
        with open("/proc/meminfo") as f:
            dirty = sum(int(line.split()[1]) for line in f
                        if line.startswith(("Dirty:", "Writeback:"))) / 1024
        dev = os.stat(path).st_dev
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as f:
            v = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return 0.0, 0.0, 0.0, dirty
    disc = v[13] / 2048 if len(v) > 14 else 0.0
    ms = v[7] + (v[14] if len(v) > 14 else 0)
    return v[6] / 2048, disc, float(ms), dirty


def device_text(before: tuple[float, float, float, float], after: tuple[float, float, float, float]) -> str:
    """``dev_wmib=.. dev_discmib=.. dev_ms=.. dirty0=..`` for a result line: the device's deltas over the
    call (:func:`device_now`) and the Dirty + Writeback MiB at its start."""
    return (f"dev_wmib={after[0] - before[0]:.1f} dev_discmib={after[1] - before[1]:.1f} "
            f"dev_ms={after[2] - before[2]:.0f} dirty0={before[3]:.0f}")
