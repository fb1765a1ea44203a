"""Solve ``A x = b`` (A symmetric positive definite) with a Cholesky factorization that survives faults.

The factorization is ``ft_pdpotrf``: every trailing update is checked by block checksums (a bit flip is found
and corrected on the fly) and, every few panels, the factorization's progress is checkpointed with ftkit's
``Checkpointer``. A rank killed in the middle of it costs a relaunch and the panels since the last checkpoint:
the relaunched run resumes there and ends with the failure-free factor, bit for bit.

Run (4 ranks, a 2 x 2 grid):

    ftkit launch -n 4 -- python examples/cholesky_solver.py --dir run_clean
    ftkit launch -n 4 -- python examples/cholesky_solver.py --dir run_flip --flip
    ftkit launch -n 4 -- python examples/cholesky_solver.py --dir run_kill --kill-rank 1 --kill-panel 7
    ftkit launch -n 4 -- python examples/cholesky_solver.py --dir run_kill      # resumes, same solution

Rank 0 prints what the checks found, where the factorization started (``resumed at panel k``), the residual
``||A x - b|| / (||A|| ||x||)`` and a digest of the solution: the clean and the killed-then-relaunched runs
print the same digest; the flipped run's solution agrees to rounding (the wrong element is set from its
block's checksums).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit
from ftkit import linalg
from ftkit.errors import ProcessFailure
from ftkit.failure import exit_without_finalize, revoke
from ftkit.inject import BitFlip, InjectionPlan, kill_self


def problem(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The SPD matrix and right-hand side (every rank builds the same ones)."""
    rng = np.random.default_rng(seed)
    r = rng.standard_normal((n, n))
    return r @ r.T / n + np.eye(n), rng.standard_normal((n, 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=240, help="matrix order")
    p.add_argument("--nb", type=int, default=16, help="block size (one panel per block column)")
    p.add_argument("--nprow", type=int, default=0, help="process rows (default: the most square grid)")
    p.add_argument("--dir", default="cholesky_run", help="directory of the checkpoints")
    p.add_argument("--ckpt-every", type=int, default=3, help="checkpoint every this many panels")
    p.add_argument("--flip", action="store_true", help="flip an exponent bit in the update of panel 2")
    p.add_argument("--kill-rank", type=int, default=-1, help="rank to SIGKILL (-1: none)")
    p.add_argument("--kill-panel", type=int, default=7, help="it dies right after this panel")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    root = Path(a.dir)
    config = ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global", meta_dir=root / "meta")
    ckpt = ftkit.Checkpointer(config=config, comm=comm)
    grid = (linalg.ProcessGrid(ckpt.comm, a.nprow, ckpt.comm.size // a.nprow) if a.nprow
            else linalg.ProcessGrid.square(ckpt.comm))
    a_glob, b_glob = problem(a.n, a.seed)
    A = linalg.DistributedMatrix.from_global(grid, a_glob, mb=a.nb, nb=a.nb)
    B = linalg.DistributedMatrix.from_global(grid, b_glob, mb=a.nb, nb=a.nb)
    # an exponent bit of rank 0's last trailing row, first trailing column (below the diagonal: in the factor)
    plan = (InjectionPlan([BitFlip(target="C", rank=0, step=-1, index=(-1, 0), bits=(56, 61))], seed=3)
            if a.flip else None)
    seen: list[int] = []

    def on_panel(k: int) -> None:
        seen.append(k)
        if k == a.kill_panel and grid.rank == a.kill_rank:
            print(f"rank {grid.rank} killing itself after panel {k}", flush=True)
            kill_self()

    try:
        report = linalg.ft_pdpotrf("L", a.n, A, 0, 0, ckpt=ckpt, ckpt_every=a.ckpt_every, inject=plan,
                                   inject_panel=2, on_panel=on_panel)
    except ProcessFailure as exc:
        # A peer died. The survivors that MPI's failure detector told say what happened and how to go on;
        # they revoke the communicators (the factorization its grid's), so every other rank's blocked call
        # fails at once too. All leave without MPI_Finalize, which would wait for the dead.
        if exc.failed_ranks:
            print(f"rank {grid.rank}: {exc}", flush=True)
        revoke(ckpt.comm)
        exit_without_finalize(None, 3)
    linalg.pdpotrs("L", a.n, 1, A, 0, 0, B, 0, 0)
    x = B.to_global()
    if grid.rank == 0:
        res = np.linalg.norm(a_glob @ x - b_glob) / (np.linalg.norm(a_glob) * np.linalg.norm(x))
        print(f"resumed at panel {seen[0] if seen else 'none'}")
        print(f"checks: {report.blocks_checked} blocks, detected {report.detected}, corrected "
              f"{report.corrected}" + (f", flip {plan.records}" if plan and plan.records else ""))
        print(f"residual {res:.3e}")
        print(f"solution digest {hashlib.sha256(x.tobytes()).hexdigest()[:16]}")
        np.save(root / "x.npy", x)
    ckpt.finalize()


if __name__ == "__main__":
    main()
