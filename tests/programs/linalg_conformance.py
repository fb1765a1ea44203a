"""Run many random PDGEMM / PDSYMM / Cannon cases on one grid and check each against numpy.

usage: linalg_conformance.py NPROW NPCOL --cases N --seed S [--symm N] [--cannon N]

Every case draws sizes (1, small, not multiples of the blocks), flags, alpha in {0, 1, -2.5}, beta in
{0, 1, 0.5}, offsets, block sizes and source processes per matrix from one seeded generator (identical on all
ranks). A or B is all-NaN when alpha == 0 (must not be read), C's submatrix is NaN when beta == 0 (must be
overwritten), the excluded triangle of a PDSYMM matrix is NaN. Rank 0 prints ``FAIL ...`` per bad case and
``DONE gemm=G symm=S cannon=X failures=F`` at the end.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg

EPS = np.finfo(np.float64).eps


def rand_dim(rng: np.random.Generator) -> int:
    return int(rng.choice([1, 1, 2, 3, 5, 7, 9, 13, 17, 24, 31, 40]))


def rand_layout(rng: np.random.Generator, grid: linalg.ProcessGrid) -> dict:
    return dict(mb=int(rng.choice([1, 2, 3, 4, 5, 8])), nb=int(rng.choice([1, 2, 3, 4, 5, 8])),
                rsrc=int(rng.integers(grid.nprow)), csrc=int(rng.integers(grid.npcol)))


def make(rng, grid, rows, cols, fill=None):
    """Return (global array, distributed matrix, offset i, offset j) holding a rows x cols submatrix."""
    i0, j0 = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    M, N = i0 + rows + int(rng.integers(0, 3)), j0 + cols + int(rng.integers(0, 3))
    g = rng.uniform(-1, 1, (M, N))
    if fill is not None:
        g[:] = fill
    return g, linalg.DistributedMatrix.from_global(grid, g, **rand_layout(rng, grid)), i0, j0


def check(name, got, ref_full, sub, denom, k):
    """Compare got with ref_full; outside `sub` bit-exact, inside max-norm relative error <= 10 k eps."""
    outside = np.ones(got.shape, bool)
    outside[sub] = False
    problems = []
    if not np.array_equal(got[outside], ref_full[outside], equal_nan=True):
        problems.append("C outside the submatrix changed")
    inside_got, inside_ref = got[sub], ref_full[sub]
    if inside_got.size:
        if not np.all(np.isfinite(inside_got)):
            problems.append("NaN/inf in result")
        else:
            err = np.max(np.abs(inside_got - inside_ref))
            scale = max(float(np.max(denom)), np.finfo(float).tiny)
            if err / scale > 10 * max(k, 1) * EPS:
                problems.append(f"relative error {err / scale:.3e} > {10 * max(k, 1) * EPS:.3e}")
    return [f"{name}: {p}" for p in problems]


def gemm_case(rng, grid, algorithm):
    ta, tb = str(rng.choice(list("NTC"))), str(rng.choice(list("NTC")))
    m, n, k = rand_dim(rng), rand_dim(rng), rand_dim(rng)
    alpha, beta = float(rng.choice([0.0, 1.0, -2.5])), float(rng.choice([0.0, 1.0, 0.5]))
    ar, ac = (m, k) if ta == "N" else (k, m)
    br, bc = (k, n) if tb == "N" else (n, k)
    ga, A, ia, ja = make(rng, grid, ar, ac, np.nan if alpha == 0 else None)
    gb, B, ib, jb = make(rng, grid, br, bc, np.nan if alpha == 0 else None)
    gc, C, ic, jc = make(rng, grid, m, n)
    if beta == 0:
        gc[ic:ic + m, jc:jc + n] = np.nan
        C = linalg.DistributedMatrix.from_global(grid, gc, mb=C.desc.mb, nb=C.desc.nb, rsrc=C.desc.rsrc,
                                                 csrc=C.desc.csrc)
    # Small step widths make SUMMA run many pipelined steps even on these small matrices.
    width = None if algorithm == "cannon" else [None, 1, 2, 3, 5, 8][int(rng.integers(6))]
    linalg.pdgemm(ta, tb, m, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc, algorithm=algorithm,
                  width=width)
    got = C.to_global(root=0)
    if got is None:
        return []
    opa = ga[ia:ia + ar, ja:ja + ac]
    opb = gb[ib:ib + br, jb:jb + bc]
    opa, opb = (opa if ta == "N" else opa.T), (opb if tb == "N" else opb.T)
    sub = (slice(ic, ic + m), slice(jc, jc + n))
    ref = gc.copy()
    csub = gc[sub]
    prod = alpha * (opa @ opb) if alpha != 0 else np.zeros((m, n))
    ref[sub] = prod + (beta * csub if beta != 0 else 0.0)
    denom = (abs(alpha) * (np.abs(opa) @ np.abs(opb)) if alpha != 0 else np.zeros((m, n))) + \
        (abs(beta) * np.abs(csub) if beta != 0 else 0.0)
    desc = (f"{algorithm} width={width} {ta}{tb} m={m} n={n} k={k} alpha={alpha} beta={beta} "
            f"ia,ja={ia},{ja} ib,jb={ib},{jb} "
            f"ic,jc={ic},{jc} A{A.desc.to_scalapack()} B{B.desc.to_scalapack()} C{C.desc.to_scalapack()}")
    return check(desc, got, ref, sub, denom, k)


def symm_case(rng, grid):
    side, uplo = str(rng.choice(list("LR"))), str(rng.choice(list("UL")))
    m, n = rand_dim(rng), rand_dim(rng)
    alpha, beta = float(rng.choice([0.0, 1.0, -2.5])), float(rng.choice([0.0, 1.0, 0.5]))
    na = m if side == "L" else n
    ga, A, ia, ja = make(rng, grid, na, na)
    sub_a = ga[ia:ia + na, ja:ja + na]
    full = np.tril(sub_a) + np.tril(sub_a, -1).T if uplo == "L" else np.triu(sub_a) + np.triu(sub_a, 1).T
    garbage = np.triu_indices(na, 1) if uplo == "L" else np.tril_indices(na, -1)
    sub_a[garbage] = np.nan  # the excluded triangle must never be read
    if alpha == 0:
        ga[:] = np.nan
    A = linalg.DistributedMatrix.from_global(grid, ga, mb=A.desc.mb, nb=A.desc.nb, rsrc=A.desc.rsrc,
                                             csrc=A.desc.csrc)
    gb, B, ib, jb = make(rng, grid, m, n, np.nan if alpha == 0 else None)
    gc, C, ic, jc = make(rng, grid, m, n)
    if beta == 0:
        gc[ic:ic + m, jc:jc + n] = np.nan
        C = linalg.DistributedMatrix.from_global(grid, gc, mb=C.desc.mb, nb=C.desc.nb, rsrc=C.desc.rsrc,
                                                 csrc=C.desc.csrc)
    linalg.pdsymm(side, uplo, m, n, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    got = C.to_global(root=0)
    if got is None:
        return []
    opb = gb[ib:ib + m, jb:jb + n]
    sub = (slice(ic, ic + m), slice(jc, jc + n))
    csub = gc[sub]
    if alpha != 0:
        prod = alpha * (full @ opb if side == "L" else opb @ full)
        absprod = abs(alpha) * (np.abs(full) @ np.abs(opb) if side == "L" else np.abs(opb) @ np.abs(full))
    else:
        prod = absprod = np.zeros((m, n))
    ref = gc.copy()
    ref[sub] = prod + (beta * csub if beta != 0 else 0.0)
    denom = absprod + (abs(beta) * np.abs(csub) if beta != 0 else 0.0)
    desc = (f"symm {side}{uplo} m={m} n={n} alpha={alpha} beta={beta} ia,ja={ia},{ja} ib,jb={ib},{jb} "
            f"ic,jc={ic},{jc} A{A.desc.to_scalapack()}")
    return check(desc, got, ref, sub, denom, na)


def lookahead_case(rng, grid):
    """The SUMMA engine with several exchanges in flight (buffer ring deeper than 2)."""
    from ftkit.linalg.pblas._operands import aligned_operands
    from ftkit.linalg.pblas._summa import run_summa

    m, n, k = rand_dim(rng) + 5, rand_dim(rng) + 5, rand_dim(rng) + 20
    lay = rand_layout(rng, grid)
    ga, gb = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    A = linalg.DistributedMatrix.from_global(grid, ga, **lay)
    B = linalg.DistributedMatrix.from_global(grid, gb, **rand_layout(rng, grid))
    C = linalg.DistributedMatrix.zeros(grid, m, n, mb=lay["mb"], nb=int(rng.integers(1, 6)), rsrc=lay["rsrc"])
    ops = aligned_operands("N", "N", m, n, k, A, 0, 0, B, 0, 0, C, 0, 0)
    depth, width = int(rng.integers(2, 6)), int(rng.integers(1, 4))
    run_summa(grid, ops.a, ops.b, ops.c, ops.ka, ops.kb, 1.0, width=width, lookahead=depth)
    got = C.to_global(root=0)
    if got is None:
        return []
    everything = (slice(None), slice(None))
    return check(f"lookahead={depth} width={width} m={m} n={n} k={k}", got, ga @ gb, everything,
                 np.abs(ga) @ np.abs(gb), k)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("nprow", type=int)
    ap.add_argument("npcol", type=int)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--symm", type=int, default=40)
    ap.add_argument("--cannon", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, args.nprow, args.npcol)
    rng = np.random.default_rng(args.seed)
    failures: list[str] = []
    for _ in range(args.cases):
        failures += gemm_case(rng, grid, "summa")
    for _ in range(args.cannon):
        failures += gemm_case(rng, grid, "cannon")
    for _ in range(args.symm):
        failures += symm_case(rng, grid)
    for _ in range(10):
        failures += lookahead_case(rng, grid)
    if grid.rank == 0:
        for f in failures:
            print("FAIL", f)
        print(f"DONE gemm={args.cases} symm={args.symm} cannon={args.cannon} failures={len(failures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
