"""Benchmark ABFT-checked ft_pdgemm against plain pdgemm (4 ranks, 2 x 2 grid), in the same run.

usage: python benchmarks/bench_abft.py [--quick] [--n 4096] [--nb 256] [--repeats 3] [--bs B ...]
       [--phases [--level3 | --potrf] | --kernels]

The script relaunches itself under mpirun (4 ranks, OPENBLAS_NUM_THREADS=1 per rank). Inside the one job, per
repeat and in rotating order: ``pdgemm``, ``ft_pdgemm(tol=None)`` (rigorous bound) and
``ft_pdgemm(tol="statistical")`` on the same uniform [-1, 1) matrices (n x n, nb x nb blocks). Reported:

- overhead: ft_pdgemm time / pdgemm time - 1 (per repeat pair, median; and of the bests), and the same for
  the CPU time of all ranks (insensitive to other jobs' load on a shared machine). Target <= 3 %.
- time to correct one error: the correction phase of ft_pdgemm (``report.correct_seconds``: locate, fix,
  re-verify; slowest rank) with one bit flip in C (located and fixed in O(1)) and with two flips in one block
  (block recomputed from rows/columns fetched within its process row/column).
- threshold tightness: threshold / largest observed residual (1 / report.max_ratio), for the rigorous and the
  statistical threshold, on mixed-sign data and on positive data (|A|, |B|). Aim <= 20x for statistical.
- correctness: error-free ft_pdgemm C is bit-identical to pdgemm's.

``--quick``: n = 2048, 2 repeats (unless ``--repeats`` is given). Prints human-readable lines and one JSON
line.

Where the overhead goes:

- ``--phases``: under mpirun, cProfile on the CPU clock of ``--repeats`` pdgemm and ft_pdgemm calls (rigorous
  and statistical), summed over the ranks: per-function CPU ms per call, pdgemm vs ft_pdgemm, largest
  differences first (the encoding kernels replace pdgemm's own copies of the pieces into the panels), and
  every rank's CPU seconds per call (median); the calls interleaved, in alternating order. With ``--level3``
  the same for pdtrmm, pdtrsm, pdsyrk and pdsyr2k against their ft_ versions (rigorous bound;
  ``bench_pblas3.py``'s flags, each call on fresh copies of B / C, copies not profiled; ``--only pdsyrk``
  for some of them; ``--nb 128`` is the issue's case). ``--cumulative FILE:FUNC ...`` adds the CPU of those
  functions including what they call (per call and rank, and as a share of the plain routine's CPU): the
  cost of the checks alone, e.g. ``_solve_sums.py:encode level3.py:_check_solution`` for ft_pdtrsm, which
  the calls' own CPU, noisy on a shared machine, cannot resolve to a percent. With ``--potrf``
  pdpotrf against ft_pdpotrf (lower, no checkpoint, rigorous bound) on ``bench_pblas3.py``'s SPD matrix.
- ``--kernels``: one process, no MPI: the per-rank pieces of the 2 x 2 run (local ``n/2 x n/2``, pieces of
  ``n/2 x 512``): the plain copy pdgemm makes of an A / B piece, the fused copy + checksum kernels (3 kinds:
  rigorous / numeric thresholds; 4 kinds: statistical), the verification pass over C, and one SUMMA step's
  local GEMM, with the implied per-multiply overhead (min of 15 runs each; no MPI message costs).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n=2048, 2 repeats")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--nb", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=None, help="default 3 (--quick: 2)")
    ap.add_argument("--bs", type=int, nargs="+", default=[0], help="checksum block sizes (0 = automatic)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--phases", action="store_true", help="per-function CPU profile, pdgemm vs ft_pdgemm")
    ap.add_argument("--level3", action="store_true",
                    help="--phases of pdtrmm, pdtrsm, pdsyrk, pdsyr2k vs their ft_ versions, not pdgemm")
    ap.add_argument("--only", nargs="+", default=None, choices=("pdtrmm", "pdtrsm", "pdsyrk", "pdsyr2k"),
                    help="with --level3: profile only these routines (and their ft_ versions)")
    ap.add_argument("--cumulative", nargs="+", default=[], metavar="FILE:FUNC",
                    help="with --phases: also each of these functions' CPU including what it calls, per call "
                         "and rank, and its share of the plain routine's (e.g. level3.py:_check_solution)")
    ap.add_argument("--potrf", action="store_true",
                    help="--phases of pdpotrf vs ft_pdpotrf instead of pdgemm")
    ap.add_argument("--kernels", action="store_true", help="in-process kernel timings (no MPI)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.n = 2048
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    return args


def launch(args: argparse.Namespace) -> int:
    import subprocess

    from ftkit.launch import build_mpirun_command

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    worker = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--n",
        str(args.n),
        "--nb",
        str(args.nb),
        "--repeats",
        str(args.repeats),
        "--ranks",
        str(args.ranks),
        "--bs",
        *map(str, args.bs),
        *(["--phases"] if args.phases else []),
        *(["--level3"] if args.level3 else []),
        *(["--only", *args.only] if args.only else []),
        *(["--cumulative", *args.cumulative] if args.cumulative else []),
        *(["--potrf"] if args.potrf else []),
    ]
    cmd = build_mpirun_command(
        args.ranks, worker, ulfm=False, env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    )
    print("command:", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, timeout=3600).returncode


def work(args: argparse.Namespace) -> int:
    import numpy as np
    from mpi4py import MPI

    from ftkit import linalg
    from ftkit.inject import BitFlip, InjectionPlan
    from ftkit.linalg.abft import ft_pdgemm
    from ftkit.linalg.checksums import choose_bs
    from ftkit.linalg.pblas._summa import wait_requests

    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid.square(comm)
    rank = comm.rank
    n, nb = args.n, args.nb

    def say(*a: object) -> None:
        if rank == 0:
            print(*a, flush=True)

    cpu: dict[str, list[float]] = {}

    def timed(fn, name: str = "") -> tuple[float, object]:  # type: ignore[no-untyped-def]
        wait_requests([comm.Ibarrier()], max_sleep=5e-3)
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        wall = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        # CPU time of all ranks: insensitive to the other jobs' load (idle ranks sleep, they do not spin)
        cpu.setdefault(name, []).append(comm.allreduce(time.process_time() - c0, op=MPI.SUM))
        return wall, out

    A = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    C = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
    Cf = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)

    def plain() -> None:
        linalg.pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0)

    def checked(bs: int | None, tol: str | None, inject: InjectionPlan | None = None, X=A, Y=B):  # type: ignore[no-untyped-def]
        return ft_pdgemm(
            "N", "N", n, n, n, 1.0, X, 0, 0, Y, 0, 0, 0.0, Cf, 0, 0, bs=bs, tol=tol, inject=inject
        )

    timed(plain)  # warm-up (first-touch, BLAS buffers)
    timed(lambda: checked(None, None))  # warm-up (numba kernels load from their cache or compile)
    results = []
    for bs_arg in args.bs:
        bs = bs_arg or None
        bs_used = bs or choose_bs(nb, nb, n)
        t_plain: list[float] = []
        t_rig: list[float] = []
        t_stat: list[float] = []
        runs = [
            ("plain", plain, t_plain),
            ("rigorous", lambda bs=bs: checked(bs, None), t_rig),
            ("statistical", lambda bs=bs: checked(bs, "statistical"), t_stat),
        ]
        reports = {}
        for rep in range(args.repeats):
            order = runs[rep % 3 :] + runs[: rep % 3]
            for name, fn, acc in order:
                t, out = timed(fn, f"{name}{bs_used}")
                acc.append(t)
                if out is not None:
                    reports[name] = out
                    assert out.detected == 0, out
            say(
                f"rep {rep} bs={bs_used}: pdgemm {t_plain[-1]:.3f} s, ft rigorous {t_rig[-1]:.3f} s "
                f"({100 * (t_rig[-1] / t_plain[-1] - 1):+.1f}%), ft statistical {t_stat[-1]:.3f} s "
                f"({100 * (t_stat[-1] / t_plain[-1] - 1):+.1f}%)"
            )
        identical = bool(comm.allreduce(int(np.array_equal(C.local, Cf.local)), op=MPI.MIN))
        # correcting one error: O(1) location; two errors in one block: recomputation of the block
        t_one, rep_one = timed(
            lambda bs=bs: checked(
                bs, None, InjectionPlan([BitFlip("C", rank=1, step=-1, bits="high")], seed=5)
            )
        )
        t_two, rep_two = timed(
            lambda bs=bs: checked(
                bs,
                None,
                InjectionPlan(
                    [
                        BitFlip("C", rank=2, step=-1, index=(3, 4), bit=62),
                        BitFlip("C", rank=2, step=-1, index=(7, 9), bit=62),
                    ],
                    seed=6,
                ),
            )
        )
        t_ref = statistics.median(t_rig)
        # threshold tightness on positive data too (partial sums grow: the statistical model's hard case)
        Ap = linalg.DistributedMatrix(grid, A.desc, np.abs(A.local))
        Bp = linalg.DistributedMatrix(grid, B.desc, np.abs(B.local))
        rp_rig = checked(bs, None, X=Ap, Y=Bp)
        rp_stat = checked(bs, "statistical", X=Ap, Y=Bp)
        over = [a / b - 1 for a, b in zip(t_rig, t_plain, strict=True)]
        over_s = [a / b - 1 for a, b in zip(t_stat, t_plain, strict=True)]
        row = {
            "n": n,
            "nb": nb,
            "bs": bs_used,
            "ranks": comm.size,
            "grid": f"{grid.nprow}x{grid.npcol}",
            "pdgemm_s": t_plain,
            "ft_rigorous_s": t_rig,
            "ft_statistical_s": t_stat,
            "overhead_rigorous_median": statistics.median(over),
            "overhead_statistical_median": statistics.median(over_s),
            "overhead_of_bests": min(t_rig) / min(t_plain) - 1,
            "cpu_overhead_rigorous_median": statistics.median(
                a / b - 1 for a, b in zip(cpu[f"rigorous{bs_used}"], cpu[f"plain{bs_used}"], strict=True)
            ),
            "cpu_overhead_statistical_median": statistics.median(
                a / b - 1 for a, b in zip(cpu[f"statistical{bs_used}"], cpu[f"plain{bs_used}"], strict=True)
            ),
            "cpu_overhead_of_mins": {
                name: min(cpu[f"{name}{bs_used}"]) / min(cpu[f"plain{bs_used}"]) - 1
                for name in ("rigorous", "statistical")
            },
            "cpu_s": {name: cpu[f"{name}{bs_used}"] for name in ("plain", "rigorous", "statistical")},
            "bit_identical_to_pdgemm": identical,
            "correct_one_error_s": rep_one.correct_seconds,
            "one_error_call_minus_errorfree_s": t_one - t_ref,
            "correct_one_error_action": [e.action for e in rep_one.events],
            "correct_two_in_block_s": rep_two.correct_seconds,
            "errorfree_correct_phase_s": reports["rigorous"].correct_seconds,
            "correct_two_in_block_action": [e.action for e in rep_two.events],
            "tightness_rigorous_mixed": 1 / reports["rigorous"].max_ratio,
            "tightness_statistical_mixed": 1 / reports["statistical"].max_ratio,
            "tightness_rigorous_positive": 1 / rp_rig.max_ratio,
            "tightness_statistical_positive": 1 / rp_stat.max_ratio,
            "blocks_checked": reports["rigorous"].blocks_checked,
        }
        results.append(row)
        say(
            f"n={n} nb={nb} bs={bs_used}: overhead rigorous {100 * row['overhead_rigorous_median']:+.1f}% "
            f"(median), statistical {100 * row['overhead_statistical_median']:+.1f}%, of bests "
            f"{100 * row['overhead_of_bests']:+.1f}%; CPU time overhead (all ranks, load-insensitive) "
            f"rigorous {100 * row['cpu_overhead_rigorous_median']:+.1f}%, statistical "
            f"{100 * row['cpu_overhead_statistical_median']:+.1f}% (median of paired ratios; of the minima "
            f"{100 * row['cpu_overhead_of_mins']['rigorous']:+.1f}% / "
            f"{100 * row['cpu_overhead_of_mins']['statistical']:+.1f}%); "
            f"C bit-identical to pdgemm: {identical}"
        )
        say(
            f"  correct one error: {row['correct_one_error_s'] * 1e3:.1f} ms "
            f"({row['correct_one_error_action']}), two in one block: "
            f"{row['correct_two_in_block_s'] * 1e3:.1f} ms ({row['correct_two_in_block_action']})"
        )
        say(
            f"  tightness (threshold / max residual): rigorous {row['tightness_rigorous_mixed']:.0f}x mixed, "
            f"{row['tightness_rigorous_positive']:.0f}x positive; statistical "
            f"{row['tightness_statistical_mixed']:.1f}x mixed, "
            f"{row['tightness_statistical_positive']:.1f}x positive"
        )
    if rank == 0:
        print(json.dumps({"benchmark": "abft", "results": results}))
    return 0


def _phase_calls(args: argparse.Namespace, grid: Any) -> dict[str, dict[str, Any]]:
    """``{plain: {variant: (fresh, call)}}`` for ``--phases``: pdgemm / ft_pdgemm (rigorous and statistical),
    or with ``--level3`` pdtrmm, pdtrsm, pdsyrk, pdsyr2k and their ``ft_`` versions (rigorous) on
    ``bench_pblas3.py``'s operands and flags (side L, lower, no transpose; lower "N", k = n, beta 1).
    ``fresh()`` makes the copy of the matrix a call writes (not profiled), ``call(x)`` runs on it."""
    import numpy as np

    from ftkit import linalg
    from ftkit.linalg.abft import ft_pdgemm

    n, nb = args.n, args.nb
    A = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    C = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
    if args.potrf:
        from bench_pblas3 import operands  # the same SPD matrix as the timed side-by-side runs

        S = operands(grid, n, nb)["S"]
        def factor(fn: Any, x: Any) -> None:
            fn("L", n, x, 0, 0)

        return {"pdpotrf": {v: (S.copy, functools.partial(factor, getattr(linalg, v)))
                            for v in ("pdpotrf", "ft_pdpotrf")}}
    if not args.level3:
        def same() -> Any:
            return C

        return {"pdgemm": {
            "pdgemm": (same, lambda c: linalg.pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, c, 0, 0)),
            "rigorous": (same, lambda c: ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, c, 0, 0)),
            "statistical": (same, lambda c: ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, c, 0, 0,
                                                      tol="statistical")),
        }}  # fmt: skip
    rows, cols = A.global_rows()[:, None], A.global_cols()[None, :]
    A.local[...] = np.where(rows == cols, n + np.abs(A.local), A.local)  # T: well conditioned
    shapes = {
        "pdtrmm": (B.copy, lambda fn, x: fn("L", "L", "N", "N", n, n, 1.0, A, 0, 0, x, 0, 0)),
        "pdtrsm": (B.copy, lambda fn, x: fn("L", "L", "N", "N", n, n, 1.0, A, 0, 0, x, 0, 0)),
        "pdsyrk": (C.copy, lambda fn, x: fn("L", "N", n, n, 1.0, B, 0, 0, 1.0, x, 0, 0)),
        "pdsyr2k": (C.copy, lambda fn, x: fn("L", "N", n, n, 1.0, B, 0, 0, A, 0, 0, 1.0, x, 0, 0)),
    }
    return {name: {v: (fresh, functools.partial(call, getattr(linalg, v))) for v in (name, "ft_" + name)}
            for name, (fresh, call) in shapes.items() if not args.only or name in args.only}


def phases(args: argparse.Namespace) -> int:
    """``--phases``: cProfile (CPU clock) of each plain routine and its checked variants, interleaved in one
    job, per function, summed over the ranks; and every rank's CPU seconds per call."""
    import cProfile
    import pstats

    from mpi4py import MPI

    from ftkit import linalg
    from ftkit.linalg.pblas._summa import wait_requests

    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid.square(comm)
    pairs = _phase_calls(args, grid)
    calls = {name: fn for variants in pairs.values() for name, fn in variants.items()}
    for fresh, fn in calls.values():
        fn(fresh())  # warm-up
    prof = {name: cProfile.Profile(time.process_time) for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    for rep in range(args.repeats):
        for name in list(calls)[:: 1 if rep % 2 == 0 else -1]:  # alternating order: the same load for both
            fresh, fn = calls[name]
            x = fresh()
            wait_requests([comm.Ibarrier()], max_sleep=5e-3)
            c0 = time.process_time()
            prof[name].enable()
            fn(x)
            prof[name].disable()
            cpu[name].append(time.process_time() - c0)
    mine: dict[str, dict[str, float]] = {}
    for name, pr in prof.items():
        per: dict[str, float] = {}
        for (file, _line, func), (_cc, _nc, tt, ct, _callers) in pstats.Stats(pr).stats.items():  # type: ignore[attr-defined]
            key = f"{Path(file).name}:{func}"
            per[key] = per.get(key, 0.0) + tt * 1e3 / args.repeats
            if key in args.cumulative:  # inclusive time, under its own key
                per["cumulative " + key] = per.get("cumulative " + key, 0.0) + ct * 1e3 / args.repeats
        mine[name] = per
    every = comm.gather((mine, {name: statistics.median(v) for name, v in cpu.items()}))
    if comm.rank == 0:
        _print_phases(args, comm.size, pairs, every)
    return 0


def _print_phases(args: argparse.Namespace, size: int, pairs: dict[str, dict[str, Any]],
                  every: list[Any]) -> None:
    """Rank 0's table of :func:`phases`."""
    tot: dict[str, dict[str, float]] = {}
    cum: dict[str, dict[str, float]] = {}
    for rank_data, _ in every:
        for name, per in rank_data.items():
            for key, ms in per.items():
                into = cum if key.startswith("cumulative ") else tot
                into.setdefault(name, {})[key] = into.setdefault(name, {}).get(key, 0.0) + ms
    print(f"n={args.n} nb={args.nb}, {size} ranks: CPU ms per call summed over the ranks (own time per "
          "function)")
    for plain, variants in pairs.items():
        base = sum(tot[plain].values())
        print(f"  {plain}: CPU s per call per rank (median) "
              + " ".join(f"{c[plain]:.3f}" for _, c in every))
        for name in variants:
            if name == plain:
                continue
            total = sum(tot[name].values())
            print(f"  {name}: {total:.1f} vs {plain} {base:.1f} ({100 * (total / base - 1):+.2f} %); "
                  "CPU s per call per rank (median) " + " ".join(f"{c[name]:.3f}" for _, c in every))
            for key, ms in sorted(cum.get(name, {}).items()):
                print(f"    {key} (with what it calls): {ms / size:.2f} ms per call per rank, "
                      f"{100 * ms / base:.2f} % of {plain}'s CPU")
            keys = set(tot[name]) | set(tot[plain])
            diff = sorted(keys, key=lambda k: -abs(tot[name].get(k, 0.0) - tot[plain].get(k, 0.0)))
            for key in diff[:int(os.environ.get("BENCH_PHASE_ROWS", "16"))]:
                a, b = tot[plain].get(key, 0.0), tot[name].get(key, 0.0)
                print(f"    {key:46s} {plain} {a:8.2f} ft {b:8.2f} ({b - a:+7.2f}: "
                      f"{100 * (b - a) / base:+.2f}%)")


def kernels(args: argparse.Namespace) -> int:
    """``--kernels``: in-process timings of the per-rank encoding / verification work of the 2 x 2 run."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np

    from ftkit.linalg import checksums
    from ftkit.linalg._blas import gemm_update
    from ftkit.linalg.checksums._block_kernels import block_sums_into
    from ftkit.linalg.checksums._kernels import encode_cols_into, encode_rows_into

    loc, width = args.n // 2, 512
    bs = args.bs[0] or checksums.choose_bs(args.nb, args.nb, args.n)
    steps = args.n // (2 * width)
    rng = np.random.default_rng(0)
    a_loc = np.asfortranarray(rng.uniform(-1, 1, (loc, loc)))
    b_loc = np.asfortranarray(rng.uniform(-1, 1, (loc, loc)))
    a, b = a_loc[:, :width], b_loc[width : 2 * width, :]  # as SUMMA cuts them (B: a band of rows)
    c = np.asfortranarray(rng.uniform(-1, 1, (loc, loc)))
    rb = checksums.dense_bounds(loc, bs)
    nr = len(rb) - 1
    w = checksums.segment_weights(rb)

    def best(fn, reps: int = 15) -> float:  # type: ignore[no-untyped-def]
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times) * 1e3

    pa, pb = np.empty((loc, width), order="F"), np.empty((width, loc), order="F")
    t = {"copy A piece": best(lambda: np.copyto(pa, a)), "copy B piece": best(lambda: np.copyto(pb, b))}
    for kinds in (3, 4):
        sa = np.empty((loc + kinds * nr, width), order="F")
        sb = np.empty((width, loc + kinds * nr), order="F")
        t[f"encode A piece, {kinds} kinds"] = best(
            lambda sa=sa, kinds=kinds: encode_rows_into(a, rb, w, sa, True, kinds)
        )
        t[f"encode B piece, {kinds} kinds"] = best(
            lambda sb=sb, kinds=kinds: encode_cols_into(b, rb, w, sb, True, kinds)
        )
    out = np.zeros((5, nr, nr))
    t["verification pass over C"] = best(lambda: block_sums_into(c, rb, rb, w, w, out, np.empty((0, 0)),
                                                                 np.empty((2, 0), np.int64)))
    cc = np.empty_like(c)
    t["(copy of C, for scale)"] = best(lambda: np.copyto(cc, c))
    gemm = best(lambda: gemm_update(1.0, a_loc[:, : 2 * width], b_loc[: 2 * width], c, 1.0), 3)
    print(
        f"per-rank work of the 2 x 2 run, n={args.n}: local {loc} x {loc}, pieces of width {width}, bs={bs}, "
        f"{steps} SUMMA steps; min of 15 runs (ms)"
    )
    for key, ms in t.items():
        print(f"  {key:34s} {ms:7.2f}")
    print(f"  {'local GEMM of one step':34s} {gemm:7.2f}")
    for kinds, name in ((3, "rigorous"), (4, "statistical")):
        extra = steps * (t[f"encode A piece, {kinds} kinds"] - t["copy A piece"])
        extra += steps * (t[f"encode B piece, {kinds} kinds"] - t["copy B piece"])
        extra += t["verification pass over C"]
        print(
            f"  {name}: encoding beyond pdgemm's copies + verification = {extra:.2f} ms per multiply, "
            f"{100 * extra / (steps * gemm):.2f} % of its local GEMMs ({steps * gemm:.0f} ms)"
        )
    return 0


def main() -> int:
    args = parse()
    if args.kernels:
        return kernels(args)
    if args.worker:
        return phases(args) if args.phases else work(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
