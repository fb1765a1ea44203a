"""Benchmark the redundancy levels: L1 write, L2 partner copy, L3 RS / XOR group encoding, L4 copy, and the
recovery of one lost node at L2 and L3.

8 ranks in 4 emulated nodes (group_size 4: two groups of 4 members, one per node), ``--size-mib`` MiB of
checkpoint data per rank (default 256; ``--quick``: 32). Every step is timed on every rank after a barrier
and reported as the slowest rank's time. Prints human-readable lines and one JSON line. ``--ranks 4`` runs
one group of 4 members, one rank per emulated node (``--node-size`` defaults to ranks / 4), so that the
per-rank figures are not only those of 8 ranks sharing 2 cores.

L3 RS encoding is broken down per rank from ``encode_group(..., stats=...)``: the codec's wall and thread
CPU time, the exchange (the per-chunk allgather), file read / write / commit; "codec work only" GB/s is
checkpoint bytes per rank / codec time of that rank (the median and the slowest rank are reported).

Ratios against alternatives measured in the same run: RS vs XOR encoding, RS encoding vs the L2 partner
copy (the cheapest node-loss protection), recovery vs encoding time per level.

Runs without ULFM's failure detector: nothing fails here, and a rank busy in a long NumPy call on an
oversubscribed machine would otherwise be declared dead for missing its heartbeats.

Usage: python benchmarks/bench_levels.py [--quick] [--size-mib N] [--ranks 8|4] [--node-size RANKS/4]
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


def _worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    from ftkit.storage._stream import AtomicWriter
    from ftkit.storage.groupcode.erasure import assess_group, encode_group, rebuild_group
    from ftkit.storage.groupcode.partner_copy import assess_partner, partner_copy, rebuild_partner
    from ftkit.topology import detect_node_ids, plan_topology

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    topo = plan_topology(detect_node_ids(comm), rank, group_size=4, ckpt_dir=args.dir)
    gi = topo.group_index()
    group = comm.Split(gi, topo.group_of().index(rank))
    local = topo.local_dir
    size = args.size_mib << 20
    data = local / f"r{rank}.ckpt"
    copy = local / f"r{rank}.partner"
    rs_par = local / f"r{rank}.rs"
    xor_par = local / f"r{rank}.xor"
    pfs = Path(args.dir) / "pfs" / f"r{rank}.ckpt"
    results: dict[str, float] = {}

    def timed(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        results[name] = comm.allreduce(dt, op=MPI.MAX)

    payload = np.random.default_rng(rank).integers(0, 256, size, dtype=np.uint8)
    # Warm up: load the codec's compiled kernels (numba cache) before anything is timed.
    from ftkit.storage.groupcode.plan import rs_code

    warm = [np.zeros(4096, np.uint8) for _ in range(group.Get_size())]
    rs_code(group.Get_size()).encode_into(warm, [np.empty(4096, np.uint8)], parity_indices=[0])

    def write_l1() -> None:
        with AtomicWriter(data) as w:
            for off in range(0, size, 16 << 20):
                w.pwrite(payload[off:off + (16 << 20)], off)

    def write_l4() -> None:
        pfs.parent.mkdir(parents=True, exist_ok=True)
        with AtomicWriter(pfs) as w:
            w.pwrite(payload, 0)

    timed("l1_write", write_l1)
    timed("l2_partner_copy", lambda: partner_copy(group, data, copy))
    rs_stats: dict[str, float] = {}
    timed("l3_rs_encode", lambda: encode_group(group, data, rs_par, code="rs", tag="b", stats=rs_stats))
    all_stats = comm.gather(rs_stats, root=0)
    timed("l3_xor_encode", lambda: encode_group(group, data, xor_par, code="xor", tag="b"))
    timed("l4_pfs_copy", write_l4)

    # Encode work only: the codec computing one parity row from k chunks, as each member does.
    from ftkit.storage.groupcode.plan import rs_code

    k = group.Get_size()
    z = int(rs_stats["chunk_bytes"])  # the chunk size encode_group used
    chunks = [payload[:z].copy() for _ in range(k)]
    out = np.empty(z, np.uint8)
    code = rs_code(k)

    def kernel() -> None:
        for _ in range(0, size, z):
            code.encode_into(chunks, [out], parity_indices=[group.Get_rank()])

    timed("l3_rs_kernel", kernel)

    # One node lost: node 1's directory (its ranks' data, partner copies, parity files).
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(topo.local_dir_of(1))
    comm.Barrier()

    def rec_l2() -> None:
        plan = assess_partner(group, data, copy)
        rebuild_partner(group, plan, data, copy)

    def rec_rs() -> None:
        plan = assess_group(group, data, rs_par, tag="b")
        rebuild_group(group, plan, data, rs_par)

    timed("l2_recover", rec_l2)
    if rank == 0:
        for p in topo.local_dir_of(1).glob("*"):
            p.unlink()
    comm.Barrier()
    timed("l3_rs_recover", rec_rs)
    if rank == 0:
        for p in topo.local_dir_of(1).glob("*"):
            p.unlink()
    comm.Barrier()

    def rec_xor() -> None:
        plan = assess_group(group, data, xor_par, tag="b")
        rebuild_group(group, plan, data, xor_par)

    timed("l3_xor_recover", rec_xor)
    ok = np.array_equal(np.fromfile(data, np.uint8), payload)
    ok = comm.allreduce(ok, op=MPI.LAND)
    if rank == 0:
        results["recovered_bit_identical"] = bool(ok)
        results["rs_stats"] = all_stats  # type: ignore[assignment]
        print("RESULTS " + json.dumps(results), flush=True)


def _single_core_kernel(size_mib: int, k: int = 4) -> dict[str, float]:
    """GB/s of one process computing one member's parity row of RS(k, k) (what a rank does per byte of its
    checkpoint), and of a numpy copy of the same bytes, on an otherwise idle core (the alternative in the
    same run: the memory-bandwidth reference)."""
    import numpy as np

    from ftkit.storage.groupcode.plan import DEFAULT_MEMORY, MAX_CHUNK, chunk_size_for, rs_code

    size = min(size_mib, 64) << 20
    z = min(chunk_size_for(size, DEFAULT_MEMORY, 2 * (k + 1)), MAX_CHUNK)  # as encode_group
    chunks = [np.random.default_rng(j).integers(0, 256, z, dtype=np.uint8) for j in range(k)]
    out = np.empty(z, np.uint8)
    code = rs_code(k)
    code.encode_into(chunks, [out], parity_indices=[0])
    best_rs = best_copy = best_cpu = float("inf")
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(0, size, z):
            code.encode_into(chunks, [out], parity_indices=[1])
        best_rs = min(best_rs, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        t0 = time.perf_counter()
        for _ in range(0, size, z):
            np.copyto(out, chunks[0])
        best_copy = min(best_copy, time.perf_counter() - t0)
    return {"single_core_rs_row_gbps": round(size / best_rs / 1e9, 3),
            "single_core_rs_row_cpu_gbps": round(size / best_cpu / 1e9, 3),
            "single_core_numpy_copy_gbps": round(size / best_copy / 1e9, 3)}


def _breakdown(stats: list[dict[str, float]], nbytes: int) -> dict[str, float]:
    """Per-rank L3 RS encoding figures: median and slowest rank of each phase, GB/s of codec work."""
    import statistics

    out: dict[str, float] = {}
    for key in ("codec", "codec_cpu", "exchange", "read", "data_hash", "parity_hash", "write", "wait",
                "commit", "total"):
        vals = [s.get(key, 0.0) for s in stats]
        out[f"rs_{key}_s_median"] = round(statistics.median(vals), 4)
        out[f"rs_{key}_s_max"] = round(max(vals), 4)
    gb = nbytes / 1e9
    out["rs_codec_gbps_per_rank_median"] = round(gb / max(out["rs_codec_s_median"], 1e-9), 3)
    out["rs_codec_gbps_per_rank_slowest"] = round(gb / max(out["rs_codec_s_max"], 1e-9), 3)
    out["rs_codec_cpu_gbps_per_rank_median"] = round(gb / max(out["rs_codec_cpu_s_median"], 1e-9), 3)
    out["rs_chunk_mib"] = round(stats[0].get("chunk_bytes", 0.0) / (1 << 20), 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="32 MiB per rank instead of 256")
    ap.add_argument("--size-mib", type=int, default=None)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--node-size", type=int, default=None, help="ranks per emulated node (default ranks / 4)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.size_mib is None:
        args.size_mib = 32 if args.quick else 256
    if args.worker:
        _worker(args)
        return 0
    if args.node_size is None:
        args.node_size = max(1, args.ranks // 4)
    from ftkit.launch import run_mpi

    single = _single_core_kernel(args.size_mib)
    bench_dir = os.environ.get("FTKIT_BENCH_DIR")
    with tempfile.TemporaryDirectory(prefix="ftkit-bench-levels-", dir=bench_dir) as d:
        res = run_mpi(args.ranks, [sys.executable, __file__, "--worker", "--dir", d,
                                   "--size-mib", str(args.size_mib)],
                      timeout=1800, node_size=args.node_size, ulfm=False)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULTS ")), None)
    if line is None:
        print(res.stdout, res.stderr, file=sys.stderr)
        return 1
    r = json.loads(line[8:])
    brk = _breakdown(r.pop("rs_stats"), args.size_mib << 20)
    gb = args.size_mib * (1 << 20) / 1e9
    out = {"bench": "levels", "ranks": args.ranks, "node_size": args.node_size, "mib_per_rank": args.size_mib,
           **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()},
           "l3_rs_encode_gbps_per_rank": round(gb / r["l3_rs_encode"], 3),
           "l3_rs_kernel_gbps_per_rank": round(gb / r["l3_rs_kernel"], 3),
           "l3_xor_encode_gbps_per_rank": round(gb / r["l3_xor_encode"], 3),
           "ratio_rs_recover_over_encode": round(r["l3_rs_recover"] / r["l3_rs_encode"], 3),
           "ratio_xor_recover_over_encode": round(r["l3_xor_recover"] / r["l3_xor_encode"], 3),
           "ratio_l2_recover_over_copy": round(r["l2_recover"] / r["l2_partner_copy"], 3),
           "ratio_rs_over_xor_encode": round(r["l3_rs_encode"] / r["l3_xor_encode"], 3),
           "ratio_rs_encode_over_l2_copy": round(r["l3_rs_encode"] / r["l2_partner_copy"], 3),
           **brk, **single}
    print(f"{args.ranks} ranks, {args.ranks // args.node_size} emulated nodes, {args.size_mib} MiB per rank "
          "(slowest rank, seconds):")
    for key in ("l1_write", "l2_partner_copy", "l3_rs_encode", "l3_xor_encode", "l4_pfs_copy", "l3_rs_kernel",
                "l2_recover", "l3_rs_recover", "l3_xor_recover"):
        print(f"  {key:18s} {r[key]:8.3f} s")
    print(f"  L3 RS encode  {out['l3_rs_encode_gbps_per_rank']:.3f} GB/s per rank end to end; "
          "codec work only "
          f"(inside encode_group, chunks of {brk['rs_chunk_mib']} MiB): "
          f"{brk['rs_codec_gbps_per_rank_median']:.3f} GB/s per rank median wall, "
          f"{brk['rs_codec_gbps_per_rank_slowest']:.3f} slowest rank, "
          f"{brk['rs_codec_cpu_gbps_per_rank_median']:.3f} GB/s median on the CPU clock (target >= 1)")
    print("  per-rank seconds, median / slowest: " + ", ".join(
        f"{key} {brk[f'rs_{key}_s_median']:.3f}/{brk[f'rs_{key}_s_max']:.3f}"
        for key in ("codec", "codec_cpu", "exchange", "read", "write", "wait", "commit", "total")))
    print("  same codec loop outside encode_group (all ranks at once, no I/O, no MPI): "
          f"{out['l3_rs_kernel_gbps_per_rank']:.3f} GB/s per rank (slowest)")
    print(f"  L3 XOR encode {out['l3_xor_encode_gbps_per_rank']:.3f} GB/s per rank")
    print(f"  one process alone: RS(4,4) parity row {single['single_core_rs_row_gbps']:.3f} GB/s of "
          f"checkpoint data wall, {single['single_core_rs_row_cpu_gbps']:.3f} GB/s CPU clock "
          f"(numpy copy {single['single_core_numpy_copy_gbps']:.3f} GB/s)")
    print(f"  recovery / encoding: RS {out['ratio_rs_recover_over_encode']:.2f}x (target <= 3), "
          f"XOR {out['ratio_xor_recover_over_encode']:.2f}x, L2 {out['ratio_l2_recover_over_copy']:.2f}x")
    print(json.dumps(out))
    return 0 if r.get("recovered_bit_identical") else 1


if __name__ == "__main__":
    sys.exit(main())
