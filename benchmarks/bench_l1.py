"""Benchmark: ftkit's L1 and L4 write throughput vs a raw write of the same bytes, and ftkit's extra memory.

4 ranks (2 emulated nodes) protect 1 GiB in total (256 MiB per rank; ``--quick``: 64 MiB in total). In the
same run, alternating, each rank writes:

* **raw**: the same bytes, straight from the same arrays, into a file in the same directory, with the same
  durability policy (temporary name, write in chunks, fsync, rename, fsync of the directory);
* **ftkit**: ``ckpt.checkpoint(level)`` (header + streamed sections with xxh3 digests + manifest commit).

Times are barrier-to-barrier (the slowest rank counts); each variant is repeated, in alternating order, and
the best and median kept (the median ratio is the headline: the disk is shared and noisy).
Memory: peak Python allocations during a checkpoint (tracemalloc) and the growth of the process's peak RSS
(``ru_maxrss``) across all checkpoints, per rank, beyond the protected arrays (allocated before measuring).

Targets (issue 2): throughput ratio ftkit/raw >= 0.9 at L1 and L4; extra memory <= 64 MiB per rank.
Prints human-readable lines and one JSON line. Run: ``python benchmarks/bench_l1.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

MiB = 2**20


def _raw_write(path: Path, arrays: list[np.ndarray], chunk: int) -> None:
    """Write the arrays' bytes as ftkit does, minus the format: tmp name, chunks, fsync, rename, fsync dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for a in arrays:
            view = memoryview(a.reshape(-1).view(np.uint8))
            for start in range(0, len(view), chunk):
                piece = view[start:start + chunk]
                done = 0
                while done < len(piece):
                    done += os.write(fd, piece[done:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def worker(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    import ftkit

    comm = MPI.COMM_WORLD
    work = Path(args.dir)
    cfg = ftkit.Config(ckpt_dir=work / "local", glbl_dir=work / "global", meta_dir=work / "meta",
                       failure_timeout=600.0)
    per_rank = args.total // comm.size
    rng = np.random.default_rng(comm.rank)
    # Two arrays per rank (3/4 and 1/4 of the rank's share), filled so pages are really allocated.
    big = rng.random(per_rank * 3 // 4 // 8)
    small = rng.integers(0, 2**62, size=(per_rank - big.nbytes) // 8, dtype=np.int64)
    arrays = [big, small]
    nbytes = sum(a.nbytes for a in arrays)
    ckpt = ftkit.Checkpointer(cfg, comm)
    ckpt.protect("big", big)
    ckpt.protect("small", small)
    chunk = cfg.io_chunk_bytes
    raw_dirs = {1: ckpt.topology.local_dir / "raw", 4: cfg.glbl_dir / "raw"}

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    py_peak = 0
    times: dict[str, list[float]] = {k: [] for k in ("raw_l1", "ftkit_l1", "raw_l4", "ftkit_l4")}

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        comm.Barrier()
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    for rep in range(args.repeats):
        for level in (1, 4):
            raw_path = raw_dirs[level] / f"rank{comm.rank}.bin"
            order = ("raw", "ftkit") if rep % 2 == 0 else ("ftkit", "raw")
            for kind in order:
                if kind == "raw":
                    # The raw file replaces the previous one (rename over it), as ftkit's new checkpoint
                    # replaces its previous one (pruned after the commit).
                    t = timed(lambda p=raw_path: _raw_write(p, arrays, chunk))
                else:
                    tracemalloc.start()
                    t = timed(lambda lv=level: ckpt.checkpoint(lv))
                    py_peak = max(py_peak, tracemalloc.get_traced_memory()[1])
                    tracemalloc.stop()
                times[f"{kind}_l{level}"].append(t)
    rss_extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    ckpt.finalize()
    mem = comm.gather((py_peak, rss_extra), root=0)
    if comm.rank == 0:
        total = nbytes * comm.size
        best = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "bench": "bench_l1", "ranks": comm.size, "total_bytes": total, "repeats": args.repeats,
            "cores": os.cpu_count(),
            **{f"{k}_best_s": round(v, 4) for k, v in best.items()},
            **{f"{k}_median_s": round(v, 4) for k, v in med.items()},
            "l1_GBps": round(total / best["ftkit_l1"] / 1e9, 3),
            "raw_l1_GBps": round(total / best["raw_l1"] / 1e9, 3),
            "l4_GBps": round(total / best["ftkit_l4"] / 1e9, 3),
            "raw_l4_GBps": round(total / best["raw_l4"] / 1e9, 3),
            "ratio_l1_best": round(best["raw_l1"] / best["ftkit_l1"], 3),
            "ratio_l4_best": round(best["raw_l4"] / best["ftkit_l4"], 3),
            "ratio_l1_median": round(med["raw_l1"] / med["ftkit_l1"], 3),
            "ratio_l4_median": round(med["raw_l4"] / med["ftkit_l4"], 3),
            "peak_python_alloc_MiB_per_rank": round(max(m[0] for m in mem) / MiB, 2),
            "peak_rss_growth_MiB_per_rank": round(max(m[1] for m in mem) / MiB, 2),
        }
        print(f"bench_l1: {comm.size} ranks, {total / MiB:.0f} MiB protected in total, "
              f"{args.repeats} repeats, "
              f"{os.cpu_count()} cores")
        for lv in (1, 4):
            print(f"  L{lv}: ftkit {result[f'l{lv}_GBps']:.3f} GB/s vs raw "
                  f"{result[f'raw_l{lv}_GBps']:.3f} GB/s -> ratio {result[f'ratio_l{lv}_best']:.3f} (best), "
                  f"{result[f'ratio_l{lv}_median']:.3f} (median)"
                  f"   target >= 0.9")
        print(f"  extra memory per rank: python peak {result['peak_python_alloc_MiB_per_rank']} MiB, "
              f"RSS growth {result['peak_rss_growth_MiB_per_rank']} MiB   target <= 64 MiB")
        print(json.dumps(result), flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="64 MiB, 2 repeats (default: 1 GiB, 5 repeats)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--total-mib", type=int, default=None, help="protected data in total (MiB)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--dir", default=None, help="directory to write in (default: a temporary one)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--total", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    total = (args.total_mib or (64 if args.quick else 1024)) * MiB
    repeats = args.repeats or (2 if args.quick else 5)
    from ftkit.launch import run_mpi

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ftkit-bench-l1-"))
    try:
        r = run_mpi(args.ranks, [sys.executable, __file__, "--worker", "--dir", str(work),
                                 "--total", str(total),
                                 "--repeats", str(repeats)], timeout=1800, node_size=2)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0 or r.timed_out:
        sys.stderr.write(r.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
