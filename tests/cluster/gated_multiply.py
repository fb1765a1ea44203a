"""resilient_pdgemm with a gate, for host faults in the middle of a multiply (tests/cluster).

Every rank builds A, B (seeded) and C on a square-ish grid, protects the inputs under ``--store`` (the shared
directory) and multiplies; at SUMMA step ``--gate-at`` each rank creates ``DIR/held.<rank>`` and waits until
``DIR/open`` exists (at most ``--gate-max`` seconds), so a test can fault a host at a known step. Rank 0 of
the survivors prints ``failed [..]`` and ``RESULT ok=True|False`` (the product against numpy).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.failure import exit_without_finalize
from ftkit.linalg import DistributedMatrix, ProcessGrid
from ftkit.linalg.resilient import resilient_pdgemm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--nb", type=int, default=16)
    p.add_argument("--store", required=True)
    p.add_argument("--gate-at", type=int, default=3)
    p.add_argument("--gate-dir", required=True)
    p.add_argument("--gate-max", type=float, default=120.0)
    a = p.parse_args()
    world = MPI.COMM_WORLD
    grid = ProcessGrid.square(world)
    A = DistributedMatrix.random(grid, a.n, a.n, mb=a.nb, nb=a.nb, seed=1)
    B = DistributedMatrix.random(grid, a.n, a.n, mb=a.nb, nb=a.nb, seed=2)
    C = DistributedMatrix.zeros(grid, a.n, a.n, mb=a.nb, nb=a.nb)
    a_g, b_g = A.to_global(root=0), B.to_global(root=0)
    gate = Path(a.gate_dir)

    def on_step(step: int) -> None:
        if step == a.gate_at:
            (gate / f"held.{world.rank}").write_text(f"{os.uname().nodename} {os.getpid()}\n")
            deadline = time.monotonic() + a.gate_max
            while not (gate / "open").exists() and time.monotonic() < deadline:
                time.sleep(0.02)

    res = resilient_pdgemm("N", "N", a.n, a.n, a.n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0,
                           store=Path(a.store), width=a.nb, on_step=on_step)
    got = res.C.to_global(root=0)
    if res.comm.rank == 0 and a_g is not None and b_g is not None:
        err = float(np.abs(got - a_g @ b_g).max())
        print(f"failed {sorted(res.failed_ranks)}", flush=True)
        print(f"RESULT ok={err <= 1e-11 * a.n} err={err:.2e}", flush=True)
    if res.failed_ranks:
        exit_without_finalize(res.comm)


if __name__ == "__main__":
    main()
