"""The resilient_ level-3 routines with protected operands against the same calls given a store, on one grid.

usage: resilient_protected.py NPROW NPCOL --dir DIR

For every multiplying routine (PDSYMM, PDTRSM, PDTRMM, PDSYRK, PDSYR2K) and a few flag sets, with submatrix
offsets and sizes that do not divide the blocks: one call given the store directory (the routine builds and
saves its operands itself), then the routine's protector and two calls with its handle (reused). Every rank
prints ``SAME <routine> <flags>`` when the three results' local arrays are equal bit for bit, else
``DIFF ...``, and ``FILES <routine> <n>`` with the number of files the handle left in the store (its saved
pieces) before it is released.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import linalg

p = argparse.ArgumentParser()
p.add_argument("nprow", type=int)
p.add_argument("npcol", type=int)
p.add_argument("--dir", required=True)
a = p.parse_args()
grid = linalg.ProcessGrid(MPI.COMM_WORLD, a.nprow, a.npcol)
n, nb = 29, 4
A = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
A.local[...] = A.local / n + 2.0 * (A.global_rows()[:, None] == A.global_cols()[None, :])  # TRSM: well posed
B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
C = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
store = Path(a.dir)
m1, m2 = n - 3, n - 6  # sizes not multiples of nb


def case(routine: str, flags: str) -> tuple[tuple[object, ...], tuple[object, ...], linalg.DistributedMatrix]:
    """The call's arguments, the protector's, and the matrix the call writes (fresh copies per call)."""
    if routine in ("pdtrsm", "pdtrmm"):
        out = B.copy()
        return (*flags, m1, m2, 1.5, A, 1, 0, out, 2, 3), (*flags, m1, m2, A, 1, 0, out, 2, 3), out
    out = C.copy()
    if routine == "pdsymm":
        return ((*flags, m1, m2, 1.5, A, 0, 1, B, 2, 1, 0.5, out, 1, 2),
                (*flags, m1, m2, A, 0, 1, B, 2, 1, out, 1, 2), out)  # fmt: skip
    if routine == "pdsyrk":
        return (*flags, m1, m2, -0.5, A, 1, 2, 0.5, out, 2, 1), (*flags, m1, m2, A, 1, 2, out, 2, 1), out
    return ((*flags, m1, m2, 1.5, A, 1, 2, B, 0, 3, 0.5, out, 2, 1),
            (*flags, m1, m2, A, 1, 2, B, 0, 3, out, 2, 1), out)  # fmt: skip


CASES = [("pdsymm", "LU"), ("pdsymm", "RL"), ("pdtrsm", "LUNN"), ("pdtrsm", "RLTU"), ("pdtrsm", "LLTN"),
         ("pdtrmm", "LUTN"), ("pdtrmm", "RLNU"), ("pdtrmm", "RUTU"), ("pdsyrk", "LN"), ("pdsyrk", "UT"),
         ("pdsyr2k", "LT"), ("pdsyr2k", "UN")]
for routine, flags in CASES:
    resilient = getattr(linalg, f"resilient_{routine}")
    args, _, out = case(routine, flags)
    resilient(*args, store=store)
    results = [out.local.copy()]
    args, pargs, out = case(routine, flags)
    with getattr(linalg, f"protect_{routine}")(*pargs, store=store) as ops:
        files = len([f for f in store.rglob("*.ftk") if f.name.endswith(f".{grid.rank}.ftk")])
        for _ in range(2):
            args2 = list(args)
            fresh = out.copy()
            args2[args.index(out)] = fresh
            resilient(*args2, store=ops)
            results.append(fresh.local.copy())
    same = all(np.array_equal(results[0], r) for r in results[1:])
    print(f"{'SAME' if same else 'DIFF'} {routine} {flags} rank={grid.rank}", flush=True)
    print(f"FILES {routine} {files} rank={grid.rank}", flush=True)
