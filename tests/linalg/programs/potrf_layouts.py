"""PDPOTRF called again and again in one process on layouts that differ in one parameter each (n, nb, the
offsets, the block cyclic source, uplo), and on the first one again: the per-layout tables are made once per
layout and process and reused by every later call (``cholesky._steps._layout``), so a table of one layout
used for another would show here.

usage: potrf_layouts.py NPROW NPCOL (NPROW * NPCOL ranks)

Each call's factor is compared on rank 0 with numpy's Cholesky factor of the same matrix (``allclose``), the
other triangle bit for bit unchanged, and the repeated first layout with its first factor bit for bit. Rank 0
prints ``FAIL ...`` per failed case and ``DONE cases=C failures=F``.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.cholesky import _steps

# (n, nb, ia, rsrc/csrc, uplo, size of A)
LAYOUTS = [(61, 8, 0, 0, "L", 61), (61, 8, 0, 0, "U", 61), (64, 8, 0, 0, "L", 64), (61, 6, 0, 0, "L", 61),
           (61, 8, 3, 0, "L", 70), (61, 8, 8, 0, "L", 70), (61, 8, 0, 1, "L", 61), (61, 8, 0, 0, "L", 61)]


def main() -> None:
    pr, pc = int(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    failures, first = [], None
    for case, (n, nb, ia, src, uplo, size) in enumerate(LAYOUTS):
        x = np.random.default_rng(case).uniform(-1, 1, (size, size))
        a_g = x @ x.T + size * np.eye(size)
        if case == len(LAYOUTS) - 1:
            a_g = np.random.default_rng(0).uniform(-1, 1, (size, size))
            a_g = a_g @ a_g.T + size * np.eye(size)  # the first case's matrix: its factor bit for bit
        A = linalg.DistributedMatrix.from_global(grid, a_g, mb=nb, nb=nb, rsrc=src % pr, csrc=src % pc)
        linalg.pdpotrf(uplo, n, A, ia, ia)
        got = A.to_global()
        if comm.rank:
            continue
        sub = a_g[ia:ia + n, ia:ia + n]
        ref = np.linalg.cholesky(sub)
        tri = np.tril if uplo == "L" else np.triu
        mine = tri(got[ia:ia + n, ia:ia + n])
        if not np.allclose(mine, ref if uplo == "L" else ref.T, rtol=1e-12, atol=1e-12):
            failures.append(f"FAIL case={case} factor differs from numpy's")
        untouched = ~np.zeros_like(a_g, dtype=bool)
        untouched[ia:ia + n, ia:ia + n] = ~tri(np.ones((n, n), dtype=bool))
        if not np.array_equal(got[untouched], a_g[untouched]):
            failures.append(f"FAIL case={case} the other triangle or the rest of A changed")
        if case == 0:
            first = got.tobytes()
        elif case == len(LAYOUTS) - 1 and got.tobytes() != first:
            failures.append(f"FAIL case={case} the first layout again: not its first factor bit for bit")
    layouts = _steps._layout.cache_info().currsize  # noqa: SLF001 - the cache under test
    if comm.rank == 0:
        if layouts != len(LAYOUTS) - 2:  # U is factored as a redistributed L; the last repeats the first
            failures.append(f"FAIL cached layouts={layouts}, expected {len(LAYOUTS) - 2}")
        print("\n".join(failures))
        print(f"DONE cases={len(LAYOUTS)} failures={len(failures)}", flush=True)


if __name__ == "__main__":
    main()
