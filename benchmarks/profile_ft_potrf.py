"""Per-phase CPU and wall seconds of ``pdpotrf`` and ``ft_pdpotrf``, per rank, interleaved.

usage: ftkit launch -n 4 -- python benchmarks/profile_ft_potrf.py --grid 2x2 --n 4096 --nb 128 [--reps 3]
       [--ckpt-every K]

Wraps the phases of the factorization (the panel engine's and the checks' methods) with timers that count
exclusive time (a phase nested in another is subtracted from it), runs the two routines alternately
(``--reps`` times each after one untimed warm-up of each), and prints, per routine and rank, the median over
the repetitions of each phase's CPU seconds (``time.process_time``) and wall seconds, then the sum over ranks.
``--ckpt-every K`` adds ``ft_pdpotrf`` with a level-1 checkpoint every ``K`` panels (one Checkpointer in a
temporary directory, as ``bench_pblas3.py``'s ``ft_pdpotrf_ckpt``), the checkpoint's phases timed apart: the
packing of the factored columns (``FactoredColumns.pack``) and ``Checkpointer.checkpoint``.
The timers cost ~1 us per phase call (a few hundred calls per factorization): compare routines within one
run, not with the benchmark's figures. A profile, not a benchmark: use ``bench_pblas3.py`` for the ratios.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from _phase_timer import print_medians, profile_call, profile_parser, timed
from bench_pblas3 import operands
from mpi4py import MPI

import ftkit
from ftkit import linalg
from ftkit.linalg.cholesky import _abft, _factored, _lookahead, _steps, _tally, ft_potrf, potrf


def _install() -> None:
    for cls, names in ((_abft.UpdateChecks, ("verify", "check_solve", "encode", "update", "init")),
                       (_steps.CholeskySteps, ("start_diagonal", "solve_rows", "apply_update", "gather",
                                               "column_rows")),
                       (_steps.DiagonalMessage, ("wait",)),
                       (_lookahead.PanelFlight, ("wait", "progress")),
                       (potrf.CholeskyWork, ("__init__", "write_back")),
                       (_tally.Tally, ("report",)),
                       (_factored.FactoredColumns, ("pack",)),
                       (ftkit.Checkpointer, ("checkpoint",))):
        for name in names:
            setattr(cls, name, timed(f"{cls.__name__}.{name}", getattr(cls, name)))
    for name in ("share_panel", "gather_panel", "repair_rows", "_finish", "panel_buffer"):
        setattr(ft_potrf, name, timed(name, getattr(ft_potrf, name)))


def main() -> None:
    ap = profile_parser(__doc__)
    ap.add_argument("--ckpt-every", type=int, default=0,
                    help="also profile ft_pdpotrf with a level-1 checkpoint every this many panels (0: not)")
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    S = operands(grid, args.n, args.nb)["S"]  # the benchmark's SPD matrix
    _install()
    calls: dict[str, dict[str, Any]] = {"pdpotrf": {}, "ft_pdpotrf": {}}
    root, ckpt = Path(), None
    if args.ckpt_every:
        root = Path(comm.bcast(tempfile.mkdtemp(prefix="profile_ft_potrf_") if comm.rank == 0 else None))
        ckpt = ftkit.Checkpointer(config=ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global",
                                                      meta_dir=root / "meta"), comm=comm)
        calls["ft_pdpotrf_ckpt"] = {"ckpt": ckpt, "ckpt_every": args.ckpt_every}
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    try:
        for rep in range(args.reps + 1):
            for routine, kw in calls.items():
                A = S.copy()
                fn = getattr(linalg, routine.removesuffix("_ckpt"))
                got = profile_call(comm, lambda: fn("L", args.n, A, 0, 0, **kw))  # noqa: B023
                if rep:
                    runs[routine].append(got)
    finally:
        if ckpt is not None:
            ckpt.finalize()
            comm.Barrier()
            if comm.rank == 0:
                shutil.rmtree(root, ignore_errors=True)
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={args.n} nb={args.nb} reps={args.reps}", 34)

if __name__ == "__main__":
    main()
