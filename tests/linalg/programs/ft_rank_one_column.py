"""Error-free FT_PDSYRK / FT_PDSYR2K equal PDSYRK / PDSYR2K bit for bit when a tile of C is one column wide.

usage: ft_rank_one_column.py  (4 ranks: a 1 x 4 grid)

The case of ``ft_pblas3_campaign.py 1 4 --seed 103`` trial 390: C's submatrix of order 3 at (3, 2) of a 7 x 5
matrix in 2 x 2 blocks whose column blocks start on process column 3, so process column 1 holds one column
(its local array is one column wide) and its tile of the "U" triangle is 3 x 1; op(A) = A.T with k = 5 rows
of A at (3, 2) in 5 x 5 blocks (split by a block boundary); ``bs = 5``. The tile's local GEMM is a
matrix-vector product, whose rounding depends on the operands' memory layout, and the checked routines'
A panels carry checksum rows under the tile's rows. Every flag combination of both routines, float64,
three random fillings each. Rank 0 prints ``CASE ...`` per case, ``FAIL ...`` per mismatch and
``DONE cases=N failures=F``.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg

N, K, IA, JA, IC, JC = 3, 5, 3, 2, 3, 2


def run_case(grid: linalg.ProcessGrid, routine: str, uplo: str, trans: str, seed: int) -> bool:
    """Run the plain and the checked routine on copies of one case; True if C is the same bit for bit on
    every process."""
    rng = np.random.default_rng(seed)
    rows, cols = (N, K) if trans == "N" else (K, N)
    mats = []
    for _ in range(1 if routine == "pdsyrk" else 2):
        g = rng.uniform(-0.5, 0.5, (IA + rows + 1, JA + cols + 2))
        g[IA:IA + rows, JA:JA + cols] = rng.standard_normal((rows, cols)) * 1e8
        mats.append(linalg.DistributedMatrix.from_global(grid, g, mb=5, nb=5, csrc=3))
    c = rng.uniform(-0.5, 0.5, (IC + N + 1, JC + N))
    c[IC:IC + N, JC:JC + N] = rng.standard_normal((N, N)) * 1e15
    plain, checked = (linalg.DistributedMatrix.from_global(grid, c, mb=2, nb=2, csrc=3) for _ in range(2))
    ops: list[object] = [mats[0], IA, JA] if routine == "pdsyrk" else [mats[0], IA, JA, mats[1], IA, JA]
    getattr(linalg, routine)(uplo, trans, N, K, 0.5, *ops, 0.5, plain, IC, JC)
    rep = getattr(linalg, "ft_" + routine)(uplo, trans, N, K, 0.5, *ops, 0.5, checked, IC, JC, bs=5,
                                           tol="statistical")
    same = np.array_equal(plain.local, checked.local) and rep.detected == 0
    return bool(grid.comm.allreduce(int(same), op=MPI.MIN))


def main() -> int:
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, 1, 4)
    cases = failures = 0
    for routine in ("pdsyrk", "pdsyr2k"):
        for uplo in "UL":
            for trans in "NTC":
                for seed in range(3):
                    ok = run_case(grid, routine, uplo, trans, seed)
                    cases += 1
                    failures += not ok
                    if grid.rank == 0:
                        print(f"CASE ft_{routine} {uplo}{trans} seed={seed} {'ok' if ok else 'differs'}")
                        if not ok:
                            print(f"FAIL ft_{routine} {uplo}{trans} seed={seed}: error-free result differs "
                                  "from the plain routine's (not bit for bit)", flush=True)
    if grid.rank == 0:
        print(f"DONE cases={cases} failures={failures}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
