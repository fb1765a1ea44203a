"""Exercise ProcessGrid and DistributedMatrix on NPROW x NPCOL ranks; rank 0 prints CHECK lines.

usage: linalg_matrix.py NPROW NPCOL [ORDER]
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import GridError
from ftkit.linalg.descriptor import numroc


def main() -> int:
    nprow, npcol = int(sys.argv[1]), int(sys.argv[2])
    order = sys.argv[3] if len(sys.argv) > 3 else "R"
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, nprow, npcol, order=order)
    checks: dict[str, bool] = {}
    # Grid: coordinates, ranks, sub-communicators.
    me = (grid.myrow, grid.mycol)
    coords = comm.allgather(me)
    checks["coords unique"] = len(set(coords)) == nprow * npcol
    checks["rank_of inverse"] = all(grid.rank_of(*coords[r]) == r for r in range(grid.size))
    expect = divmod(comm.rank, npcol) if order == "R" else divmod(comm.rank, nprow)[::-1]
    checks["order"] = me == tuple(expect)
    checks["row comm"] = grid.row_comm.size == npcol and grid.row_comm.rank == grid.mycol
    checks["col comm"] = grid.col_comm.size == nprow and grid.col_comm.rank == grid.myrow
    rowmates = grid.row_comm.allgather(grid.myrow)
    checks["row comm same row"] = set(rowmates) == {grid.myrow}
    sq = linalg.ProcessGrid.square(comm)
    checks["square"] = sq.nprow * sq.npcol == comm.size and sq.nprow <= sq.npcol and \
        all(comm.size % r or r <= sq.nprow or comm.size // r < r for r in range(1, comm.size + 1))
    # A grid smaller than the communicator: the other ranks are outside and cannot hold matrices.
    small = linalg.ProcessGrid(comm, 1, 1)
    if comm.rank == 0:
        checks["partial grid"] = small.in_grid and small.comm.size == 1
    else:
        try:
            linalg.DistributedMatrix.zeros(small, 2, 2, mb=1, nb=1)
            checks["partial grid"] = False
        except GridError:
            checks["partial grid"] = not small.in_grid and small.comm == MPI.COMM_NULL
    # Matrices with odd shapes, blocks and sources.
    rng = np.random.default_rng(5)
    g = rng.standard_normal((23, 17))
    layouts = [(1, 1, 0, 0), (4, 3, nprow - 1, npcol - 1), (5, 7, 0, npcol - 1), (30, 30, 0, 0)]
    for mb, nb, rsrc, csrc in layouts:
        tag = f"mb={mb} nb={nb} src=({rsrc},{csrc})"
        M = linalg.DistributedMatrix.from_global(grid, g, mb=mb, nb=nb, rsrc=rsrc, csrc=csrc)
        checks[f"local F-order {tag}"] = M.local.flags.f_contiguous and M.local.shape == (
            numroc(23, mb, grid.myrow, rsrc, nprow), numroc(17, nb, grid.mycol, csrc, npcol))
        checks[f"lld {tag}"] = M.desc.lld == max(1, M.local.shape[0])
        checks[f"local entries {tag}"] = np.array_equal(M.local, g[np.ix_(M.global_rows(), M.global_cols())])
        checks[f"to_global all {tag}"] = np.array_equal(M.to_global(), g)
        got = M.to_global(root=grid.size - 1)
        checks[f"to_global root {tag}"] = (got is None) == (grid.rank != grid.size - 1) and \
            (got is None or np.array_equal(got, g))
        checks[f"getitem {tag}"] = M[22, 16] == g[22, 16] and M[0, 0] == g[0, 0] and M[7, 3] == g[7, 3]
        Mc = M.copy()
        Mc[7, 3] = 99.0
        checks[f"setitem+copy {tag}"] = Mc[7, 3] == 99.0 and M[7, 3] == g[7, 3]
        view = M.local_view(3, 2, 15, 11)
        rows = M.global_rows()
        cols = M.global_cols()
        sel_r, sel_c = (rows >= 3) & (rows < 18), (cols >= 2) & (cols < 13)
        checks[f"local_view {tag}"] = np.array_equal(view, M.local[np.ix_(sel_r, sel_c)]) and \
            np.shares_memory(view, M.local) if view.size else True
    Z = linalg.DistributedMatrix.zeros(grid, 9, 4, mb=2, nb=3)
    checks["zeros"] = np.array_equal(Z.to_global(), np.zeros((9, 4)))
    # random: same matrix whatever the grid or block sizes.
    R1 = linalg.DistributedMatrix.random(grid, 13, 11, mb=2, nb=5, seed=42).to_global()
    R2 = linalg.DistributedMatrix.random(grid, 13, 11, mb=6, nb=1, seed=42, rsrc=nprow - 1).to_global()
    R3 = linalg.DistributedMatrix.random(grid, 13, 11, mb=6, nb=1, seed=43).to_global()
    checks["random reproducible"] = np.array_equal(R1, R2) and not np.array_equal(R1, R3)
    checks["random range"] = bool(np.all(np.abs(R1) <= 1.0)) and R1.std() > 0.3
    allchecks = comm.allgather(checks)
    if comm.rank == 0:
        for name in checks:
            ok = all(c[name] for c in allchecks)
            print(f"CHECK {name}: {'ok' if ok else 'FAILED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
