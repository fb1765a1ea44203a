"""FT_PDTRSM on non-square grids (2 x 3 and 3 x 2 from 6 ranks), every flag combination.

usage: ft_trsm_grids.py (6 ranks)

The solve's checksums are multiplied where the solution's rows are (``T``'s column sums travel to the process
rows before the solve, the partial products are gathered after it), so every case runs on grids whose
process rows and columns differ in number, with offsets and block sizes that do not divide the sizes.
Cases, per grid and flag combination (side, uplo, transa, diag): error-free (B is PDTRSM's result bit for
bit, nothing flagged); one flip in the solution (bit 61 of an element below 1 in magnitude: it shrinks to
nearly 0) on one rank, located at that element and fixed to rounding; one flip in the solve's copy of the
triangle (a kept off-diagonal element) and one in ``alpha B`` before the solve, on other ranks: the flagged
column segments solved again, the result PDTRSM's bit for bit. Rank 0 prints ``CASE ...`` / ``FAIL ...``
lines and ``DONE failures=F``. Then the same four cases at offset 0 with B blocked as A (``ALIGNED``: T's
piece is A's own local piece, copied out and summed in one pass) for flag combinations that do not transpose
T.
"""

from __future__ import annotations

import itertools

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg.descriptor import BlockCyclic1D
from ftkit.linalg.pblas._redistribute import same_layout
from ftkit.linalg.pblas._tri_sweep import tri_cols

M, N, ALPHA = 37, 29, 0.5
IA, JA, IB, JB = 5, 3, 4, 6
#: Offsets 0 and B's blocks A's: T's piece is A's own local piece (side L "N", side R "T": T not transposed).
ALIGNED = ["LLNN", "LUNU", "RLTN", "RUTU"]


def _maps(B: linalg.DistributedMatrix, side: str, ib: int, jb: int) -> tuple[BlockCyclic1D, BlockCyclic1D]:
    """The row and column maps of the array the solve works on (B's submatrix, or B.T's copy for "R")."""
    if side == "L":
        return B.row_map(ib, M), B.col_map(jb, N)
    g = B.grid
    return BlockCyclic1D(N, B.desc.nb, 0, 0, g.nprow), BlockCyclic1D(M, B.desc.mb, 0, 0, g.npcol)


def _kept(grid: linalg.ProcessGrid, rows: BlockCyclic1D, lower: bool,
          first: int) -> tuple[int, tuple[int, int]]:
    """A rank (from ``first`` on) and a local index of a kept off-diagonal element of its piece of ``T``
    whose error spoils many rows of the solution (an error in one row only would be located)."""
    cols = tri_cols(rows, grid.npcol)
    for rank in [*range(first, grid.size), *range(first)]:
        p, q = grid.coords(rank)
        r, c = rows.indices_on(p)[:, None], cols.indices_on(q)[None, :]
        hits = np.argwhere(r > c if lower else r < c)
        if hits.size:  # far from the end the substitution reaches last: many rows of X go wrong
            i, j = hits[0] if lower else hits[-1]
            return rank, (int(i), int(j))
    raise AssertionError("no process holds a kept off-diagonal element")


def main() -> int:
    failures = 0
    rng = np.random.default_rng(7)
    ka_max = max(M, N)
    # off-diagonal entries below 1 / ka and a diagonal of about 2 (or a unit one): every |X| stays below 1,
    # where bit 61 is set and its flip shrinks the element (a located error is then fixed to rounding)
    shape = (IA + ka_max + 2, JA + ka_max + 1)
    a = rng.uniform(-1, 1, shape) / ka_max + 2.0 * np.eye(*shape, JA - IA)
    b = rng.uniform(-1, 1, (IB + M + 3, JB + N + 2))
    a0 = a - 2.0 * np.eye(*shape, JA - IA) + 2.0 * np.eye(*shape)  # the same at offset 0
    for shape in ((2, 3), (3, 2)):
        grid = linalg.ProcessGrid(MPI.COMM_WORLD, *shape)
        A_at = {IA: linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8),
                0: linalg.DistributedMatrix.from_global(grid, a0, mb=8, nb=8)}
        every = ["".join(f) for f in itertools.product("LR", "UL", "NT", "NU")]
        for (ia, ja, ib, jb, bnb), flags in [*(((IA, JA, IB, JB, 5), f) for f in every),
                                             *(((0, 0, 0, 0, 8), f) for f in ALIGNED)]:
            side, uplo, transa, diag = flags
            where, A = "" if ia else " aligned", A_at[ia]
            ref = linalg.DistributedMatrix.from_global(grid, b, mb=8, nb=bnb)
            linalg.pdtrsm(side, uplo, transa, diag, M, N, ALPHA, A, ia, ja, ref, ib, jb)
            want = ref.to_global()
            rows, wcols = _maps(ref, side, ib, jb)
            transpose = (transa == "T") == (side == "L")
            lower = (uplo == "L") != transpose
            one_pass = same_layout(A, ia, ja, transpose, rows, tri_cols(rows, grid.npcol))
            t_rank, t_index = _kept(grid, rows, lower, 1)
            p, q = grid.coords(4)
            i, j = int(rows.indices_on(p)[2]), int(wcols.indices_on(q)[1])
            element = (i, j) if side == "L" else (j, i)  # in B's submatrix coordinates
            for name, flip, acts in (
                    ("error-free", None, []),
                    ("solution", BitFlip(target="C", rank=4, step=1, index=(2, 1), bit=61), ["located"]),
                    ("triangle", BitFlip(target="A", rank=t_rank, step=0, index=t_index, bit=61),
                     ["recomputed"]),
                    ("right-hand side", BitFlip(target="B", rank=5, step=0, index=(1, 2), bit=61),
                     ["recomputed"])):
                B = linalg.DistributedMatrix.from_global(grid, b, mb=8, nb=bnb)
                plan = InjectionPlan([flip]) if flip else None
                rep = linalg.ft_pdtrsm(side, uplo, transa, diag, M, N, ALPHA, A, ia, ja, B, ib, jb, bs=4,
                                       inject=plan)
                made = grid.comm.allreduce(len(plan.records)) if plan else 0
                got = B.to_global()
                got_acts = sorted({e.action for e in rep.events})
                elements = {e.element for e in rep.events if e.element}
                diff = float(np.max(np.abs(got - want)))
                ok = got_acts == acts and made == (flip is not None) and rep.blocks_checked > 0
                ok = ok and rep.uncorrected == 0 and rep.unchecked == 0 and one_pass == (ia == 0)
                if name == "solution":  # fixed from the checksums: to rounding (ka u |X|, with room)
                    ok = ok and elements == {element} and diff <= 1e-13 * float(np.max(np.abs(want)))
                else:
                    ok = ok and np.array_equal(got, want)
                if grid.rank == 0:
                    print(f"{'CASE' if ok else 'FAIL'} {shape[0]}x{shape[1]} {flags}{where} {name}: "
                          f"events={got_acts} elements={sorted(elements)} max_diff={diff:.1e}", flush=True)
                failures += not ok
        grid.free()
    if MPI.COMM_WORLD.rank == 0:
        print(f"DONE failures={failures}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
