"""Per-phase CPU and wall seconds of ``pdtrsm`` and ``ft_pdtrsm``, per rank, interleaved.

usage: ftkit launch -n 4 -- python benchmarks/profile_ft_trsm.py --grid 2x2 --n 4096 --nb 128 [--reps 3]

The benchmark's call (``bench_pblas3.py``: side L, lower, no transpose, non-unit, alpha 1, a well-conditioned
triangle, B uniform) on fresh copies of B, the two routines alternately (``--reps`` times each after one
untimed warm-up of each). Timed apart: the sweep, the triangle (plain: ``triangle_operand``; ABFT:
``SolveChecksums.make_triangle``), the checksums' set-up, the copy and sums of ``alpha B``
(``SolveChecksums.encode``), the check (``residuals``, its products and all-gather) and the report.
Prints, per routine and rank, the median of each phase's exclusive CPU and wall seconds, then the sum over
ranks. A profile, not a benchmark: use ``bench_pblas3.py`` for the ratios.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from _phase_timer import print_medians, profile_call, profile_parser, timed
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.abft import _solve_sums, level3
from ftkit.linalg.pblas import _tri_kernel, _tri_sweep, triangular


def _install() -> None:
    cls = _solve_sums.SolveChecksums
    for name in ("__init__", "make_triangle", "encode", "t_blocks", "residuals", "_gather", "_send_t_sums"):
        setattr(cls, name, timed(f"SolveChecksums.{name}", getattr(cls, name)))
    for mod in (level3, triangular):
        mod.sweep = timed("sweep", mod.sweep)  # type: ignore[attr-defined]
    triangular.triangle_operand = timed("triangle_operand", triangular.triangle_operand)  # type: ignore[attr-defined]
    enc = _solve_sums.encode_cols_into
    copying, summing = timed("kernel encode_cols_into (B)", enc), timed("kernel encode_cols_into (X)", enc)
    _solve_sums.encode_cols_into = lambda *a: (copying if a[4] else summing)(*a)  # type: ignore[attr-defined]
    for name in ("triangle_rows_into", "triangle_piece"):
        setattr(_solve_sums, name, timed(f"kernel {name}", getattr(_solve_sums, name)))
    _tri_kernel.triangle_in_place = timed("kernel triangle_in_place", _tri_kernel.triangle_in_place)
    _tri_sweep.triangle_piece = timed("kernel triangle_piece", _tri_sweep.triangle_piece)
    level3._check_solution = timed("_check_solution", level3._check_solution)  # type: ignore[attr-defined]


def main() -> None:
    args = profile_parser(__doc__).parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    n, nb = args.n, args.nb
    T = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    rows, cols = T.global_rows()[:, None], T.global_cols()[None, :]
    T.local[...] = np.where(rows == cols, n + np.abs(T.local), T.local)
    B0 = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    _install()
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    results: dict[str, np.ndarray] = {}
    for rep in range(args.reps + 1):
        for routine in ("pdtrsm", "ft_pdtrsm"):
            B = B0.copy()
            fn = getattr(linalg, routine)
            got = profile_call(comm, lambda: fn("L", "L", "N", "N", n, n, 1.0, T, 0, 0, B, 0, 0))  # noqa: B023
            results[routine] = B.local
            if rep:
                runs[routine].append(got)
    same = comm.allreduce(bool(np.array_equal(results["pdtrsm"], results["ft_pdtrsm"])), op=MPI.LAND)
    if comm.rank == 0:
        print(f"ft_pdtrsm's result bit for bit pdtrsm's: {same}")
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={n} nb={nb} reps={args.reps}", 34)


if __name__ == "__main__":
    main()
