"""How ``ft_pdpotrf``'s extra CPU over ``pdpotrf`` grows with the matrix: the same number of panels at several
orders, so that a per-panel cost (Python, messages) stays the same and a pass over the matrix grows as n^2.

usage: ftkit launch -n 4 -- python benchmarks/scale_ft_potrf.py --grid 2x2 [--panels 32] [--n 512 1024 4096]
       [--reps 9]

For each order ``n`` (block size ``n / panels``), every rank runs the two routines alternately (one untimed
call of each first) on the benchmark's SPD matrix, timing its process CPU; rank 0 prints, per order, the
medians summed over the ranks, the extra of ``ft_pdpotrf`` in ms and per panel and rank in us, and the ratio.
An extra that grows with n^2 (16x from n = 1024 to 4096) is the checks' passes over the matrix; one that
stays per panel is orchestration. A measurement, not a benchmark: ``bench_pblas3.py`` gives the ratios.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_pblas3 import operands
from mpi4py import MPI

from ftkit import linalg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="2x2")
    ap.add_argument("--panels", type=int, default=32)
    ap.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, *(int(x) for x in a.grid.split("x")))
    if comm.rank == 0:
        print(f"grid {a.grid}, {a.panels} panels, {a.reps} timed calls of each, CPU summed over ranks (ms)")
        print(f"{'n':>6} {'nb':>4} {'pdpotrf':>9} {'ft_pdpotrf':>10} {'extra':>8} {'us/panel/rank':>13} "
              f"{'ratio':>6}")
    for n in a.n:
        nb = n // a.panels
        S = operands(grid, n, nb)["S"]
        cpu: dict[str, list[float]] = {"pdpotrf": [], "ft_pdpotrf": []}
        for r in range(a.reps + 1):
            for name in (("pdpotrf", "ft_pdpotrf") if r % 2 else ("ft_pdpotrf", "pdpotrf")):
                A = S.copy()
                comm.Barrier()
                t = time.process_time()
                getattr(linalg, name)("L", n, A, 0, 0)
                if r:  # the first call of each is untimed
                    cpu[name].append(time.process_time() - t)
        plain, ft = (comm.allreduce(float(np.median(cpu[k]))) * 1e3 for k in ("pdpotrf", "ft_pdpotrf"))
        if comm.rank == 0:
            extra = ft - plain
            print(f"{n:>6} {nb:>4} {plain:>9.1f} {ft:>10.1f} {extra:>8.1f} "
                  f"{1e3 * extra / grid.size / a.panels:>13.0f} {ft / plain:>6.3f}", flush=True)
    grid.free()


if __name__ == "__main__":
    main()
