"""Benchmark ftkit.linalg.pdgemm (SUMMA, 4 ranks on a 2 x 2 grid) against single-process numpy ``A @ B``.

usage: python benchmarks/bench_pdgemm.py [--quick] [--repeats R] [--sizes 2048 4096] [--blocks 128 256]
                                         [--width W] [--algorithm summa|cannon] [--yield-when-idle]

The script relaunches itself under mpirun (4 ranks, OPENBLAS_NUM_THREADS=1 for every rank). Inside the one MPI
job, for every repeat and every (n, nb), interleaved: rank 0 times numpy ``A @ B`` on the global matrices
while the other ranks sleep (they poll a non-blocking barrier, so they use no CPU), then all ranks time
``pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0)``. Both see the same machine at the same
moment, so their ratio is meaningful on a noisy shared machine. Reported per (n, nb): best and median times,
GFLOP/s, the ratio pdgemm/numpy (per repeat pair, median), the share of pdgemm's time spent in local GEMM,
the CPU time of all ranks over numpy's (1.0 = no overhead), the time of the same four local GEMMs run
concurrently without any communication (the best any 4-rank code can do on this machine at that moment; the
pdgemm "efficiency" is that time over pdgemm's) and the max error against numpy. Prints human-readable lines
and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n=2048 and 4096 with nb=256 only, 2 repeats")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--blocks", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--width", type=int, default=None, help="SUMMA step width (default: pdgemm's)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--algorithm", choices=["summa", "cannon"], default="summa")
    ap.add_argument("--yield-when-idle", action="store_true", help="pass --mca mpi_yield_when_idle 1")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.blocks, args.repeats = [256], 2
    return args


def launch(args: argparse.Namespace) -> int:
    import subprocess

    from ftkit.launch import build_mpirun_command

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    worker = [sys.executable, str(Path(__file__).resolve()), "--worker", "--repeats", str(args.repeats),
              "--sizes", *map(str, args.sizes), "--blocks", *map(str, args.blocks),
              "--ranks", str(args.ranks)]
    if args.width:
        worker += ["--width", str(args.width)]
    worker += ["--algorithm", args.algorithm]
    cmd = build_mpirun_command(args.ranks, worker, ulfm=False,
                               env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    if args.yield_when_idle:
        cmd[1:1] = ["--mca", "mpi_yield_when_idle", "1"]
    print("command:", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, timeout=3600).returncode


def sleep_barrier(comm) -> None:  # type: ignore[no-untyped-def]
    from ftkit.linalg.pblas._summa import wait_requests

    wait_requests([comm.Ibarrier()], max_sleep=5e-3)


def global_random(n: int, seed: int):  # type: ignore[no-untyped-def]
    """The matrix DistributedMatrix.random(..., seed) distributes (row i from generator (seed, i))."""
    import numpy as np

    out = np.empty((n, n))
    for i in range(n):
        out[i] = np.random.default_rng([seed, i]).uniform(-1.0, 1.0, n)
    return out


def work(args: argparse.Namespace) -> int:
    import numpy as np
    from mpi4py import MPI

    from ftkit import linalg

    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid.square(comm)
    rank = comm.Get_rank()
    results = []
    data = {}
    for n in args.sizes:
        for nb in args.blocks:
            A = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
            B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
            C = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
            data[(n, nb)] = (A, B, C)
    # The same local GEMMs without any communication: what 4 ranks could do at best on this machine now.
    from ftkit.linalg._blas import gemm_update

    floor_ops = {}
    for n in args.sizes:
        A0 = data[(n, args.blocks[0])][0]
        mloc, nloc = A0.local.shape[0], data[(n, args.blocks[0])][2].local.shape[1]
        floor_ops[n] = (np.asfortranarray(np.random.default_rng(rank).random((mloc, n))),
                        np.asfortranarray(np.random.default_rng(rank + 99).random((n, nloc))),
                        np.zeros((mloc, nloc), order="F"))
    globals_ = {}
    if rank == 0:
        for n in args.sizes:
            globals_[n] = (global_random(n, 1), global_random(n, 2))
    rec: dict[tuple[int, int], dict[str, list[float]]] = {
        key: {"numpy": [], "pdgemm": [], "gemm_share": [], "wait_share": [], "cpu_ratio": [], "floor": []}
        for key in data}
    for rep in range(args.repeats):
        for n in args.sizes:
            for nb in args.blocks:
                A, B, C = data[(n, nb)]
                # numpy on rank 0 while the others sleep
                t_np = 0.0
                cpu_np = 0.0
                if rank == 0:
                    ga, gb = globals_[n]
                    c0, t0 = time.process_time(), time.perf_counter()
                    ref = ga @ gb
                    t_np = time.perf_counter() - t0
                    cpu_np = time.process_time() - c0
                sleep_barrier(comm)
                t_np, cpu_np = comm.bcast((t_np, cpu_np), root=0)
                stats: dict[str, float] = {}
                sleep_barrier(comm)
                c0, t0 = time.process_time(), time.perf_counter()
                linalg.pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, width=args.width,
                              algorithm=args.algorithm, stats=stats)
                local_t = time.perf_counter() - t0
                cpu_pd = comm.allreduce(time.process_time() - c0, op=MPI.SUM)
                t_pd = comm.allreduce(local_t, op=MPI.MAX)
                gemm_share = comm.allreduce(stats.get("gemm_s", 0.0), op=MPI.SUM) / (t_pd * comm.size)
                wait_share = comm.allreduce(stats.get("wait_s", 0.0), op=MPI.SUM) / (t_pd * comm.size)
                sleep_barrier(comm)
                fa, fb, fc = floor_ops[n]
                t0 = time.perf_counter()
                gemm_update(1.0, fa, fb, fc, beta=0.0)
                t_floor = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                r = rec[(n, nb)]
                r["floor"].append(t_floor)
                r["numpy"].append(t_np)
                r["pdgemm"].append(t_pd)
                r["gemm_share"].append(gemm_share)
                r["wait_share"].append(wait_share)
                r["cpu_ratio"].append(cpu_pd / cpu_np)
                if rep == 0:
                    got = C.to_global(root=0)
                    if rank == 0:
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        r["rel_err"] = [err]
                        del got
                if rank == 0:
                    ratio = t_np / t_pd
                    print(f"rep {rep} n={n} nb={nb}: numpy {t_np:.3f} s, pdgemm {t_pd:.3f} s, "
                          f"ratio {ratio:.2f}x, local GEMM {100 * gemm_share:.0f}% of pdgemm, "
                          f"waiting {100 * wait_share:.0f}%, "
                          f"CPU time all ranks / numpy {cpu_pd / cpu_np:.2f}, "
                          f"4 local GEMMs without communication {t_floor:.3f} s "
                          f"(pdgemm efficiency {t_floor / t_pd:.2f})",
                          flush=True)
                if rank == 0:
                    del ref
    if rank == 0:
        for (n, nb), r in rec.items():
            flops = 2.0 * n ** 3
            ratios = [a / b for a, b in zip(r["numpy"], r["pdgemm"], strict=True)]
            row = {
                "n": n, "nb": nb, "ranks": comm.size, "algorithm": args.algorithm,
                "grid": f"{grid.nprow}x{grid.npcol}",
                "numpy_s_best": min(r["numpy"]), "pdgemm_s_best": min(r["pdgemm"]),
                "numpy_gflops_best": flops / min(r["numpy"]) / 1e9,
                "pdgemm_gflops_best": flops / min(r["pdgemm"]) / 1e9,
                "ratio_median": statistics.median(ratios),
                "ratio_of_bests": min(r["numpy"]) / min(r["pdgemm"]),
                "ratios": [round(x, 3) for x in ratios],
                "gemm_share_median": statistics.median(r["gemm_share"]),
                "wait_share_median": statistics.median(r["wait_share"]),
                "cpu_ratio_median": statistics.median(r["cpu_ratio"]),
                "floor_s_best": min(r["floor"]),
                "efficiency_median": statistics.median(
                    [f / p for f, p in zip(r["floor"], r["pdgemm"], strict=True)]),
                "floor_ratio_vs_numpy_median": statistics.median(
                    [a / f for a, f in zip(r["numpy"], r["floor"], strict=True)]),
                "rel_err": r.get("rel_err", [None])[0],
            }
            results.append(row)
            print(f"n={n} nb={nb}: numpy best {row['numpy_gflops_best']:.1f} GFLOP/s, pdgemm best "
                  f"{row['pdgemm_gflops_best']:.1f} GFLOP/s, ratio median {row['ratio_median']:.2f}x "
                  f"(of bests {row['ratio_of_bests']:.2f}x), "
                  f"local GEMM share {100 * row['gemm_share_median']:.0f}%,"
                  f" CPU time ratio {row['cpu_ratio_median']:.2f}, efficiency vs communication-free "
                  f"local GEMMs {row['efficiency_median']:.2f} "
                  f"(those alone: {row['floor_ratio_vs_numpy_median']:.2f}x numpy),"
                  f" rel err {row['rel_err']:.1e}")
        print(json.dumps({"benchmark": "pdgemm", "results": results}))
    return 0


def main() -> int:
    args = parse()
    return work(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
