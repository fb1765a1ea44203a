"""Compressed against uncompressed L4 on a throttled global directory (issue 35's performance target).

usage: sudo python benchmarks/bench_l4_throttled.py [--quick] [--mib 64] [--ranks 2] [--rate-mb 200]
                                                    [--repeats 5] [--data heat,random] [--codecs none,zstd]

The global directory (``glbl_dir``) is an ext4 file system on a loop device whose reads and writes are
limited to ``--rate-mb`` MB/s (10^6 bytes) by a cgroup-v1 ``blkio`` throttle (``blkio.throttle.*_bps_device``)
that this script's process and its MPI ranks run in; the node-local directory (``ckpt_dir``) stays on the
machine's own disk, unthrottled. Root is needed for the loop device, the mount and the cgroup; all three are
removed at the end, also when the script is ended by SIGTERM, SIGINT or SIGHUP.

For each data set (the heat field, the CG iterates, an int32 mask, uniform random bytes: the arrays of
``bench_compression.py``) and codec (``none`` is ftkit's default inline L4, written straight from the
buffers; a codec writes the L1 file and then its compressed copy), in a shuffled order, ``--repeats`` times:

- **checkpoint**: one MPI job of ``--ranks`` ranks (one emulated node each) protects ``--mib`` MiB per rank
  and takes one L4 checkpoint; the time is from before ``checkpoint(level=4)`` to the end of ``finalize()``
  (the copy is then on the throttled disk and durable), the slowest rank's;
- **recovery**: the node-local directories are removed, dirty pages written back and the page cache dropped,
  then a second job recovers from L4 and checks every byte against the data it protected (a mismatch ends the
  benchmark with an error); the time is that of ``recover()``, the slowest rank's.

Printed: per (data, codec) the median and 90th percentile of each time, and ratios codec / none of the
medians and of the 90th percentiles. Targets (issue 35): L4 checkpoint with compression <= 0.8x the
uncompressed time on the heat field, <= 1.05x on random data (stored raw). One JSON line at the end.
``--quick``: 16 MiB per rank, 2 repeats, heat and random, none and zstd.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
CGROUP = Path("/sys/fs/cgroup/blkio")
DATASETS = ("heat", "cg", "mask", "random")
CODECS = ("none", "lz4", "zstd", "blosc")


# -- the worker (one MPI job) ------------------------------------------------------------------------------

def _array(kind: str, nbytes: int, rank: int) -> np.ndarray:
    sys.path.insert(0, str(HERE.parent))
    from bench_compression import datasets  # the same four data sets, same seeds

    arr = datasets(nbytes)[kind]
    if kind == "random":  # every rank different, still reproducible
        arr = np.random.default_rng(1000 + rank).integers(0, 256, arr.size, dtype=np.uint8)
    return np.ascontiguousarray(arr)


def worker(a: argparse.Namespace) -> None:
    from mpi4py import MPI

    import ftkit

    ckpt = ftkit.Checkpointer(str(Path(a.dir) / "ftkit.ini"))
    comm = ckpt.comm
    expected = _array(a.data, a.mib << 20, comm.rank)
    if a.phase == "write":
        arr = expected.copy()
        ckpt.protect("x", arr)
        comm.Barrier()
        t0 = time.perf_counter()
        ckpt.checkpoint(level=4)
        ckpt.finalize()
        took = time.perf_counter() - t0
    else:
        arr = np.zeros_like(expected)
        ckpt.protect("x", arr)
        if not ckpt.restarted:
            raise SystemExit("bench_l4_throttled: nothing to recover (the write job left no L4 checkpoint)")
        comm.Barrier()
        t0 = time.perf_counter()
        info = ckpt.recover()
        took = time.perf_counter() - t0
        if info.level != 4 or not np.array_equal(arr, expected):
            raise SystemExit(f"bench_l4_throttled: rank {comm.rank} recovered level {info.level}, "
                             f"bytes equal: {np.array_equal(arr, expected)}")
        ckpt.finalize()
    slowest = MPI.COMM_WORLD.reduce(took, op=MPI.MAX)
    if MPI.COMM_WORLD.rank == 0:
        (Path(a.dir) / f"{a.phase}.time").write_text(repr(slowest))


# -- the throttled directory -------------------------------------------------------------------------------

def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout.strip()


@contextlib.contextmanager
def throttled_dir(base: Path, rate: int, size_gib: int) -> Iterator[Path]:
    """Yield a mounted ext4 directory whose device this process may read/write at ``rate`` bytes/s."""
    if os.geteuid() != 0:
        raise SystemExit("bench_l4_throttled: needs root (loop device, mount, blkio cgroup)")
    if not (CGROUP / "blkio.throttle.write_bps_device").exists():
        raise SystemExit(f"bench_l4_throttled: no cgroup-v1 blkio throttle at {CGROUP}")
    image, mnt = base / "pfs.img", base / "pfs"
    group = CGROUP / f"ftkit-bench-{os.getpid()}"
    loop = ""
    mounted = False
    try:
        with open(image, "wb") as f:
            f.truncate(size_gib << 30)
        loop = _run("losetup", "--find", "--show", str(image))
        _run("mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop)
        mnt.mkdir()
        _run("mount", loop, str(mnt))
        mounted = True
        majmin = _run("lsblk", "-dno", "MAJ:MIN", loop).replace(" ", "")
        group.mkdir()
        for kind in ("read", "write"):
            (group / f"blkio.throttle.{kind}_bps_device").write_text(f"{majmin} {rate}\n")
        (group / "cgroup.procs").write_text(str(os.getpid()))
        yield mnt
    finally:
        if group.exists():
            (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        if mounted:
            _run("umount", str(mnt))
        if loop:
            _run("losetup", "-d", loop)
        image.unlink(missing_ok=True)


def _settle() -> None:
    """Write back dirty pages, drop the page cache, and wait (bounded) until nothing is under writeback."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        if int(meminfo["Writeback"].split()[0]) == 0:
            return
        time.sleep(0.05)


# -- the driver ----------------------------------------------------------------------------------------------

CONFIG = """[basic]
ckpt_dir = {d}/local
glbl_dir = {pfs}/global
meta_dir = {d}/meta
node_size = 1
group_size = 1
keep_last_ckpt = 1
[ftkit]
compression = {codec}
compression_level = {level}
"""


def _one(a: argparse.Namespace, pfs: Path, work: Path, data: str, codec: str) -> tuple[float, float]:
    from ftkit.launch import run_mpi

    d = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    try:
        (d / "ftkit.ini").write_text(CONFIG.format(d=d, pfs=pfs, codec=codec, level=a.level))
        times = []
        for phase in ("write", "read"):
            _settle()
            if phase == "read":
                shutil.rmtree(d / "local", ignore_errors=True)  # the node-local copies are gone
            cmd = [sys.executable, str(HERE), "--worker", phase, "--dir", str(d), "--data", data,
                   "--mib", str(a.mib)]
            res = run_mpi(a.ranks, cmd, timeout=600, node_size=1, ulfm=False, cwd=d)
            if res.returncode != 0:
                raise SystemExit(f"bench_l4_throttled: {phase} job of {data}/{codec} failed "
                                 f"(rc {res.returncode}):\n{res.stderr[-3000:]}")
            times.append(float((d / f"{phase}.time").read_text()))
        return times[0], times[1]
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(pfs / "global", ignore_errors=True)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(f"bench_l4_throttled: ended by signal {signum}")


def _stats(xs: list[float]) -> tuple[float, float]:
    return float(np.median(xs)), float(np.percentile(xs, 90))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=("write", "read"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="16 MiB per rank, 2 repeats, heat/random, none/zstd")
    ap.add_argument("--mib", type=int, default=64, help="MiB of checkpoint data per rank (default 64)")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks, one emulated node each (default 2)")
    ap.add_argument("--rate-mb", type=float, default=200.0, help="throttle in MB/s (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per (data, codec) (default 5)")
    ap.add_argument("--data", default=",".join(DATASETS), help=f"comma list of {', '.join(DATASETS)}")
    ap.add_argument("--codecs", default=",".join(CODECS), help=f"comma list of {', '.join(CODECS)}")
    ap.add_argument("--level", type=int, default=3, help="compression level (default 3)")
    ap.add_argument("--seed", type=int, default=35, help="seed of the run order")
    a = ap.parse_args()
    if a.worker:
        a.phase = a.worker
        worker(a)
        return 0
    if a.quick:
        a.mib, a.repeats, a.data, a.codecs = 16, 2, "heat,random", "none,zstd"
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # unmount and detach on the way out
        signal.signal(sig, _raise_exit)
    data = a.data.split(",")
    codecs = a.codecs.split(",")
    if bad := [x for x in data if x not in DATASETS] + [c for c in codecs if c not in CODECS]:
        ap.error(f"unknown data set or codec: {', '.join(bad)}")
    if "none" not in codecs:
        codecs.insert(0, "none")  # the ratios need the uncompressed baseline
    cases = [(x, c) for x in data for c in codecs] * a.repeats
    random.Random(a.seed).shuffle(cases)
    need_gib = max(2, -(-(a.ranks * a.mib * 3) // 1024) + 1)
    ckpt_t: dict[tuple[str, str], list[float]] = {}
    rec_t: dict[tuple[str, str], list[float]] = {}
    print(f"# {a.ranks} ranks x {a.mib} MiB, glbl_dir throttled to {a.rate_mb:g} MB/s, {len(cases)} runs; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ftkit-bench-l4thr-") as tmp, \
            throttled_dir(Path(tmp), int(a.rate_mb * 1e6), need_gib) as pfs:
        work = Path(tmp) / "work"
        work.mkdir()
        for i, (x, c) in enumerate(cases, 1):
            w, r = _one(a, pfs, work, x, c)
            ckpt_t.setdefault((x, c), []).append(w)
            rec_t.setdefault((x, c), []).append(r)
            print(f"  [{i}/{len(cases)}] {x:6s} {c:5s} checkpoint {w:.3f} s, recovery {r:.3f} s", flush=True)
    rows = []
    print(f"\n{'data':6s} {'codec':5s} {'ckpt med':>9s} {'p90':>7s} {'x none':>7s} {'p90 x':>6s}  "
          f"{'recov med':>9s} {'p90':>7s} {'x none':>7s} {'p90 x':>6s}")
    for x in data:
        base_w, base_r = _stats(ckpt_t[(x, "none")]), _stats(rec_t[(x, "none")])
        for c in codecs:
            w, r = _stats(ckpt_t[(x, c)]), _stats(rec_t[(x, c)])
            row = {"data": x, "codec": c, "ckpt_median_s": w[0], "ckpt_p90_s": w[1],
                   "ckpt_ratio_median": w[0] / base_w[0], "ckpt_ratio_p90": w[1] / base_w[1],
                   "recovery_median_s": r[0], "recovery_p90_s": r[1],
                   "recovery_ratio_median": r[0] / base_r[0], "recovery_ratio_p90": r[1] / base_r[1]}
            rows.append(row)
            print(f"{x:6s} {c:5s} {w[0]:9.3f} {w[1]:7.3f} {row['ckpt_ratio_median']:7.2f} "
                  f"{row['ckpt_ratio_p90']:6.2f}  {r[0]:9.3f} {r[1]:7.3f} "
                  f"{row['recovery_ratio_median']:7.2f} "
                  f"{row['recovery_ratio_p90']:6.2f}")
    print(json.dumps({"bench": "l4_throttled", "ranks": a.ranks, "mib": a.mib, "rate_mb": a.rate_mb,
                      "repeats": a.repeats, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
