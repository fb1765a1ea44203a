"""FT_PDPOTRF with two wrong elements in one column of a block (a pair the checksums cannot locate) on a 2x2
grid: the block column is recomputed and the factor is PDPOTRF's bit for bit.

usage: ft_potrf_recompute.py (4 ranks)

Cases: ``uplo`` L and U, an aligned layout (the work matrix is a copy of A) and a non-aligned one (``mb !=
nb``: a redistributed copy, so the recomputation redistributes A's values again). The flips are made after
panel 1's update (trailing piece from global row / column 16, nb = 8) on rank 1 (local trailing rows 9 and
12 are global rows 33 and 36 of block row 4, local column 0 global column 24 of block column 3) and, in the
``both`` cases, on rank 3 too (global rows 41, 44 of block row 5, column 24): two processes of block
column 3 recompute at once. Rank 0 prints ``CASE ...`` lines and ``DONE failures=F``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan

N = 96


def _case(grid: linalg.ProcessGrid, uplo: str, mb: int, ranks: tuple[int, ...]) -> tuple[bool, str]:
    r = np.random.default_rng(11).standard_normal((N, N))
    a = r @ r.T / N + np.eye(N)
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=mb, nb=8)
    linalg.pdpotrf(uplo, N, ref, 0, 0)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=mb, nb=8)
    flips = [BitFlip(target="C", rank=rk, step=1, index=(i, 0), bit=61) for rk in ranks for i in (9, 12)]
    plan = InjectionPlan(flips, seed=1)
    rep = linalg.ft_pdpotrf(uplo, N, A, 0, 0, inject=plan, inject_panel=1)
    made = grid.comm.allreduce(len(plan.records))
    acts = sorted(ev.action for ev in rep.events)
    same = bool(np.array_equal(A.to_global(), ref.to_global()))
    ok = made == 2 * len(ranks) and acts == ["recomputed"] * len(ranks) and rep.corrected == len(ranks)
    ok = ok and same
    blocks = sorted((ev.row_block, ev.col_block) for ev in rep.events)
    return ok, f"uplo={uplo} mb={mb} ranks={ranks} flips={made} events={acts} blocks={blocks} bitwise={same}"


def main() -> int:
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, 2, 2)
    failures = 0
    for uplo in "LU":
        for mb in (8, 6):
            for ranks in ((1,), (1, 3)):
                ok, line = _case(grid, uplo, mb, ranks)
                failures += not ok
                if grid.rank == 0:
                    print(("CASE " if ok else "FAIL ") + line, flush=True)
    if grid.rank == 0:
        print(f"DONE failures={failures}", flush=True)
    grid.free()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
