"""Benchmark resilient_pdgemm against pdgemm, without and with a process failure (SIGKILL mid-multiply).

usage: python benchmarks/bench_failure.py [--quick] [--n 2048] [--nb 128] [--width 256] [--repeats 3]
                                          [--no-3x3]

Part 1 (one MPI job, 4 ranks, 2x2, OPENBLAS_NUM_THREADS=1): repeats, in rotating order, of ``pdgemm``,
``resilient_pdgemm`` with operands protected beforehand (``protect_operands`` once; the multiply writes
nothing: the reference's setting, whose inputs already sit on the parallel file system) and
``resilient_pdgemm`` given a directory (it saves every rank's A, B and C pieces in the call), on the same
n x n matrices and step width; wall time (slowest rank, between barriers) and CPU time of all ranks, as
medians of per-repeat ratios to pdgemm in the same repeat; plus the one-time cost of ``protect_operands``.
Part 2 (one MPI job per case): rank 1 is SIGKILLed at the first, the middle and the last SUMMA step;
survivors'
total time relative to the error-free resilient time of part 1 (the reference's Figure 11: earlier failures
cost more, because the dead process's pieces are read from storage in every later step; here the end-of-run
recomputation is spread over the survivors). Part 3 (unless --quick / --no-3x3): the same with 9 ranks (3x3),
failure at the middle step. Every failure run also checks the product against numpy (max error printed).
Prints human-readable lines and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n=1024, 3 repeats, 2x2 only")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--width", type=int, default=256, help="SUMMA step width (k indices per step)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-3x3", dest="three", action="store_false")
    ap.add_argument("--worker", choices=["errorfree", "failure"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--grid", default="2x2", help=argparse.SUPPRESS)
    ap.add_argument("--kill-step", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeats, args.three = 1024, 3, False
    return args


# ------------------------------------------------------------------------------------------------ workers
def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    from ftkit import inject
    from ftkit.failure import exit_without_finalize
    from ftkit.linalg import DistributedMatrix, ProcessGrid, pdgemm
    from ftkit.linalg.resilient import resilient_pdgemm

    comm = MPI.COMM_WORLD
    P, Q = (int(x) for x in args.grid.split("x"))
    grid = ProcessGrid(comm, P, Q)
    n, nb = args.n, args.nb
    A = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    B = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    store = Path(args.dir, "store")
    if args.worker == "errorfree":
        from ftkit.linalg.resilient.protected import protect_operands

        def gemm_call(C: DistributedMatrix, how: str, stats: dict[str, float]) -> None:
            if how == "pdgemm":
                pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, width=args.width)
            else:
                where = ops if how == "protected" else store
                resilient_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=where,
                                 width=args.width, stats=stats)  # fmt: skip

        kinds = ("pdgemm", "protected", "resilient")
        C0 = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)  # the layout every C of the run has
        wall: dict[str, list[float]] = {kind: [] for kind in kinds}
        cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
        phases: dict[str, list[float]] = {"protect": [], "iterate": [], "settle": []}
        results: dict[str, np.ndarray] = {}
        # warm-up of every path (first-touch of panel buffers, the detector's creation), not timed
        for kind in kinds:
            if kind == "protected":
                ops = protect_operands("N", "N", n, n, n, A, 0, 0, B, 0, 0, C0, 0, 0, store=store)
            gemm_call(DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb), kind, {})
        ops.release()
        comm.Barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        ops = protect_operands("N", "N", n, n, n, A, 0, 0, B, 0, 0, C0, 0, 0, store=store)
        comm.Barrier()
        protect_wall = time.perf_counter() - t0
        protect_cpu = comm.allreduce(time.process_time() - c0)
        for rep in range(args.repeats):
            for kind in kinds[rep % 3:] + kinds[: rep % 3]:  # rotating order: no path always runs first
                C = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
                stats: dict[str, float] = {}
                comm.Barrier()
                c0, t0 = time.process_time(), time.perf_counter()
                gemm_call(C, kind, stats)
                comm.Barrier()
                wall[kind].append(time.perf_counter() - t0)
                cpu[kind].append(comm.allreduce(time.process_time() - c0))
                if kind == "resilient":
                    for key in phases:
                        phases[key].append(comm.allreduce(stats[f"{key}_s"], op=MPI.MAX))
                results[kind] = C.local
        ops.release()
        same = all(np.array_equal(results["pdgemm"], results[k]) for k in kinds)
        same = bool(comm.allreduce(int(same), op=MPI.MIN))
        if comm.rank == 0:
            out = {"wall": wall, "cpu": cpu, "phases": phases, "protect_once_wall": protect_wall,
                   "protect_once_cpu": protect_cpu, "bitwise_equal": same}  # fmt: skip
            print("TIMES " + json.dumps(out), flush=True)
        return
    # failure run: rank 1 kills itself at the chosen step
    a_g, b_g = A.to_global(root=0), B.to_global(root=0)
    C = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)

    def on_step(step: int) -> None:
        if comm.rank == 1 and step == args.kill_step:
            inject.kill_self()

    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    stats: dict[str, float] = {}
    res = resilient_pdgemm(
        "N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=store, width=args.width,
        on_step=on_step, stats=stats,
    )
    res.comm.Barrier()
    total = time.perf_counter() - t0
    cpu = res.comm.allreduce(time.process_time() - c0)  # CPU seconds of all survivors: less load-sensitive
    got = res.C.to_global(root=0)
    if res.comm.rank == 0:
        assert a_g is not None and b_g is not None and got is not None
        err = float(np.abs(got - a_g @ b_g).max())
        print(
            "FAILURE "
            + json.dumps(
                {
                    "total": total,
                    "cpu_survivors": cpu,
                    "failed": list(res.failed_ranks),
                    "maxerr": err,
                    "storage_reads_rank0": res.storage_reads,
                    "phases_rank0": {k: round(v, 4) for k, v in stats.items()},
                }
            ),
            flush=True,
        )
    exit_without_finalize(res.comm)


# ------------------------------------------------------------------------------------------------ driver
def run_job(nprocs: int, args: argparse.Namespace, extra: list[str], timeout: float) -> str:
    from ftkit.launch import run_mpi

    with tempfile.TemporaryDirectory(prefix="bench_failure_") as d:
        prog = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--n",
            str(args.n),
            "--nb",
            str(args.nb),
            "--width",
            str(args.width),
            "--repeats",
            str(args.repeats),
            "--dir",
            d,
            *extra,
        ]
        env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        r = run_mpi(nprocs, prog, timeout=timeout, env=env)
        if r.timed_out:
            raise SystemExit(f"benchmark job timed out: {' '.join(r.command)}\n{r.stdout}\n{r.stderr}")
        return r.stdout + "\n" + r.stderr


def grab(out: str, tag: str) -> dict:  # type: ignore[type-arg]
    for line in out.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1 :])
    raise SystemExit(f"no {tag} line in the job output:\n{out}")


def main() -> None:
    args = parse()
    if args.worker:
        worker(args)
        return
    steps = -(-args.n // args.width)
    print(
        f"bench_failure: n={args.n} nb={args.nb} width={args.width} ({steps} SUMMA steps) "
        f"repeats={args.repeats}",
        flush=True,
    )
    t = grab(run_job(4, args, ["--worker", "errorfree"], 1800), "TIMES")
    wall, cpu = t["wall"], t["cpu"]

    def ratio(clock: dict, kind: str) -> float:  # type: ignore[type-arg]
        return statistics.median(x / p for x, p in zip(clock[kind], clock["pdgemm"], strict=False))

    pd, rs = min(wall["pdgemm"]), min(wall["resilient"])
    print(f"2x2 error-free, bitwise equal to pdgemm: {t['bitwise_equal']}; medians of per-repeat ratios:")
    print(f"  pdgemm                                   {pd:.3f} s (best)")
    print(f"  resilient, operands protected beforehand {min(wall['protected']):.3f} s: wall "
          f"x{ratio(wall, 'protected'):.4f}, CPU x{ratio(cpu, 'protected'):.4f} of pdgemm  (target <= 1.01)")
    print(f"  resilient, saving A and B in the call    {rs:.3f} s: wall x{ratio(wall, 'resilient'):.3f}, "
          f"CPU x{ratio(cpu, 'resilient'):.3f} (of which saving + sync {min(t['phases']['protect']):.3f} s)")
    print(f"  protect_operands once (A and B)          {t['protect_once_wall']:.3f} s = "
          f"{t['protect_once_wall'] / pd:.2f} pdgemm")
    cases = {"first": 0, "middle": steps // 2, "last": steps - 1}
    failures = {}
    for name, step in cases.items():
        f = grab(run_job(4, args, ["--worker", "failure", "--kill-step", str(step)], 1800), "FAILURE")
        cpu_ratio = f["cpu_survivors"] / statistics.median(cpu["resilient"])
        failures[name] = {**f, "step": step, "vs_errorfree": f["total"] / rs, "cpu_vs_errorfree": cpu_ratio}
        print(
            f"2x2 rank 1 killed at the {name} step ({step}): {f['total']:.3f} s = x{f['total'] / rs:.2f} "
            f"error-free resilient (CPU of the survivors {f['cpu_survivors']:.2f} s = x{cpu_ratio:.2f}); "
            f"failed {f['failed']}, max error {f['maxerr']:.2e}; rank 0's phases (s) {f['phases_rank0']}"
        )
    result = {
        "bench": "failure",
        "n": args.n,
        "nb": args.nb,
        "width": args.width,
        "steps": steps,
        "pdgemm_s": pd,
        "resilient_s": rs,
        "protected_wall_ratio": ratio(wall, "protected"),
        "protected_cpu_ratio": ratio(cpu, "protected"),
        "resilient_wall_ratio": ratio(wall, "resilient"),
        "resilient_cpu_ratio": ratio(cpu, "resilient"),
        "protect_once_s": t["protect_once_wall"],
        "bitwise_equal": t["bitwise_equal"],
        "failure_2x2": failures,
    }
    if args.three:
        a3 = argparse.Namespace(**{**vars(args), "n": args.n - args.n % (3 * args.nb) or args.n})
        f = grab(
            run_job(
                9,
                a3,
                ["--worker", "failure", "--grid", "3x3", "--kill-step", str(-(-a3.n // a3.width) // 2)],
                2400,
            ),
            "FAILURE",
        )
        result["failure_3x3_middle"] = f
        print(
            f"3x3 (n={a3.n}) rank 1 killed at the middle step: {f['total']:.3f} s, failed {f['failed']}, "
            f"max error {f['maxerr']:.2e}"
        )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
