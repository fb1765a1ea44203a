"""FT_PDPOTRF on non-square grids (2 x 3 and 3 x 2 from 6 ranks): the rows of P that carry a process's
checksums are copied out of the panel (no process row's piece matches its columns there), and a block column
that a process cannot correct is recomputed, whether that process owns the diagonal block or not. From 4
ranks, on 2 x 2, where only the diagonal processes send rows of P down their process columns: flips in
what they send and receive (:func:`_square_cases`).

usage: ft_potrf_grids.py (6 ranks, or 4)

Cases, per grid and ``uplo``: error-free (the factor is PDPOTRF's bit for bit, no event); one flip after
panel 1's update (located and corrected); a flip in the rows of panel 1 a process's columns multiply, one
that came straight from another process row and one of its own (restored from its row sum before the
product) and in the rows it received along its process row (the
product's left operand: each element it spoiled located by the carried checksums); two flips in one column
of a segment (local trailing rows 9 and 12, column 0, after panel 1: nb = 8, so global rows of block row 4
or later) on each of two ranks, one at a time: the block column is recomputed and the factor is PDPOTRF's
bit for bit. Rank 0 prints ``CASE ...`` /
``FAIL ...`` lines and ``DONE failures=F``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan

N = 96


def _case(grid: linalg.ProcessGrid, uplo: str, flips: list[BitFlip], want: list[str] | None,
          want_blocks: list[tuple[int, int]] | None = None) -> tuple[bool, str]:
    r = np.random.default_rng(5).standard_normal((N, N))
    a = r @ r.T / N + np.eye(N)
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    linalg.pdpotrf(uplo, N, ref, 0, 0)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    plan = InjectionPlan(flips, seed=1)
    rep = linalg.ft_pdpotrf(uplo, N, A, 0, 0, inject=plan if flips else None, inject_panel=1)
    made = grid.comm.allreduce(len(plan.records)) if flips else 0
    acts = sorted(ev.action for ev in rep.events)
    diff = float(np.max(np.abs(A.to_global() - ref.to_global())))
    exact = want is not None and "located" not in want  # a located element is set from its sum: rounding
    if want is None:  # a flip in the product's left operand: a located element per column it reached
        ok = bool(acts) and set(acts) == {"located"}
    else:
        ok = acts == want
    ok = ok and made == len(flips) and rep.uncorrected == 0 and rep.blocks_checked > 0
    ok = ok and (diff == 0.0 if exact else diff <= 1e-12 * np.max(np.abs(a)))
    blocks = sorted((ev.row_block, ev.col_block) for ev in rep.events)
    ok = ok and (want_blocks is None or blocks == want_blocks)
    return ok, f"flips={made} events={acts} blocks={blocks} max_diff={diff:.1e}"


def _square_cases() -> list[tuple]:
    """2 x 2 (ranks 0 and 3 hold the diagonal blocks): each diagonal process sends its received rows of P
    down its process column, whole, with their sums; the others send nothing down it."""
    return [("error-free", [], []),
            ("one flip", [BitFlip(target="C", rank=1, step=1, index=(9, 2), bit=61)], ["located"]),
            ("rows of P a diagonal process sent down its column flipped in its columns' copy",
             [BitFlip(target="B", rank=0, index=(3, 2), bit=62)], ["located"], [(1, -1)]),
            # row 9: block column 4's rows, beyond block column k+1 (the look-ahead's first update); on a
            # diagonal process they are also its own rows, every update's left operand: restored before any
            ("rows of P a diagonal process sent down its column flipped beyond block column k+1",
             [BitFlip(target="B", rank=0, index=(9, 2), bit=62)], ["located"], [(1, -1)]),
            ("rows of P a process received down its column flipped",
             [BitFlip(target="B", rank=1, index=(3, 2), bit=62)], ["located"], [(1, -1)]),
            # received along the process row and flipped before they go down the column: restored from their
            # row sums before any product, on both processes of the column (its own left operand included)
            ("rows of P flipped before a diagonal process sends them",
             [BitFlip(target="A", rank=3, index=(3, 2), bit=62)], ["located", "located"], [(1, -1), (1, -1)]),
            # row 9 of process row 0's rows below panel 1: block row 4, below rank 1's block column 3 (row
            # 3 is in block row 2, whose product with block column 3 lands above the diagonal: scratch)
            ("own rows of P flipped on a process that sends nothing down",
             [BitFlip(target="A", rank=1, index=(9, 2), bit=62)], None)] + \
        [(f"two flips on rank {rk}", [BitFlip(target="C", rank=rk, step=1, index=(i, 0), bit=61)
                                      for i in (9, 12)], ["recomputed"]) for rk in (0, 1)]


def main() -> int:
    failures = 0
    shapes = (((2, 2), None),) if MPI.COMM_WORLD.size == 4 else (((2, 3), (0, 3)), ((3, 2), (1, 3)))
    for shape, ranks in shapes:
        grid = linalg.ProcessGrid(MPI.COMM_WORLD, *shape)
        for uplo in "LU":
            if ranks is None:
                cases = _square_cases()
            else:
                cases = [("error-free", [], []),
                         ("one flip", [BitFlip(target="C", rank=ranks[0], step=1, index=(9, 2), bit=61)],
                          ["located"])]
                # in transit: in the rows of P a process's columns multiply (copied out of the parts here),
                # and in the rows it received along its process row (the product's left operand). Rows 3 and
                # 9 of them: on 2 x 3 (rank 0) row 3 came straight from process row 1's process of the
                # panel's column and row 9 from rank 0's own rows; on 3 x 2 (rank 1) row 3 is its own and
                # row 9 came from process row 2
                cases += [(f"received rows of P flipped (row {i})",
                           [BitFlip(target="B", rank=ranks[0], index=(i, 2), bit=62)], ["located"], [(1, -1)])
                          for i in (3, 9)]
                cases.append(("own rows of P flipped",
                              [BitFlip(target="A", rank=ranks[1], index=(3, 2), bit=62)], None))
                cases += [(f"two flips on rank {rk}",
                           [BitFlip(target="C", rank=rk, step=1, index=(i, 0), bit=61) for i in (9, 12)],
                           ["recomputed"]) for rk in ranks]
                # rank 1 solves panel 1 and sends it; its row 9 (block row 4) is one its own columns multiply:
                # checked against its row sum and restored before any product reads it
                if shape == (2, 3):
                    cases.append(("rows of P flipped where the panel was solved, once sent",
                                  [BitFlip(target="A", rank=1, index=(9, 2), bit=62)], ["located"],
                                  [(1, -1)]))
            for name, flips, *want in cases:
                ok, line = _case(grid, uplo, flips, *want)
                failures += not ok
                if grid.rank == 0:
                    tag = "CASE " if ok else "FAIL "
                    print(f"{tag}grid={shape} uplo={uplo} {name}: {line}", flush=True)
        grid.free()
    if MPI.COMM_WORLD.rank == 0:
        print(f"DONE failures={failures}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
