"""``redistribute``'s no-message path and the in-place triangle, against the general path, bit for bit.

usage: redistribute_same_layout.py NPROW NPCOL

For float64 and float32 matrices holding NaN, Inf and -0.0 (bytes compared, so every bit counts), with
offsets and block sizes that do not divide the sizes:

- maps equal to the source's (and aligned ones built another way) take the local path (``same_layout``),
  maps that are not (other block size, offset, source process, a transpose) do not; either way
  ``redistribute`` returns the bytes of :func:`~ftkit.linalg.pblas._redistribute.exchange` (the
  ``Alltoallv`` path, forced), in a fresh F-order array sharing no memory with the source;
- ``triangle_operand`` (made in place, or copied out of A in one pass where T's piece is A's own local piece:
  square blocks, offsets on the same block boundary) returns the bytes of the ``np.where`` formula it
  replaced, applied to the general path's piece, for lower/upper, unit/non-unit, transposed or not, never
  shares A's memory and leaves A unchanged.

Rank 0 prints ``FAIL ...`` lines and ``DONE cases=C fast=F tri_fast=T failures=X`` (``T``: triangles taken
by the one-pass copy on this process).
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.descriptor import BlockCyclic1D
from ftkit.linalg.pblas._redistribute import exchange, redistribute, same_layout
from ftkit.linalg.pblas._tri_sweep import tri_cols, triangle_operand

M, N, MB, NB = 23, 19, 4, 3


def _where_triangle(t: np.ndarray, rows: BlockCyclic1D, cols: BlockCyclic1D, g: linalg.ProcessGrid,
                    lower: bool, unit: bool) -> np.ndarray:
    """The triangle as ``triangle_operand`` made it with ``np.where`` copies (the reference)."""
    r = rows.indices_on(g.myrow)[:, None]
    c = cols.indices_on(g.mycol)[None, :]
    keep = (r > c) if lower else (r < c)
    one = np.ones((), t.dtype)
    return np.asfortranarray(np.where(keep, t, np.where(r == c, one if unit else t, np.zeros((), t.dtype))))


def _matrix(g: linalg.ProcessGrid, dtype: type, rng: np.random.Generator) -> linalg.DistributedMatrix:
    a = rng.standard_normal((M, N)).astype(dtype)
    a.flat[rng.choice(M * N, 12, replace=False)] = [np.nan, np.inf, -np.inf, -0.0] * 3
    return linalg.DistributedMatrix.from_global(g, a, mb=MB, nb=NB)


def main() -> int:
    nprow, npcol = int(sys.argv[1]), int(sys.argv[2])
    g = linalg.ProcessGrid(MPI.COMM_WORLD, nprow, npcol)
    rng = np.random.default_rng(5)
    problems: list[str] = []
    cases = fast = tri_fast = 0
    for dtype in (np.float64, np.float32):
        A = _matrix(g, dtype, rng)
        before = A.local.copy()
        # (i0, j0, trans, rows, cols, expected same_layout)
        layouts = []
        for i0, j0, m, n in [(0, 0, M, N), (5, 2, 11, 13), (4, 3, 19, 16), (7, 7, 0, 5)]:
            layouts.append((i0, j0, False, A.row_map(i0, m), A.col_map(j0, n), True))
            layouts.append((i0, j0, False, BlockCyclic1D(m, MB, i0, 0, nprow),
                            BlockCyclic1D(n, NB, j0, 0, npcol), True))  # equal maps, built apart
            layouts.append((i0, j0, False, BlockCyclic1D(m, MB + 1, i0, 0, nprow), A.col_map(j0, n),
                            m == 0 or nprow == 1))
            layouts.append((i0, j0, False, A.row_map(i0, m), BlockCyclic1D(n, NB, j0 + 1, 0, npcol),
                            n == 0 or npcol == 1))
            layouts.append((i0, j0, False, A.row_map(i0, m), BlockCyclic1D(n, NB, j0, npcol - 1, npcol),
                            n == 0 or npcol == 1))
            k = min(m, n)
            layouts.append((i0, j0, True, BlockCyclic1D(k, MB, 0, 0, nprow),
                            BlockCyclic1D(k, NB, 0, 0, npcol), False))
        for i0, j0, trans, rows, cols, expect in layouts:
            cases += 1
            tag = f"{np.dtype(dtype).name} i0={i0} j0={j0} trans={trans} rows={rows} cols={cols}"
            taken = same_layout(A, i0, j0, trans, rows, cols)
            fast += taken
            if taken != expect:
                problems.append(f"{tag}: same_layout {taken}, expected {expect}")
            got, ref = redistribute(A, i0, j0, trans, rows, cols), exchange(A, i0, j0, trans, rows, cols)
            if got.shape != ref.shape or got.tobytes(order="F") != ref.tobytes(order="F"):
                problems.append(f"{tag}: redistribute differs from the general path")
            if not got.flags.f_contiguous or np.may_share_memory(got, A.local) or got.dtype != A.dtype:
                problems.append(f"{tag}: not a fresh F-order array of A's dtype")
        # square blocks (A_sq): T's piece is A's own local piece where the offsets agree, the one-pass copy
        A_sq = linalg.DistributedMatrix.from_global(g, A.to_global(), mb=MB, nb=MB)
        before_sq = A_sq.local.copy()
        for src in (A, A_sq):
            for i0, j0, ka in [(0, 0, min(M, N)), (5, 2, 11), (3, 6, 13), (4, 4, 15)]:
                for trans in (False, True):
                    for lower in (False, True):
                        for unit in (False, True):
                            cases += 1
                            rows = src.row_map(i0, ka) if not trans else BlockCyclic1D(ka, MB, i0, 0, nprow)
                            cols = tri_cols(rows, npcol)
                            tri_fast += same_layout(src, i0, j0, trans, rows, cols)
                            t = triangle_operand(src, i0, j0, trans, lower, unit, rows, cols)
                            piece = exchange(src, i0, j0, trans, rows, cols)
                            ref = _where_triangle(piece, rows, cols, g, lower, unit)
                            if t.tobytes(order="F") != ref.tobytes(order="F") or not t.flags.f_contiguous:
                                problems.append(f"{np.dtype(dtype).name} triangle mb={src.desc.mb} "
                                                f"nb={src.desc.nb} i0={i0} j0={j0} ka={ka} trans={trans} "
                                                f"lower={lower} unit={unit}: differs from np.where")
                            if np.may_share_memory(t, src.local):
                                problems.append(f"{np.dtype(dtype).name} triangle i0={i0} j0={j0}: "
                                                "shares A's memory")
        if A.local.tobytes() != before.tobytes() or A_sq.local.tobytes() != before_sq.tobytes():
            problems.append(f"{np.dtype(dtype).name}: A's local array was modified")
    every = g.comm.gather(problems, root=0)
    if g.rank == 0:
        flat = [f"rank {r}: {p}" for r, ps in enumerate(every or []) for p in ps]
        for line in flat:
            print("FAIL", line)
        print(f"DONE cases={cases} fast={fast} tri_fast={tri_fast} failures={len(flat)}", flush=True)
    g.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
