"""Per-phase CPU and wall seconds of ``pdpotrf`` and ``ft_pdpotrf``, per rank, interleaved.

usage: ftkit launch -n 4 -- python benchmarks/profile_ft_potrf.py --grid 2x2 --n 4096 --nb 128 [--reps 3]
       [--ckpt-every K] [--cprofile RANK [--sort cumtime] [--lines 40]] [--process-time]

Wraps the phases of the factorization (the panel engine's and the checks' methods) with timers that count
exclusive time (a phase nested in another is subtracted from it), runs the two routines alternately
(``--reps`` times each after one untimed warm-up of each), and prints, per routine and rank, the median over
the repetitions of each phase's CPU seconds (``time.thread_time``: the calling thread's, not MPI's threads';
``--process-time``: the process's) and wall seconds, then the sum over ranks.
``--ckpt-every K`` adds ``ft_pdpotrf`` with a level-1 checkpoint every ``K`` panels (one Checkpointer in a
temporary directory, as ``bench_pblas3.py``'s ``ft_pdpotrf_ckpt``), the checkpoint's phases timed apart: the
packing of the factored columns (``FactoredColumns.pack``) and ``Checkpointer.checkpoint``.
The timers cost ~1 us per phase call (a few hundred calls per factorization): compare routines within one
run, not with the benchmark's figures. ``--cprofile R`` also prints rank ``R``'s Python profile of each
routine (``cProfile`` on the same clock, ``--sort`` key: the per-panel Python an ``ft_`` call adds shows as
the functions plain has not).
A profile, not a benchmark: use ``bench_pblas3.py`` for the ratios.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import _phase_timer
from _phase_timer import print_medians, profile_call, profile_parser, timed
from bench_pblas3 import operands
from mpi4py import MPI

import ftkit
from ftkit import linalg
from ftkit.linalg.cholesky import _abft, _factored, _lookahead, _panel_sums, _steps, _tally, ft_potrf, potrf

try:  # this checkout's: an older one has no such module
    from ftkit.linalg.cholesky import _trailing
except ImportError:  # pragma: no cover
    _trailing = None  # type: ignore[assignment]
try:  # the fused update (check, GEMM, carry per block column); an older checkout has none
    from ftkit.linalg.cholesky import _fused
except ImportError:  # pragma: no cover
    _fused = None  # type: ignore[assignment]


def _install() -> None:
    for cls, names in ((_abft.UpdateChecks, ("verify", "check_solve", "encode", "update", "init")),
                       (_tally.Tally, ("check_panel",)),
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
    # by name where the callers look them up; a name a version of the code lacks is skipped (so the
    # script profiles an older checkout too)
    for mod, prefix, names in ((ft_potrf, "", ("share_panel", "gather_panel", "_finish", "panel_buffer",
                                                "_launch", "_arrive", "_update", "_solve", "direct_part")),
                               # the compiled kernels: the rest of a caller's time is its Python
                               (_abft, "_abft.", ("carry_blocks", "carry_columns", "copy_checksums",
                                                  "exact_sums", "panel_pass", "solve_flags", "segment_flags",
                                                  "solve_check", "block_flags", "gemm_update",
                                                  "encode_rows_into")),
                               (_panel_sums, "_panel_sums.", ("_direct_parts", "_check_own", "_stack",
                                                              "repair_rows")),
                               (_trailing, "_trailing.", ("repair_rows", "_stack")),
                               (_fused, "_fused.", ("fused_blocks", "check_pieces"))):
        for name in names:
            if mod is not None and hasattr(mod, name):
                setattr(mod, name, timed(prefix + name, getattr(mod, name)))


def main() -> None:
    ap = profile_parser(__doc__)
    ap.add_argument("--ckpt-every", type=int, default=0,
                    help="also profile ft_pdpotrf with a level-1 checkpoint every this many panels (0: not)")
    ap.add_argument("--process-time", action="store_true",
                    help="time phases by time.process_time (every thread: MPI's too), not time.thread_time")
    ap.add_argument("--cprofile", type=int, default=-1, metavar="RANK",
                    help="also print this rank's cProfile of each routine (all timed repetitions)")
    ap.add_argument("--sort", default="tottime", help="cProfile's sort key (tottime, cumtime, ...)")
    ap.add_argument("--lines", type=int, default=40, help="cProfile's lines printed per routine")
    ap.add_argument("--callees", default="", help="also print what the functions matching this regex call")
    args = ap.parse_args()
    if not args.process_time:
        _phase_timer.CLOCK = time.thread_time
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
    profiles: dict[str, list[cProfile.Profile]] = {}
    try:
        for rep in range(args.reps + 1):
            for routine, kw in calls.items():
                A = S.copy()
                fn = getattr(linalg, routine.removesuffix("_ckpt"))
                prof = cProfile.Profile(_phase_timer.CLOCK) if rep and comm.rank == args.cprofile else None
                if prof is not None:
                    prof.enable()
                got = profile_call(comm, lambda: fn("L", args.n, A, 0, 0, **kw))  # noqa: B023
                if prof is not None:
                    prof.disable()
                    profiles.setdefault(routine, []).append(prof)
                if rep:
                    runs[routine].append(got)
    finally:
        if ckpt is not None:
            ckpt.finalize()
            comm.Barrier()
            if comm.rank == 0:
                shutil.rmtree(root, ignore_errors=True)
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={args.n} nb={args.nb} reps={args.reps}", 34)
    for routine, profs in profiles.items():
        out = io.StringIO()
        stats = pstats.Stats(profs[0], stream=out)
        for prof in profs[1:]:
            stats.add(prof)
        stats.sort_stats(args.sort).print_stats(args.lines)
        if args.callees:
            stats.print_callees(args.callees)
        print(f"\nrank {args.cprofile}, {routine}, {len(profs)} calls, cProfile by {args.sort}:\n"
              f"{out.getvalue()}")

if __name__ == "__main__":
    main()
