"""Per-phase CPU and wall seconds of ``pdpotrf`` and ``ft_pdpotrf``, per rank, interleaved.

usage: ftkit launch -n 4 -- python benchmarks/profile_ft_potrf.py --grid 2x2 --n 4096 --nb 128 [--reps 3]

Wraps the phases of the factorization (the panel engine's and the checks' methods) with timers that count
exclusive time (a phase nested in another is subtracted from it), runs the two routines alternately
(``--reps`` times each after one untimed warm-up of each), and prints, per routine and rank, the median over
the repetitions of each phase's CPU seconds (``time.process_time``) and wall seconds, then the sum over ranks.
The timers cost ~1 us per phase call (a few hundred calls per factorization): compare routines within one
run, not with the benchmark's figures. A profile, not a benchmark: use ``bench_pblas3.py`` for the ratios.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from _phase_timer import print_medians, profile_call, profile_parser, timed
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.cholesky import _abft, _lookahead, _steps, ft_potrf, potrf


def _install() -> None:
    for cls, names in ((_abft.UpdateChecks, ("verify", "check_solve", "encode", "update", "init")),
                       (_steps.CholeskySteps, ("start_diagonal", "solve_rows", "apply_update", "gather",
                                               "column_rows")),
                       (_steps.DiagonalMessage, ("wait",)),
                       (_lookahead.PanelFlight, ("wait", "progress")),
                       (potrf.CholeskyWork, ("__init__", "write_back")),
                       (ft_potrf._Tally, ("report",))):
        for name in names:
            setattr(cls, name, timed(f"{cls.__name__}.{name}", getattr(cls, name)))
    for name in ("share_panel", "gather_panel", "repair_rows", "_finish", "panel_buffer"):
        setattr(ft_potrf, name, timed(name, getattr(ft_potrf, name)))


def _spd(grid: linalg.ProcessGrid, n: int, nb: int) -> linalg.DistributedMatrix:
    """The benchmark's SPD matrix: (R + R.T) / 2 + 2n I, R uniform."""
    S = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    rows, cols = S.global_rows()[:, None], S.global_cols()[None, :]
    S.local[...] = np.where(rows == cols, 2.0 * n, S.local + 0.0)
    sym = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
    linalg.pdtran(n, n, 0.5, S, 0, 0, 0.0, sym, 0, 0)
    linalg.pdgeadd("N", n, n, 0.5, S, 0, 0, 1.0, sym, 0, 0)
    return sym


def main() -> None:
    ap = profile_parser(__doc__)
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    S = _spd(grid, args.n, args.nb)
    _install()
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    for rep in range(args.reps + 1):
        for routine in ("pdpotrf", "ft_pdpotrf"):
            A = S.copy()
            got = profile_call(comm, lambda: getattr(linalg, routine)("L", args.n, A, 0, 0))  # noqa: B023
            if rep:
                runs[routine].append(got)
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={args.n} nb={args.nb} reps={args.reps}", 34)

if __name__ == "__main__":
    main()
