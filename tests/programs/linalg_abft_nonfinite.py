"""ft_pdgemm with one non-finite or overflowing value in A (issue 13, defect 5), on a 2x2 grid.

``--poison nan|inf|1e300|none`` is written into A(3, 5) (global), so op(A)'s row 3 poisons the checksums of
the block row holding C's row 3. A bit flip is injected into C on rank 0 at local (1, 2) (the same block
row), and one on rank 3 (another block row, which must still be detected). Prints, on rank 0::

    REPORT checked=.. unchecked=.. total=.. detected=.. unchecked_blocks=[..] detected_blocks=[..]
    STRICT error=ABFTError unchecked=..      (the same call with unchecked_is_error=True)
"""

from __future__ import annotations

import argparse

from mpi4py import MPI

from ftkit.errors import ABFTError
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg import DistributedMatrix, ProcessGrid
from ftkit.linalg.abft import ft_pdgemm

p = argparse.ArgumentParser()
p.add_argument("--poison", default="nan")
a = p.parse_args()

world = MPI.COMM_WORLD
grid = ProcessGrid(world, 2, 2)
n, nb, bs = 64, 16, 16
A = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
B = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
if a.poison != "none" and grid.myrow == 0 and grid.mycol == 0:
    A.local[3, 5] = float(a.poison)  # global (3, 5): rows 0..15 and columns 0..15 live on (0, 0)


def run(strict: bool) -> object:
    C = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
    plan = InjectionPlan([BitFlip("C", rank=0, step=-1, index=(1, 2), bit=60),
                          BitFlip("C", rank=3, step=-1, index=(1, 2), bit=60)], seed=1)  # fmt: skip
    try:
        return ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, bs=bs, mode="detect",
                         inject=plan, unchecked_is_error=strict)  # fmt: skip
    except ABFTError as exc:
        return exc


rep = run(False)
strict = run(True)
if world.Get_rank() == 0:
    total = (n // bs) ** 2
    print(f"REPORT checked={rep.blocks_checked} unchecked={rep.unchecked} total={total} "
          f"detected={rep.detected} unchecked_blocks={rep.unchecked_blocks} "
          f"detected_blocks={rep.detected_blocks}", flush=True)  # fmt: skip
    if isinstance(strict, ABFTError):
        print(f"STRICT error=ABFTError unchecked={strict.report.unchecked}", flush=True)
    else:
        print(f"STRICT error=None unchecked={strict.unchecked}", flush=True)
