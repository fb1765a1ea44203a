"""Write paths for large L4 files on this machine's disk, side by side (issue 37, the 256 MiB L4 cell).

    .venv/bin/python benchmarks/fti/write_paths.py [--dir /tmp/ftkit-fti/paths] [--writers 4] [--mib 256]
        [--runs 15] [--methods buffered,writeback,direct,direct2,falloc] [--out FILE.jsonl]
    .venv/bin/python benchmarks/fti/write_paths.py --summarize FILE.jsonl...

One process per writer (as one rank per emulated node), no MPI: each holds MIB MiB from memory (the
benchmark programs' array), and at a common start writes it to its own new file in one directory and makes it
durable; a run's time is the slowest writer's (start to its last fsync). Methods:

* ``buffered``: ``write`` of the whole buffer + ``fsync`` (the floor);
* ``writeback``: ``write`` per 16 MiB + ``sync_file_range(WRITE)`` of each piece + ``fsync`` (the floor with
  ``--floor-writeback``; ftkit's writer submits from a helper thread);
* ``direct``: ``O_DIRECT``, each 4 MiB copied into an aligned staging buffer then written (copy included),
  + ``fsync`` (the size, the device cache);
* ``direct2``: ``O_DIRECT`` with 2 staging buffers: a thread writes one while the caller fills the other;
* ``falloc``: ``fallocate`` of the whole file first, then as ``writeback``.

Methods run interleaved (each round a new random order), the state made equal before each run as
:mod:`run_order`'s ``--settle full`` does (files removed, ``sync``, clean cache dropped, wait for no
Writeback); each row keeps Dirty/Writeback found before, the slowest writer's CPU seconds (process, all
threads) and the device's counters over the run. Files are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing as mp
import os
import random
import resource
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from devstat import device_now  # noqa: E402
from order_plan import quantile  # noqa: E402

from ftkit.storage._writeback import start_writeback  # noqa: E402

PIECE = 16 << 20
STAGE = 4 << 20
METHODS = ("buffered", "writeback", "direct", "direct2", "falloc")


def _write_buffered(fd: int, view: memoryview, piece: int | None) -> None:
    done = 0
    while done < len(view):
        n = os.write(fd, view[done:done + piece] if piece else view[done:])
        if piece:
            start_writeback(fd, done, n)
        done += n


def write_direct(fd: int, view: memoryview, threads: int, stage: int = STAGE) -> None:
    """Write ``view`` from offset 0 of ``fd`` (opened ``O_DIRECT``) in aligned pieces of ``stage`` bytes
    through ``threads`` staging buffers (1: copy then write; 2: a thread writes one while this thread fills
    the other). The tail is padded to the next 4 KiB and the file truncated. Also the direct floor of
    :mod:`floors` (no fsync here)."""
    bufs = [mmap.mmap(-1, stage) for _ in range(threads)]
    arrays = [np.frombuffer(b, np.uint8) for b in bufs]
    src = np.frombuffer(view, np.uint8)
    total = len(view)

    def put(i: int, at: int, n: int) -> None:
        padded = -(-n // 4096) * 4096
        mv = memoryview(bufs[i])[:padded]
        done = 0
        while done < padded:
            done += os.pwrite(fd, mv[done:], at + done)

    if threads == 1:
        for at in range(0, total, stage):
            n = min(stage, total - at)
            arrays[0][:n] = src[at:at + n]
            put(0, at, n)
    else:
        free = [threading.Semaphore(1) for _ in range(threads)]
        ready: list[tuple[int, int, int] | None] = []
        cv = threading.Condition()

        def writer() -> None:
            while True:
                with cv:
                    cv.wait_for(lambda: ready)
                    item = ready.pop(0)
                if item is None:
                    return
                put(*item)
                free[item[0]].release()

        t = threading.Thread(target=writer)
        t.start()
        for k, at in enumerate(range(0, total, stage)):
            i = k % threads
            free[i].acquire()
            n = min(stage, total - at)
            arrays[i][:n] = src[at:at + n]
            with cv:
                ready.append((i, at, n))
                cv.notify()
        with cv:
            ready.append(None)
            cv.notify()
        t.join()
    if total % 4096:
        os.ftruncate(fd, total)
    for a in arrays:
        del a
    del arrays
    for b in bufs:
        b.close()


def write_one(path: Path, view: memoryview, method: str) -> None:
    """Write ``view`` to the new file ``path`` with ``method`` (``direct@16``: 16 MiB staging buffers) and
    fsync it."""
    method, _, stage_mib = method.partition("@")
    stage = int(stage_mib) << 20 if stage_mib else STAGE
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if method.startswith("direct"):
        flags |= os.O_DIRECT
    fd = os.open(path, flags, 0o600)
    try:
        if method == "buffered":
            _write_buffered(fd, view, None)
        elif method == "writeback":
            _write_buffered(fd, view, PIECE)
        elif method == "falloc":
            os.posix_fallocate(fd, 0, len(view))
            _write_buffered(fd, view, PIECE)
        elif method == "direct":
            write_direct(fd, view, 1, stage)
        elif method == "direct2":
            write_direct(fd, view, 2, stage)
        else:
            raise ValueError(method)
        os.fsync(fd)
    finally:
        os.close(fd)


def worker(index: int, mib: int, directory: Path, conn, barrier) -> None:
    n = (mib << 20) // 8
    data = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(index)
    view = memoryview(data.view(np.uint8))
    conn.send("ready")
    while True:
        method = conn.recv()
        if method is None:
            return
        path = directory / f"w{index}.bin"
        barrier.wait(timeout=120)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        write_one(path, view, method)
        t1 = time.monotonic()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
        conn.send((t1 - t0, cpu))


def run(args: argparse.Namespace) -> None:
    from run_order import meminfo_mib, settle  # the driver's settle (imported here: floors.py imports us)

    directory = Path(args.dir)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    methods = args.methods.split(",")
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(args.writers)
    pipes, procs = [], []
    for i in range(args.writers):
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=(i, args.mib, directory, b, barrier), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    try:
        for a in pipes:
            if not a.poll(300):
                raise SystemExit("a writer did not start within 300 s")
            a.recv()
        rng = random.Random(args.seed)
        order = [m for _ in range(args.runs + 1) for m in rng.sample(methods, len(methods))]
        print(f"uptime: {os.getloadavg()}; {len(order)} runs ({len(methods)} warm-up)", flush=True)
        for k, method in enumerate(order):
            for f in directory.iterdir():
                f.unlink()
            state = settle("full", [], args.settle_timeout)
            found = meminfo_mib()
            d0 = device_now(str(directory))
            load = os.getloadavg()[0]
            for a in pipes:
                a.send(method)
            got = []
            for a in pipes:
                if not a.poll(600):
                    raise SystemExit("a writer did not finish within 600 s")
                got.append(a.recv())
            d1 = device_now(str(directory))
            row = {"method": method, "run": k - len(methods), "s": max(g[0] for g in got),
                   "writers_s": [round(g[0], 4) for g in got], "cpu_s": max(g[1] for g in got),
                   "dirty0": found["Dirty"], "wb0": found["Writeback"], "load": load,
                   "dirty_found": state["dirty_found"], "wb_found": state["wb_found"],
                   "settle_s": state["settle_s"], "settle_discmib": state["settle_discmib"],
                   "dev_wmib": round(d1[0] - d0[0], 1), "dev_discmib": round(d1[1] - d0[1], 1),
                   "dev_ms": d1[2] - d0[2], "mib": args.mib, "writers": args.writers}
            print(json.dumps(row), flush=True)
            if row["run"] >= 0:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    finally:
        for a in pipes:
            a.send(None)
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        shutil.rmtree(directory, ignore_errors=True)


def summarize(rows: list[dict]) -> str:
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    base = by.get("buffered")
    base_med = statistics.median(r["s"] for r in base) if base else float("nan")
    lines = ["| method | n | median s | p90 s | p90 ÷ own median | p90 ÷ buffered median | max s | "
             "cpu s (median) | load (median) |", "|" + "---|" * 9]
    for m, rs in by.items():
        xs = [r["s"] for r in rs]
        med, p90 = statistics.median(xs), quantile(xs, 0.9)
        lines.append(f"| {m} | {len(xs)} | {med:.3f} | {p90:.3f} | {p90 / med:.2f} | {p90 / base_med:.2f} | "
                     f"{max(xs):.3f} | {statistics.median(r['cpu_s'] for r in rs):.3f} | "
                     f"{statistics.median(r['load'] for r in rs):.1f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/ftkit-fti/paths")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=15, help="counted runs per method (one warm-up round first)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--settle-timeout", type=float, default=30.0)
    ap.add_argument("--out", default="/tmp/ftkit-fti/write_paths.jsonl")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL")
    args = ap.parse_args()
    if args.summarize:
        print(summarize([json.loads(line) for f in args.summarize for line in open(f) if line.strip()]))
        return 0
    run(args)
    print(summarize([json.loads(line) for line in open(args.out) if line.strip()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
