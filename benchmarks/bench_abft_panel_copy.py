"""A/B of the ABFT panel copy: pdgemm vs ft_pdgemm vs ft_pdgemm on its previous path, in one MPI job.

usage: python benchmarks/bench_abft_panel_copy.py [--quick] [--n 4096] [--nb 256] [--repeats 3]

4 ranks (2 x 2), OPENBLAS_NUM_THREADS=1, rotating order per repeat: ``pdgemm``; ``ft_pdgemm`` (rigorous),
whose checksums are computed straight into the panel slot by the exchange's fill callback (each A / B piece
copied once); ``ft_pdgemm`` through an exchange that hides ``accepts_fill`` (the previous path: an extended
piece is built first, then copied into the panel). Prints the CPU time of all ranks (load-insensitive), wall
time (slowest rank), median overheads vs pdgemm and one JSON line. ``--quick``: n = 2048.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--nb", type=int, default=256)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--quick", action="store_true", help="n=2048")
ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
args = ap.parse_args()
if args.quick:
    args.n = 2048

if not args.worker:
    from ftkit.launch import build_mpirun_command

    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    cmd = build_mpirun_command(
        4,
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--n",
            str(args.n),
            "--nb",
            str(args.nb),
            "--repeats",
            str(args.repeats),
        ],
        ulfm=False,
        env=env,
    )
    sys.exit(subprocess.run(cmd, env=dict(os.environ, **env), timeout=3000).returncode)

import numpy as np  # noqa: E402 (the launcher part must not need MPI)
from mpi4py import MPI  # noqa: E402 (the launcher part must not need MPI)

from ftkit import linalg  # noqa: E402 (the launcher part must not need MPI)
from ftkit.linalg.abft import ft_pdgemm  # noqa: E402 (the launcher part must not need MPI)
from ftkit.linalg.pblas._summa import AllgatherExchange  # noqa: E402 (the launcher part must not need MPI)

comm = MPI.COMM_WORLD
grid = linalg.ProcessGrid.square(comm)
n, nb = args.n, args.nb


class NoFill:  # hides accepts_fill: ft_pdgemm takes its previous path (extended piece, then panel copy)
    def __init__(self) -> None:
        self.inner = AllgatherExchange(buffers=2)

    def start(self, grid, step, a, b):  # type: ignore[no-untyped-def]
        return self.inner.start(grid, step, a, b)


A = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
C = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
C1 = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
C2 = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
legacy = NoFill()
runs = {
    "pdgemm": lambda: linalg.pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
    "ft_direct": lambda: ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C1, 0, 0),
    "ft_copy": lambda: ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C2, 0, 0, exchange=legacy),
}
cpu: dict[str, list[float]] = {k: [] for k in runs}
wall: dict[str, list[float]] = {k: [] for k in runs}
for fn in runs.values():
    fn()  # warm-up
names = list(runs)
for rep in range(args.repeats):
    order = names[rep % 3 :] + names[: rep % 3]
    for name in order:
        comm.Barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        runs[name]()
        w = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        c = comm.allreduce(time.process_time() - c0, op=MPI.SUM)
        cpu[name].append(c)
        wall[name].append(w)
    if comm.rank == 0:
        print(
            f"rep {rep}: " + ", ".join(f"{k} cpu {cpu[k][-1]:.2f}s wall {wall[k][-1]:.2f}s" for k in names),
            flush=True,
        )
ident = bool(
    comm.allreduce(int(np.array_equal(C.local, C1.local) and np.array_equal(C.local, C2.local)), op=MPI.MIN)
)
legacy.inner.release()
if comm.rank == 0:
    med = lambda xs: statistics.median(xs)  # noqa: E731
    res = {
        "n": n,
        "nb": nb,
        "repeats": args.repeats,
        "cpu": cpu,
        "wall": wall,
        "cpu_overhead_direct_median": med(
            [a / b - 1 for a, b in zip(cpu["ft_direct"], cpu["pdgemm"], strict=True)]
        ),
        "cpu_overhead_copy_median": med(
            [a / b - 1 for a, b in zip(cpu["ft_copy"], cpu["pdgemm"], strict=True)]
        ),
        "wall_overhead_direct_median": med(
            [a / b - 1 for a, b in zip(wall["ft_direct"], wall["pdgemm"], strict=True)]
        ),
        "wall_overhead_copy_median": med(
            [a / b - 1 for a, b in zip(wall["ft_copy"], wall["pdgemm"], strict=True)]
        ),
        "bit_identical": ident,
        "cpu_min": {k: min(v) for k, v in cpu.items()},
        "cpu_direct_vs_copy_median": med(
            [a / b - 1 for a, b in zip(cpu["ft_direct"], cpu["ft_copy"], strict=True)]
        ),
    }
    print(
        f"CPU overhead vs pdgemm (median of {args.repeats}): "
        f"direct {100 * res['cpu_overhead_direct_median']:+.1f}%, "
        f"previous copy path {100 * res['cpu_overhead_copy_median']:+.1f}%; wall direct "
        f"{100 * res['wall_overhead_direct_median']:+.1f}%, "
        f"copy {100 * res['wall_overhead_copy_median']:+.1f}%; "
        f"bit-identical {ident}"
    )
    print(
        "CPU min: "
        + ", ".join(f"{k} {v:.3f}s" for k, v in res["cpu_min"].items())
        + f"; direct vs copy (paired median) {100 * res['cpu_direct_vs_copy_median']:+.1f}%"
    )
    print(json.dumps(res))
