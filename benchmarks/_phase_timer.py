"""Exclusive per-phase CPU and wall seconds of wrapped functions, for the profiling scripts
(``profile_ft_potrf.py``, ``profile_resilient.py``): a phase's time excludes the phases nested in it; and
the profiling scripts' common options (also ``profile_potrf_waits.py``'s)."""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict
from typing import Any

__all__ = ["TOTALS", "print_medians", "profile_call", "profile_parser", "timed"]

#: the CPU clock of the timers: ``time.process_time`` counts every thread of the process (MPI's progress and
#: failure-detector threads too); a script may set ``time.thread_time`` to count the calling thread's only
CLOCK = time.process_time
_STACK: list[list[float]] = []  # per open phase: [cpu spent in nested phases, wall spent in nested phases]
#: phase name -> [exclusive CPU seconds, exclusive wall seconds] since the last ``TOTALS.clear()``
TOTALS: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])


def timed(name: str, fn: Any) -> Any:
    """Return ``fn`` wrapped to add its exclusive CPU and wall seconds to ``TOTALS[name]``."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0, w0 = CLOCK(), time.perf_counter()
        _STACK.append([0.0, 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            inner = _STACK.pop()
            dc, dw = CLOCK() - c0, time.perf_counter() - w0
            tot = TOTALS[name]
            tot[0] += dc - inner[0]
            tot[1] += dw - inner[1]
            if _STACK:
                _STACK[-1][0] += dc
                _STACK[-1][1] += dw
    return wrapper


def profile_call(comm: Any, call: Any) -> dict[str, list[float]]:
    """Run ``call()`` between two barriers of ``comm``; return this rank's exclusive ``[cpu, wall]`` seconds
    per phase, the unwrapped rest as ``"(rest)"`` and the whole call as ``"TOTAL"``."""
    TOTALS.clear()
    comm.Barrier()
    c0, w0 = CLOCK(), time.perf_counter()
    call()
    total = [CLOCK() - c0, time.perf_counter() - w0]
    comm.Barrier()
    got = {k: list(v) for k, v in TOTALS.items()}
    got["(rest)"] = [total[0] - sum(v[0] for v in got.values()), total[1] - sum(v[1] for v in got.values())]
    got["TOTAL"] = total
    return got


def print_medians(comm: Any, runs: dict[str, list[dict[str, list[float]]]], header: str, width: int) -> None:
    """Gather every rank's median ``[cpu, wall]`` per phase of each routine of ``runs`` (lists of
    :func:`profile_call` results) on rank 0 and print them in ms, a column per rank and the sum of CPU;
    ``header`` is formatted with ``routine``; ``width`` is the phase names' column."""
    import numpy as np

    med = {routine: {k: (float(np.median([r.get(k, [0, 0])[0] for r in reps])),
                         float(np.median([r.get(k, [0, 0])[1] for r in reps])))
                     for k in sorted({k for r in reps for k in r})} for routine, reps in runs.items()}
    every = comm.gather(med, root=0)
    if comm.rank != 0:
        return
    for routine in runs:
        keys = sorted({k for m in every for k in m[routine]}, key=lambda k: (k == "TOTAL", k))
        print(f"\n{header.format(routine=routine)}: median ms (cpu/wall) per rank, sum of cpu")
        ranks = " ".join(f"{'r' + str(r):>13}" for r in range(comm.size))
        print(f"{'phase':>{width}} {ranks}  cpu sum")
        for k in keys:
            vals = [m[routine].get(k, (0.0, 0.0)) for m in every]
            print(f"{k:>{width}} " + " ".join(f"{c * 1e3:6.1f}/{w * 1e3:6.1f}" for c, w in vals)
                  + f"  {sum(c for c, _ in vals) * 1e3:7.1f}")


def profile_parser(doc: str) -> argparse.ArgumentParser:
    """The profiling scripts' options: ``--grid PxQ``, ``--n``, ``--nb``, ``--reps`` (timed repetitions)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--grid", default="2x2")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    return ap
