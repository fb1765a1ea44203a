"""Every rank makes the same illegal calls; each must raise the documented error on every rank, no hang.

usage: linalg_errors.py NPROW NPCOL

Prints ``rank R CASE NAME -> ErrorClass position P`` for every case, then runs a legal pdgemm (which would
hang if any rank had been left inside a collective) and prints ``rank R FINISHED ok=<bool>``.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import DescriptorError, FtkitError, GridError, PBLASArgumentError


def main() -> int:
    nprow, npcol = int(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    grid = linalg.ProcessGrid(comm, nprow, npcol)
    other = linalg.ProcessGrid(comm, nprow, npcol)
    A = linalg.DistributedMatrix.random(grid, 8, 6, mb=2, nb=3, seed=1)
    B = linalg.DistributedMatrix.random(grid, 6, 5, mb=3, nb=2, seed=2)
    C = linalg.DistributedMatrix.zeros(grid, 8, 5, mb=2, nb=2)
    S = linalg.DistributedMatrix.random(grid, 8, 8, mb=2, nb=2, seed=3)
    A_other = linalg.DistributedMatrix.random(other, 8, 6, mb=2, nb=3, seed=1)
    gemm = linalg.pdgemm
    symm = linalg.pdsymm
    cases = {
        "transa": lambda: gemm("X", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "transb": lambda: gemm("N", 1, 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "m<0": lambda: gemm("N", "N", -1, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "n<0": lambda: gemm("N", "N", 8, -5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "k float": lambda: gemm("N", "N", 8, 5, 6.0, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "alpha str": lambda: gemm("N", "N", 8, 5, 6, "1", A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "A not matrix": lambda: gemm("N", "N", 8, 5, 6, 1.0, np.zeros((8, 6)), 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "ia out of range": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 1, 0, B, 0, 0, 0.0, C, 0, 0),
        "ja<0": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 0, -1, B, 0, 0, 0.0, C, 0, 0),
        "k too big for A": lambda: gemm("N", "N", 8, 5, 7, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "transposed A too small": lambda: gemm("T", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "A on other grid": lambda: gemm("N", "N", 8, 5, 6, 1.0, A_other, 0, 0, B, 0, 0, 0.0, C, 0, 0),
        "jb out of range": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 1, 0.0, C, 0, 0),
        "beta None": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, None, C, 0, 0),
        "ic out of range": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 2, 0),
        "jc<0": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, -2),
        "bad algorithm": lambda: gemm("N", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, algorithm="x"),
        "symm side": lambda: symm("X", "U", 8, 5, 1.0, S, 0, 0, C, 0, 0, 0.0, C, 0, 0),
        "symm uplo": lambda: symm("L", "Q", 8, 5, 1.0, S, 0, 0, C, 0, 0, 0.0, C, 0, 0),
        "symm m<0": lambda: symm("L", "U", -8, 5, 1.0, S, 0, 0, C, 0, 0, 0.0, C, 0, 0),
        "symm A too small": lambda: symm("L", "U", 8, 5, 1.0, S, 1, 0, C, 0, 0, 0.0, C, 0, 0),
        "symm B on other grid": lambda: symm("L", "U", 8, 5, 1.0, S, 0, 0, A_other, 0, 0, 0.0, C, 0, 0),
        "symm ic": lambda: symm("L", "U", 8, 5, 1.0, S, 0, 0, C, 0, 0, 0.0, C, 0, 1),
        "grid too big": lambda: linalg.ProcessGrid(comm, nprow + 1, npcol),
        "grid zero": lambda: linalg.ProcessGrid(comm, 0, 1),
        "grid order": lambda: linalg.ProcessGrid(comm, 1, 1, order="Z"),
        "block size 0": lambda: linalg.DistributedMatrix.zeros(grid, 4, 4, mb=0, nb=2),
        "rsrc outside grid": lambda: linalg.DistributedMatrix.zeros(grid, 4, 4, mb=2, nb=2, rsrc=nprow),
        "from_global 1-D": lambda: linalg.DistributedMatrix.from_global(grid, np.zeros(4), mb=2, nb=2),
    }
    for name, call in cases.items():
        try:
            call()
        except (PBLASArgumentError, GridError, DescriptorError) as exc:
            pos = getattr(exc, "position", "-")
            print(f"rank {rank} CASE {name} -> {type(exc).__name__} position {pos} | {exc}", flush=True)
        except FtkitError as exc:  # pragma: no cover - reported as a wrong class by the test
            print(f"rank {rank} CASE {name} -> {type(exc).__name__} position - | {exc}", flush=True)
        else:
            print(f"rank {rank} CASE {name} -> no error", flush=True)
    gemm("N", "N", 8, 5, 6, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0)
    got = C.to_global()
    ref = A.to_global() @ B.to_global()
    print(f"rank {rank} FINISHED ok={bool(np.allclose(got, ref))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
