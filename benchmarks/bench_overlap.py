"""Benchmark hiding the checkpoint cost: inline vs asynchronous (thread, head) post-processing of L3.

The heat example (examples/heat.py) runs a fixed amount of work on 8 application ranks in 4 emulated nodes
(2 ranks per node, plus 1 head per node in head mode: 12 processes), with an L3 checkpoint (Reed-Solomon
group encoding, group_size 4) every ``--every`` iterations. In the same run it measures:

* ``none``: no checkpoints (the baseline compute time);
* ``l1``: L1 checkpoints only (the blocking time FTI's application pays at least);
* ``inline``: L3 with ``inline_l3 = 1`` (the checkpoint call encodes);
* ``thread``: L3 with ``inline_l3 = 0, head = 0`` (a background thread per rank encodes);
* ``head``: L3 with ``inline_l3 = 0, head = 1`` (one head rank per node encodes for its node).

For each: the blocking time of ``checkpoint(level)`` (slowest rank, mean over checkpoints), the total loop
time (including the final ``wait()`` for background work) and the overhead against ``none``. Ratios printed:
asynchronous blocking time / L1 blocking time (target <= 1.2) and asynchronous overhead / inline overhead
(target <= 0.5). The machine's core count limits the overlap: both are reported with ``os.cpu_count()``.

Usage: python benchmarks/bench_overlap.py [--quick] [--size N] [--steps N] [--every N] [--level 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("none", "l1", "inline", "thread", "head")


def _worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    sys.path.insert(0, str(REPO / "examples"))
    import heat

    import ftkit

    mode = args.worker
    root = Path(args.dir)
    ckpt = None
    comm = MPI.COMM_WORLD
    if mode != "none":
        cfg = ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global", meta_dir=root / "meta",
                           head=1 if mode == "head" else 0, group_size=4, keep_last_ckpt=0,
                           inline_l2=0 if mode in ("thread", "head") else 1,
                           inline_l3=0 if mode in ("thread", "head") else 1,
                           inline_l4=0 if mode in ("thread", "head") else 1,
                           failure_timeout=600.0)
        ckpt = ftkit.Checkpointer(cfg)
        comm = ckpt.comm
    rank, n = comm.Get_rank(), args.size
    start, stop = heat.row_band(n, comm.size, rank)
    u = heat.initial_band(n, start, stop)
    step = np.zeros(1, np.int64)
    level = 1 if mode == "l1" else args.level
    if ckpt is not None:
        ckpt.protect("u", u)
        ckpt.protect("step", step)
    blocking: list[float] = []
    comm.Barrier()
    t0 = time.perf_counter()
    while step[0] < args.steps:
        heat.exchange_halos(comm, u)
        heat.jacobi_rows(u, start, n)
        step[0] += 1
        if ckpt is not None and step[0] % args.every == 0:
            t = time.perf_counter()
            ckpt.checkpoint(level)
            blocking.append(time.perf_counter() - t)
    t_wait = time.perf_counter()
    if ckpt is not None:
        ckpt.wait()
    end = time.perf_counter()
    total = comm.allreduce(end - t0, op=MPI.MAX)
    final_wait = comm.allreduce(end - t_wait, op=MPI.MAX)
    block = comm.allreduce(float(np.mean(blocking)) if blocking else 0.0, op=MPI.MAX)
    field = np.ascontiguousarray(u[1:-1])
    digests = comm.gather(heat.digest(field), root=0)
    if ckpt is not None:
        ckpt.finalize()
    if rank == 0:
        print("RESULT " + json.dumps({"mode": mode, "total_s": total, "blocking_s": block,
                                      "final_wait_s": final_wait, "checkpoints": len(blocking),
                                      "app_ranks": comm.size,
                                      "digest": heat.digest(np.frombuffer("".join(digests or []).encode(),
                                                                          np.uint8))}), flush=True)


def _run(mode: str, args: argparse.Namespace, workdir: Path) -> dict:
    from ftkit.launch import run_mpi

    d = workdir / mode
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    nprocs, node_size = (12, 3) if mode == "head" else (8, 2)
    cmd = [sys.executable, __file__, "--worker", mode, "--dir", str(d), "--size", str(args.size),
           "--steps", str(args.steps), "--every", str(args.every), "--level", str(args.level)]
    res = run_mpi(nprocs, cmd, timeout=args.timeout, node_size=node_size,
                  env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}).check()
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    out["wall_s"] = res.elapsed
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small problem (about a minute in all)")
    p.add_argument("--size", type=int, default=None, help="global grid SIZE x SIZE (float64)")
    p.add_argument("--steps", type=int, default=None, help="Jacobi iterations (fixed work)")
    p.add_argument("--every", type=int, default=None, help="checkpoint every N iterations")
    p.add_argument("--level", type=int, default=3, help="checkpoint level of the L3 runs (default 3)")
    p.add_argument("--repeats", type=int, default=None, help="runs per mode, round robin (best kept; 3, "
                   "--quick: 2)")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--worker", choices=MODES, default=None, help=argparse.SUPPRESS)
    p.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.size is None:
        args.size = 1024 if args.quick else 2048
    if args.steps is None:
        args.steps = 200 if args.quick else 400
    if args.every is None:
        args.every = 50 if args.quick else 100
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    if args.worker:
        _worker(args)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="ftkit-bench-overlap-"))
    results: dict[str, dict] = {}
    try:
        # Round robin over the modes, keeping each mode's best run: on a shared machine, load drifts
        # between runs, and interleaving exposes every mode to the same drift.
        for rep in range(args.repeats):
            for mode in MODES:
                r = _run(mode, args, workdir)
                print(f"  run {rep + 1} {mode:>7}: total {r['total_s']:.3f} s, blocking "
                      f"{r['blocking_s']:.4f} s", flush=True)
                if mode not in results or r["total_s"] < results[mode]["total_s"]:
                    results[mode] = r
        for mode in MODES:
            best = results[mode]
            print(f"{mode:>7}: total {best['total_s']:.3f} s, blocking per checkpoint "
                  f"{best['blocking_s']:.4f} s ({best['checkpoints']} checkpoints), "
                  f"final wait {best['final_wait_s']:.3f} s", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    digests = {r["digest"] for r in results.values()}
    base = results["none"]["total_s"]
    over = {m: results[m]["total_s"] - base for m in MODES if m != "none"}
    l1_block = results["l1"]["blocking_s"]
    summary = {
        "benchmark": "overlap", "cores": os.cpu_count(), "app_ranks": 8, "nodes": 4,
        "size": args.size, "steps": args.steps, "every": args.every, "level": args.level,
        "checkpoint_bytes_per_rank": args.size * args.size * 8 // 8,
        "results": results,
        "overhead_s": over,
        "overhead_fraction": {m: over[m] / base for m in over},
        "ratio_blocking_thread_vs_l1": results["thread"]["blocking_s"] / l1_block if l1_block else None,
        "ratio_blocking_head_vs_l1": results["head"]["blocking_s"] / l1_block if l1_block else None,
        "ratio_overhead_thread_vs_inline": over["thread"] / over["inline"] if over["inline"] > 0 else None,
        "ratio_overhead_head_vs_inline": over["head"] / over["inline"] if over["inline"] > 0 else None,
        "same_result_in_every_mode": len(digests) == 1,
    }
    print(f"cores: {os.cpu_count()} (8 application ranks, + 4 heads in head mode)")
    for m in ("thread", "head"):
        rb = summary[f"ratio_blocking_{m}_vs_l1"]
        ro = summary[f"ratio_overhead_{m}_vs_inline"]
        print(f"{m}: blocking / L1 blocking = {rb:.2f} (target <= 1.2); overhead / inline overhead = "
              + (f"{ro:.2f}" if ro is not None else "n/a") + " (target <= 0.5)")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
