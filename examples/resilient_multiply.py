"""A distributed matrix multiply that survives a process killed in the middle of it.

Run (4 ranks, a 2 x 2 grid; rank 1 SIGKILLs itself at SUMMA step 3 of 8):

    ftkit launch -n 4 -- python examples/resilient_multiply.py --kill-rank 1 --kill-step 3

Every rank saves its pieces of A, B and C to a shared directory (ftkit checkpoint files; by default a fresh
directory under the configuration's ``glbl_dir``, which every node sees), then the multiply runs. When
rank 1 dies, the others notice (ULFM), stop waiting for it, read its pieces from the directory and finish;
at the end they agree on who died, recompute its part of C between them (checked by block checksums), and
the product lands on a new grid made of the survivors. Rank 0 of the survivors checks it against numpy.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import inject
from ftkit.config import Config, load_config
from ftkit.failure import exit_without_finalize
from ftkit.linalg import DistributedMatrix, ProcessGrid
from ftkit.linalg.resilient import resilient_pdgemm


def _new_store(config: str | None) -> str:
    """A fresh directory under the global (shared) directory: a node-local /tmp is not seen by other nodes."""
    if config is None and Path("ftkit.ini").exists():
        config = "ftkit.ini"
    glbl = (load_config(config) if config else Config()).glbl_dir
    Path(glbl).mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="ftkit_mm_", dir=glbl)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256, help="matrix order")
    p.add_argument("--nb", type=int, default=32, help="block size (one SUMMA step per block column)")
    p.add_argument("--kill-rank", type=int, default=1, help="rank to SIGKILL (-1: none)")
    p.add_argument("--kill-step", type=int, default=3, help="SUMMA step at which it dies")
    p.add_argument("--store", default=None,
                   help="shared directory for the protected inputs (default: a new one under glbl_dir)")
    p.add_argument("--config", default=None,
                   help="ftkit configuration whose glbl_dir holds the inputs (default: ftkit.ini if present)")
    a = p.parse_args()

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    grid = ProcessGrid.square(world)
    own_store = a.store is None
    store = a.store or world.bcast(_new_store(a.config) if rank == 0 else None)
    A = DistributedMatrix.random(grid, a.n, a.n, mb=a.nb, nb=a.nb, seed=1)
    B = DistributedMatrix.random(grid, a.n, a.n, mb=a.nb, nb=a.nb, seed=2)
    C = DistributedMatrix.zeros(grid, a.n, a.n, mb=a.nb, nb=a.nb)
    a_g, b_g = A.to_global(root=0), B.to_global(root=0)

    def on_step(step: int) -> None:
        if rank == a.kill_rank and step == a.kill_step:
            print(f"rank {rank}: SIGKILL at SUMMA step {step}", flush=True)
            inject.kill_self()

    res = resilient_pdgemm("N", "N", a.n, a.n, a.n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0,
                           store=Path(store), width=a.nb, on_step=on_step)
    got = res.C.to_global(root=0)  # a collective on the survivors' grid
    if rank == 0 and a_g is not None and b_g is not None:
        err = float(np.abs(got - a_g @ b_g).max())
        print(f"failed ranks {list(res.failed_ranks)}; state table\n{res.state_table}", flush=True)
        print(f"recomputed ({{dead: {{survivor: blocks}}}}): {res.reassigned}", flush=True)
        print(f"result on a {res.grid.nprow} x {res.grid.npcol} grid of survivors; max |C - A@B| = {err:.2e}",
              flush=True)
        print(f"RESULT ok={err <= 1e-11 * a.n}", flush=True)
    if own_store:
        res.comm.Barrier()
        if res.comm.Get_rank() == 0:
            shutil.rmtree(store, ignore_errors=True)
    if res.failed_ranks:
        exit_without_finalize(res.comm)  # Open MPI's MPI_Finalize may wait for the dead (ompi#11404)


if __name__ == "__main__":
    main()
