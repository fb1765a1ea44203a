"""Benchmark resilient_pdgemm against pdgemm, without and with a process failure (SIGKILL mid-multiply).

usage: python benchmarks/bench_failure.py [--quick] [--n 2048] [--nb 128] [--width 256] [--repeats 3]
                                          [--no-3x3]

Part 1 (one MPI job, 4 ranks, 2x2, OPENBLAS_NUM_THREADS=1): interleaved repeats of ``pdgemm`` and
``resilient_pdgemm`` on the same n x n matrices and the same step width; reports the error-free overhead
of the
failure-tolerant path over pdgemm split into the heartbeat part (the SUMMA steps with deadline-polled
point-to-point exchanges, plus settle) and the input protection (every rank saving its operands to the shared
directory), which the reference's numbers do not include (its inputs already sit on the parallel file system).
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
    ap.add_argument("--quick", action="store_true", help="n=1024, 2 repeats, 2x2 only")
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
        args.n, args.repeats, args.three = 1024, 2, False
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
        times: dict[str, list[float]] = {
            "pdgemm": [],
            "resilient": [],
            "protect": [],
            "iterate": [],
            "settle": [],
        }
        for _ in range(args.repeats):
            C = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
            comm.Barrier()
            t0 = time.perf_counter()
            pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, width=args.width)
            comm.Barrier()
            times["pdgemm"].append(time.perf_counter() - t0)
            C2 = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
            stats: dict[str, float] = {}
            comm.Barrier()
            t0 = time.perf_counter()
            resilient_pdgemm(
                "N",
                "N",
                n,
                n,
                n,
                1.0,
                A,
                0,
                0,
                B,
                0,
                0,
                0.0,
                C2,
                0,
                0,
                store=store,
                width=args.width,
                stats=stats,
            )
            comm.Barrier()
            times["resilient"].append(time.perf_counter() - t0)
            for key in ("protect", "iterate", "settle"):
                times[key].append(comm.allreduce(stats[f"{key}_s"], op=MPI.MAX))
            same = comm.allreduce(int(np.array_equal(C.local, C2.local)), op=MPI.MIN)
        if comm.rank == 0:
            print("TIMES " + json.dumps({**times, "bitwise_equal": bool(same)}), flush=True)
        return
    # failure run: rank 1 kills itself at the chosen step
    a_g, b_g = A.to_global(root=0), B.to_global(root=0)
    C = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)

    def on_step(step: int) -> None:
        if comm.rank == 1 and step == args.kill_step:
            inject.kill_self()

    comm.Barrier()
    t0 = time.perf_counter()
    res = resilient_pdgemm(
        "N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=store, width=args.width, on_step=on_step
    )
    res.comm.Barrier()
    total = time.perf_counter() - t0
    got = res.C.to_global(root=0)
    if res.comm.rank == 0:
        assert a_g is not None and b_g is not None and got is not None
        err = float(np.abs(got - a_g @ b_g).max())
        print(
            "FAILURE "
            + json.dumps(
                {
                    "total": total,
                    "failed": list(res.failed_ranks),
                    "maxerr": err,
                    "storage_reads_rank0": res.storage_reads,
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
    pd, rs = min(t["pdgemm"]), min(t["resilient"])
    best = min(range(len(t["resilient"])), key=lambda i: t["resilient"][i])
    heartbeat = t["iterate"][best] + t["settle"][best]
    ratios = [r / p for r, p in zip(t["resilient"], t["pdgemm"], strict=False)]
    hb_ratios = [(i + s) / p for i, s, p in zip(t["iterate"], t["settle"], t["pdgemm"], strict=False)]
    print(
        f"2x2 error-free: pdgemm {pd:.3f} s, resilient {rs:.3f} s (protect {t['protect'][best]:.3f} s, "
        f"steps+settle {heartbeat:.3f} s); bitwise equal to pdgemm: {t['bitwise_equal']}"
    )
    print(
        f"  overhead vs pdgemm: total x{statistics.median(ratios):.3f}, without input protection "
        f"x{statistics.median(hb_ratios):.3f} (median of per-repeat ratios)"
    )
    cases = {"first": 0, "middle": steps // 2, "last": steps - 1}
    failures = {}
    for name, step in cases.items():
        f = grab(run_job(4, args, ["--worker", "failure", "--kill-step", str(step)], 1800), "FAILURE")
        failures[name] = {**f, "step": step, "vs_errorfree": f["total"] / rs}
        print(
            f"2x2 rank 1 killed at the {name} step ({step}): {f['total']:.3f} s = x{f['total'] / rs:.2f} "
            f"error-free resilient; failed {f['failed']}, max error {f['maxerr']:.2e}"
        )
    result = {
        "bench": "failure",
        "n": args.n,
        "nb": args.nb,
        "width": args.width,
        "steps": steps,
        "pdgemm_s": pd,
        "resilient_s": rs,
        "protect_s": t["protect"][best],
        "overhead_total": statistics.median(ratios),
        "overhead_without_protect": statistics.median(hb_ratios),
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
