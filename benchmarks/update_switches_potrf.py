"""Why ``ft_pdpotrf``'s update GEMMs can take more CPU than ``pdpotrf``'s: the same GEMMs, preempted more.

usage: ftkit launch -n 4 -- python benchmarks/update_switches_potrf.py --grid 2x2 --n 4096 --nb 128 [--reps 8]

Both routines run alternately (``--reps`` times each after one untimed warm-up of each); every call of
:meth:`CholeskySteps.apply_update` is timed on the calling thread's clock (``time.thread_time``) minus its
``between`` calls (the messages' progress: not the GEMMs), and the involuntary context switches of the
thread during it are counted (``getrusage(RUSAGE_THREAD).ru_nivcsw``: the rank preempted in the middle of its
GEMMs by another rank on the same core, which then finds its operands evicted from the core's caches). Rank 0
prints, per routine, the medians over the calls of the sums over ranks (the GEMMs' CPU ms and the switches),
then the least-squares fit of every (rank, call) sample ``cpu = a + b * switches``: ``b`` is what one
preemption costs the GEMMs that follow it. With one rank per core (``--grid 1x1``) the two routines' GEMMs
take the same CPU (the operands' layout does not matter: the same shapes, leading dimensions and BLAS calls);
with more ranks than cores, a routine that runs longer is preempted more often, each preemption costing its
GEMMs ``b``. A measurement, not a benchmark: take the ratios from ``bench_pblas3.py --side-by-side``.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_pblas3 import operands
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.cholesky import _steps

_ACC = [0.0, 0]  # this call's apply_update CPU seconds (between calls excluded) and involuntary switches


def _install() -> None:
    orig = _steps.CholeskySteps.apply_update

    def apply_update(self: Any, k: int, mine: Any, colp: Any, blocks: Any = None,
                     between: Callable[[], object] | None = None) -> None:
        inner = [0.0]

        def timed_between() -> None:
            t = time.thread_time()
            assert between is not None
            between()
            inner[0] += time.thread_time() - t

        r0, t0 = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw, time.thread_time()
        orig(self, k, mine, colp, blocks, None if between is None else timed_between)
        _ACC[0] += time.thread_time() - t0 - inner[0]
        _ACC[1] += resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - r0

    _steps.CholeskySteps.apply_update = apply_update  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="2x2")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    S = operands(grid, args.n, args.nb)["S"]
    _install()
    got: dict[str, list[tuple[float, int]]] = {"pdpotrf": [], "ft_pdpotrf": []}
    for rep in range(args.reps + 1):
        for routine, samples in got.items():
            A = S.copy()
            comm.Barrier()
            _ACC[:] = [0.0, 0]
            getattr(linalg, routine)("L", args.n, A, 0, 0)
            if rep:
                samples.append((_ACC[0], _ACC[1]))
    every = comm.gather(got, root=0)
    if comm.rank != 0:
        return
    print(f"grid={args.grid} n={args.n} nb={args.nb} reps={args.reps}: apply_update's GEMMs (between calls "
          "excluded), sums over ranks, medians over calls")
    for routine in got:
        cpu = np.array([[s[0] for s in e[routine]] for e in every]).sum(axis=0) * 1e3
        sw = np.array([[s[1] for s in e[routine]] for e in every]).sum(axis=0)
        print(f"{routine:>11}: cpu {np.median(cpu):7.1f} ms   involuntary switches {np.median(sw):6.0f}")
    xs = np.array([s[1] for e in every for r in got for s in e[r]], float)
    ys = np.array([s[0] for e in every for r in got for s in e[r]]) * 1e3
    if np.ptp(xs) > 0:
        b, a = np.polyfit(xs, ys, 1)
        print(f"fit over {len(xs)} (rank, call) samples: cpu = {a:.1f} ms + {b * 1e3:.0f} us x switches")


if __name__ == "__main__":
    main()
