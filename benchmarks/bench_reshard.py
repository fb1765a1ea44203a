"""Benchmark elastic recovery: a checkpoint of 8 ranks x 64 MiB at L4 recovered on 6 and 4 ranks vs on 8.

usage: python benchmarks/bench_reshard.py [--quick] [--mib 64] [--ranks 8] [--to 6 4] [--cols 4096]
       [--grid2d] [--dir DIR] [--repeat N] [--old REF] [--profile]

1. 8 ranks (``--ranks``) protect a band of rows of a global float64 array (``--mib`` MiB each,
   ``--cols`` columns) with ``global_shape``/``offset`` plus a replicated step counter, and checkpoint at L4
   (written straight to ``glbl_dir``).
2. The same checkpoint is recovered by 8 ranks (same bands: the same-count path, every rank reads and
   verifies its own file) and by 6 and 4 ranks (new bands: elastic path), each in its own job. Reported per
   job: ``recover()`` time (slowest rank), bytes read / bytes the new ranks need (summed over the ranks).
   Targets: elastic <= 1.5x the same-count time, bytes read <= 1.05x bytes needed. With ``--grid2d`` the new
   ranks hold 2 x (n/2) column blocks instead of row bands (runs shorter than a digest chunk: reads more).
3. Export of the same checkpoint to HDF5 (``ftkit export``, one process) against writing the same global
   array with h5py directly from memory (same file system). Target: >= 0.7x the direct speed. One untimed
   export and direct write come first, then the timed pairs, alternating which of the two goes first: on
   this machine (a VM whose free memory goes back to the host) the first 512 MiB a fresh process writes
   costs up to 1 s more, whichever writer goes first.

The files stay in the page cache (the machine is shared: no cache drop), so times are memory-speed reads;
``--quick`` uses 8 MiB per rank. ``--repeat N`` runs every recovery job N times and alternates N exports
with N direct writes, reporting medians (the machine is shared: single runs are noisy). ``--old REF`` also
times the recoveries and the export with the ftkit of git revision ``REF`` (its ``src/`` unpacked with
``git archive`` into the work directory, first on ``PYTHONPATH``), on the same checkpoint in the same run.
``--profile`` prints the 12 costliest functions of one export and of rank 0's first recovery. Prints
human-readable lines and one JSON line.
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

import numpy as np


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 MiB per rank")
    ap.add_argument("--mib", type=int, default=64, help="MiB per rank in the checkpoint")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--to", type=int, nargs="+", default=[6, 4], help="rank counts to recover on")
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--grid2d", action="store_true", help="new ranks hold column blocks (2 x n/2 grid)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement (medians reported)")
    ap.add_argument("--old", default=None, metavar="REF", help="also time the ftkit of this git revision")
    ap.add_argument("--profile", action="store_true", help="print where one export and one recovery spend")
    ap.add_argument("--worker", choices=["write", "recover", "export"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.mib = 8
    return args


def _rows(args: argparse.Namespace) -> int:
    return args.mib * 2**20 // (8 * args.cols) * args.ranks


def _box(n: int, parts: int, i: int) -> tuple[int, int]:
    base, extra = divmod(n, parts)
    start = i * base + min(i, extra)
    return start, start + base + (1 if i < extra else 0)


def worker(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    import ftkit

    ckpt = ftkit.Checkpointer(str(Path(args.dir) / "ftkit.ini"), MPI.COMM_WORLD)
    comm = ckpt.comm
    rows, cols = _rows(args), args.cols
    grid2d = args.worker == "recover" and args.grid2d and comm.size % 2 == 0
    if grid2d:  # 2 x (n/2) grid of column blocks
        half = comm.size // 2
        r, c = _box(rows, 2, comm.rank // half), _box(cols, half, comm.rank % half)
    else:
        r, c = _box(rows, comm.size, comm.rank), (0, cols)
    u = np.empty((r[1] - r[0], c[1] - c[0]))
    step = np.zeros(1, np.int64)
    ckpt.protect("u", u, global_shape=(rows, cols), offset=(r[0], c[0]))
    ckpt.protect("step", step, global_shape=(1,), offset=(0,))
    if args.worker == "write":
        u[:] = np.arange(r[0], r[1])[:, None] * 1e-3 + np.arange(cols)[None, :]
        step[0] = 5
        ckpt.checkpoint(4)
        ckpt.wait()
        return 0
    comm.Barrier()
    prof = _profiler(args.profile and comm.rank == 0)
    t0 = time.perf_counter()
    info = ckpt.recover()
    dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    _report(prof, f"recover() on {comm.size} ranks, rank 0")
    want = np.arange(r[0], r[1])[:, None] * 1e-3 + np.arange(c[0], c[1])[None, :]
    ok = comm.allreduce(bool(np.array_equal(u, want) and step[0] == 5), op=MPI.LAND)
    stats = info.reshard
    # same count: the recovery chain verifies the whole file, then reads it again into the arrays
    read = comm.allreduce(stats.bytes_read if stats else 2 * (u.nbytes + step.nbytes))
    need = comm.allreduce(stats.bytes_needed if stats else u.nbytes + step.nbytes)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "seconds": dt, "read": read, "need": need, "ok": ok,
                          "elastic": stats is not None}), flush=True)
    return 0


def _profiler(on: bool):  # noqa: ANN202 - a cProfile.Profile or None
    if not on:
        return None
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    return prof


def _report(prof, what: str) -> None:  # noqa: ANN001
    if prof is None:
        return
    import io
    import pstats

    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    print(f"profile of {what}:\n" + "\n".join(out.getvalue().splitlines()[4:]), file=sys.stderr, flush=True)


def _config(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "ftkit.ini").write_text(f"[basic]\nckpt_dir = {d}/local\nglbl_dir = {d}/global\n"
                                 f"meta_dir = {d}/meta\ninline_l4 = 1\n[ftkit]\nfailure_timeout = 600\n")


def _job(args: argparse.Namespace, n: int, mode: str, d: Path, src: Path | None = None,
         profile: bool = False) -> dict | None:
    """One worker job (``n`` MPI ranks; ``n = 0``: one plain process) with the ftkit of ``src`` (None:
    this one); its JSON line."""
    import subprocess

    from ftkit.launch import run_mpi

    cmd = [sys.executable, __file__, "--worker", mode, "--dir", str(d), "--mib", str(args.mib), "--ranks",
           str(args.ranks), "--cols", str(args.cols), "--repeat", str(args.repeat)]
    cmd += (["--grid2d"] if args.grid2d else []) + (["--profile"] if profile else [])
    env = {"OPENBLAS_NUM_THREADS": "1"} | ({"PYTHONPATH": str(src)} if src else {})
    if n:
        r = run_mpi(n, cmd, timeout=1800, node_size=2, env=env)
    else:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, **env})
    if r.returncode != 0:
        sys.exit(f"{mode} on {n} ranks failed:\n{r.stdout}\n{r.stderr}")
    if profile:
        print(r.stderr, file=sys.stderr)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    return lines[0] if lines else None


def export_worker(args: argparse.Namespace) -> int:
    """Time ``--repeat`` exports to HDF5 and as many direct h5py writes of the same array, in pairs, after
    one untimed pair; the pairs alternate which goes first."""
    import h5py

    from ftkit.storage.export import export_checkpoint

    d, rows = Path(args.dir), _rows(args)
    full = np.arange(rows)[:, None] * 1e-3 + np.arange(args.cols)[None, :]
    out, direct = d / "export.h5", d / "direct.h5"

    def export_once(profile: bool = False) -> tuple[float, bool]:
        prof = _profiler(profile)
        t0 = time.perf_counter()
        export_checkpoint(d / "meta", "hdf5", out)
        dt = time.perf_counter() - t0
        _report(prof, "one export")
        with h5py.File(out) as f:
            same = bool(np.array_equal(f["u"][()], full))
        out.unlink()
        return dt, same

    def direct_once(profile: bool = False) -> tuple[float, bool]:  # profile: unused (one call shape)
        t0 = time.perf_counter()
        with h5py.File(direct, "w") as f:
            f.create_dataset("u", data=full)
        dt = time.perf_counter() - t0
        direct.unlink()
        return dt, True

    ok = export_once()[1] and direct_once()[1]  # one untimed pair: see the module's docstring
    runs = {"export": export_once, "direct": direct_once}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(args.repeat):
        for what in ("export", "direct") if i % 2 == 0 else ("direct", "export"):
            dt, same = runs[what](args.profile and i == 0)
            times[what].append(dt)
            ok = ok and same
    t_export, t_direct = times["export"], times["direct"]
    print(json.dumps({"export_s": float(np.median(t_export)), "direct_s": float(np.median(t_direct)),
                      "export_all": t_export, "direct_all": t_direct, "bytes": int(full.nbytes), "ok": ok}))
    return 0


def _old_tree(ref: str, d: Path) -> Path:
    """Unpack ``src/`` of git revision ``ref`` under ``d`` (no worktree, nothing in the repository)."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    dest = d / "old"
    dest.mkdir()
    tar = subprocess.run(["git", "-C", str(repo), "archive", ref, "src"], capture_output=True, check=True,
                         timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True, timeout=120)
    return dest / "src"


def _measure(args: argparse.Namespace, d: Path, src: Path | None) -> tuple[list[dict], dict]:
    """Recoveries (median of ``--repeat`` jobs each) and the export, with the ftkit of ``src``."""
    results = []
    for n in [args.ranks, *args.to]:
        runs = [_job(args, n, "recover", d, src, profile=args.profile and k == 0) for k in range(args.repeat)]
        assert all(runs)
        best = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]  # type: ignore[index]
        results.append({**best, "seconds_all": [r["seconds"] for r in runs]})  # type: ignore[index]
    exp = _job(args, 0, "export", d, src, profile=args.profile)
    assert exp is not None
    return results, exp


def _show(label: str, args: argparse.Namespace, results: list[dict], exp: dict) -> None:
    base = results[0]
    print(f"[{label}] checkpoint: {args.ranks} ranks x {args.mib} MiB at L4 ({_rows(args)} x {args.cols} "
          f"float64), medians of {args.repeat}")
    for res in results:
        kind = "elastic" if res["elastic"] else "same count"
        print(f"[{label}] recover on {res['ranks']:>2} ranks ({kind}): {res['seconds']:.3f} s = "
              f"{res['seconds'] / base['seconds']:.2f}x same-count; bytes read / needed = "
              f"{res['read'] / res['need']:.4f}; data ok: {res['ok']}")
    mib = exp["bytes"] / 2**20
    print(f"[{label}] export to HDF5: {exp['export_s']:.3f} s ({mib / exp['export_s']:.0f} MiB/s) vs h5py "
          f"direct {exp['direct_s']:.3f} s ({mib / exp['direct_s']:.0f} MiB/s): "
          f"{exp['direct_s'] / exp['export_s']:.2f}x the direct speed; data ok: {exp['ok']}")


def main() -> int:
    args = parse()
    if args.worker == "export":
        return export_worker(args)
    if args.worker:
        return worker(args)
    d = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_reshard_"))
    _config(d)
    try:
        old = _old_tree(args.old, d) if args.old else None
        _job(args, args.ranks, "write", d)
        out = {"mib": args.mib, "ranks": args.ranks, "grid2d": args.grid2d, "repeat": args.repeat}
        for label, src in [("new", None)] + ([(f"old {args.old}", old)] if old else []):
            results, exp = _measure(args, d, src)
            _show(label, args, results, exp)
            out[label] = {"recover": results, "export": exp}
        print(json.dumps(out))
    finally:
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
