"""Exclusive per-phase CPU and wall seconds of wrapped functions, for the profiling scripts
(``profile_ft_potrf.py``, ``profile_resilient.py``): a phase's time excludes the phases nested in it."""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from typing import Any

__all__ = ["TOTALS", "timed"]

_STACK: list[list[float]] = []  # per open phase: [cpu spent in nested phases, wall spent in nested phases]
#: phase name -> [exclusive CPU seconds, exclusive wall seconds] since the last ``TOTALS.clear()``
TOTALS: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])


def timed(name: str, fn: Any) -> Any:
    """Return ``fn`` wrapped to add its exclusive CPU and wall seconds to ``TOTALS[name]``."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0, w0 = time.process_time(), time.perf_counter()
        _STACK.append([0.0, 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            inner = _STACK.pop()
            dc, dw = time.process_time() - c0, time.perf_counter() - w0
            tot = TOTALS[name]
            tot[0] += dc - inner[0]
            tot[1] += dw - inner[1]
            if _STACK:
                _STACK[-1][0] += dc
                _STACK[-1][1] += dw
    return wrapper
