"""Check PDTRSM, PDTRMM, PDSYRK, PDSYR2K, PDGEADD, PDTRADD and PDTRAN against numpy on one grid.

usage: pblas3_conformance.py NPROW NPCOL --seed S [--repeat R]

Every routine x every flag combination x {float64, float32} runs ``R`` seeded random cases (identical on all
ranks): sizes 1..19 (not multiples of the blocks), offsets 0..3, block sizes 1..6 and source processes per
matrix, alpha in {1, -2.5, 0.5, 0}, beta in {0, 1, 0.5}, and operands from a family of hard matrices (tiny,
huge, graded over 16 orders, Hilbert, cancelling, ill-conditioned triangles for TRSM). What a routine must
not read is NaN (the excluded triangle of A, a unit diagonal, A when alpha == 0, C's submatrix when beta == 0,
the triangle of C that SYRK / TRADD leave alone); every entry that must not change (all of A, everything of
B / C outside what is written) is compared bit for bit. Results are checked componentwise against
``c * (k + 2) * eps(dtype)`` times the magnitude bound (TRSM: its residual, against
``|op(A)||X| + |alpha B|``).
Rank 0 prints ``FAIL ...`` per bad case and ``DONE cases=N failures=F`` at the end.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg

FAMILIES = ("uniform", "tiny", "huge", "graded", "hilbert", "cancel")
C_BOUND = 10.0

#: Routine name -> callable used instead of ``linalg.<name>`` (the ABFT campaign runs the same cases
#: through the ft_ routines).
OVERRIDE: dict = {}


def routine_fn(name: str):  # type: ignore[no-untyped-def]
    return OVERRIDE.get(name) or getattr(linalg, name)


def operand(family: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """A ``rows x cols`` matrix of ``family``."""
    x = rng.uniform(-1, 1, (rows, cols))
    if family == "tiny":
        return 1e-8 * x
    if family == "huge":
        return 1e8 * x
    if family == "graded":
        return x * 10.0 ** rng.uniform(-8, 8, size=(rows, 1))
    if family == "hilbert":
        i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
        return 1.0 / (i + j + 1.0 + rng.integers(0, 3))
    if family == "cancel":
        h = cols // 2
        x[:, h:2 * h] = -x[:, :h] * (1 + 1e-10 * rng.standard_normal((rows, h)))
    return x


def triangle(family: str, ka: int, rng: np.random.Generator) -> np.ndarray:
    """A triangular-solve operand: well or (family "illcond") badly conditioned, full square."""
    if family == "illcond":  # unit-ish diagonal, large off-diagonal: condition number ~ 2^ka and worse
        t = rng.uniform(-2, 2, (ka, ka))
        np.fill_diagonal(t, rng.choice([-1.0, 1.0], ka) * rng.uniform(0.5, 1.0, ka))
        return t
    t = operand(family if family != "cancel" else "uniform", ka, ka, rng)
    scale = max(float(np.max(np.abs(t))), 1e-300)
    np.fill_diagonal(t, np.abs(np.diag(t)) + ka * scale)  # keeps the family's scale, well conditioned
    return t


class Case:
    """Builds the distributed operands of one case and checks the result."""

    def __init__(self, grid: linalg.ProcessGrid, rng: np.random.Generator, dtype: type) -> None:
        self.grid, self.rng, self.dtype = grid, rng, dtype
        self.eps = float(np.finfo(dtype).eps)
        #: Checksum block size of an ABFT run with a bit flip: an error a block's checksums cannot see is
        #: bounded block-wise (by its sum of magnitudes), not element-wise, so the bound becomes bs^2 times
        #: the largest magnitude (see ft_pblas3_campaign.py).
        self.flip_bs: int | None = None

    def matrix(self, sub: np.ndarray, fill_outside: float = 0.5):  # type: ignore[no-untyped-def]
        """Embed ``sub`` at a random offset of a larger matrix; return (global, distributed, i, j)."""
        rng = self.rng
        i0, j0 = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        g = rng.uniform(-1, 1, (i0 + sub.shape[0] + int(rng.integers(0, 3)),
                                j0 + sub.shape[1] + int(rng.integers(0, 3)))) * fill_outside
        g[i0:i0 + sub.shape[0], j0:j0 + sub.shape[1]] = sub
        g = g.astype(self.dtype)
        layout = dict(mb=int(rng.integers(1, 7)), nb=int(rng.integers(1, 7)),
                      rsrc=int(rng.integers(self.grid.nprow)), csrc=int(rng.integers(self.grid.npcol)))
        return g, linalg.DistributedMatrix.from_global(self.grid, g, **layout), i0, j0

    def check(self, name: str, M: linalg.DistributedMatrix, before: np.ndarray, written: np.ndarray,
              err: np.ndarray, bound: np.ndarray, k: int) -> list[str]:
        """Gather M and compare it with ``before``; ``err``/``bound`` are full-shaped (used where written)."""
        got = M.to_global()
        problems = []
        if got.dtype != self.dtype:
            problems.append(f"result dtype {got.dtype}")
        if not np.array_equal(got[~written], before[~written], equal_nan=True):
            problems.append("an entry that must not change changed")
        e, b = err[written], bound[written]
        if self.flip_bs is not None and b.size:
            b = np.full_like(b, self.flip_bs ** 2 * float(np.max(b)))
        if e.size:
            if not np.all(np.isfinite(got[written])) or not np.all(np.isfinite(e)):
                problems.append("NaN/Inf in the result")
            else:
                excess = e - C_BOUND * (k + 2) * self.eps * b
                if float(np.max(excess)) > 0:
                    i = int(np.argmax(excess))
                    problems.append(f"error {e[i]:.3e} > tolerance {C_BOUND * (k + 2) * self.eps * b[i]:.3e}")
        return [f"{name}: {p}" for p in problems]


def sub_mask(shape: tuple[int, int], i0: int, j0: int, rows: int, cols: int,
             part: np.ndarray | None = None) -> np.ndarray:
    mask = np.zeros(shape, bool)
    mask[i0:i0 + rows, j0:j0 + cols] = True if part is None else part
    return mask


def tri_part(rows: int, cols: int, uplo: str, strict: bool = False) -> np.ndarray:
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    if uplo == "U":
        return i < j if strict else i <= j
    return i > j if strict else i >= j


def case_tri(c: Case, routine: str, side: str, uplo: str, ta: str, diag: str) -> list[str]:
    rng = c.rng
    m, n = int(rng.integers(1, 20)), int(rng.integers(1, 20))
    ka = m if side == "L" else n
    alpha = float(rng.choice([1.0, -2.5, 0.5, 0.0], p=[0.3, 0.3, 0.3, 0.1]))
    fam = str(rng.choice(FAMILIES + ("illcond",) if routine == "pdtrsm" else FAMILIES))
    t = triangle(fam, ka, rng) if routine == "pdtrsm" else operand(fam, ka, ka, rng)
    if diag == "U" and routine == "pdtrsm":  # off-diagonal on the unit diagonal's scale (no growth overflow)
        t = t / max(float(np.max(np.abs(t))), 1e-300)
    t = t.astype(c.dtype).astype(np.float64)
    shown = np.where(tri_part(ka, ka, "L" if uplo == "U" else "U", strict=True), np.nan, t)
    if diag == "U":
        np.fill_diagonal(shown, np.nan)
    if alpha == 0.0:
        shown[:] = np.nan
    a_g, A, ia, ja = c.matrix(shown)
    bsub = operand(str(rng.choice(FAMILIES)), m, n, rng)
    if alpha == 0.0:
        bsub[:] = np.nan
    b_g, B, ib, jb = c.matrix(bsub)
    routine_fn(routine)(side, uplo, ta, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    name = f"{routine} {side}{uplo}{ta}{diag} {c.dtype.__name__} m={m} n={n} alpha={alpha} {fam}"
    probs = []
    if not np.array_equal(A.to_global(), a_g, equal_nan=True):
        probs.append(f"{name}: A changed")
    written = sub_mask(b_g.shape, ib, jb, m, n)
    err, bound = np.zeros(b_g.shape), np.zeros(b_g.shape)
    got = B.to_global().astype(np.float64)[ib:ib + m, jb:jb + n]
    if alpha == 0.0:
        err[written] = np.abs(got).ravel()
        return probs + c.check(name, B, b_g, written, err, bound, ka)
    tt = np.where(tri_part(ka, ka, uplo), t, 0.0)
    if diag == "U":
        np.fill_diagonal(tt, 1.0)
    op = tt if ta == "N" else tt.T
    b0 = b_g.astype(np.float64)[ib:ib + m, jb:jb + n]
    if routine == "pdtrsm":  # residual of op(A) X = alpha B (or X op(A) = alpha B)
        r = (op @ got if side == "L" else got @ op) - alpha * b0
        bd = (np.abs(op) @ np.abs(got) if side == "L" else np.abs(got) @ np.abs(op)) + abs(alpha) * np.abs(b0)
    else:
        r = got - alpha * (op @ b0 if side == "L" else b0 @ op)
        bd = abs(alpha) * (np.abs(op) @ np.abs(b0) if side == "L" else np.abs(b0) @ np.abs(op))
    err[ib:ib + m, jb:jb + n], bound[ib:ib + m, jb:jb + n] = np.abs(r), bd
    return probs + c.check(name, B, b_g, written, err, bound, ka)


def case_rank(c: Case, routine: str, uplo: str, trans: str) -> list[str]:
    rng = c.rng
    n, k = int(rng.integers(1, 20)), int(rng.choice([0, 1, 2, 5, 9, 16, 19]))
    alpha = float(rng.choice([1.0, -2.5, 0.5, 0.0], p=[0.3, 0.3, 0.3, 0.1]))
    beta = float(rng.choice([0.0, 1.0, 0.5]))
    fam = str(rng.choice(FAMILIES))
    shape = (n, k) if trans == "N" else (k, n)
    subs = [operand(fam, *shape, rng).astype(c.dtype).astype(np.float64)
            for _ in range(1 if routine == "pdsyrk" else 2)]
    scale = np.max(np.abs(subs[0]), initial=1)
    csub = (operand("uniform", n, n, rng) * scale).astype(c.dtype).astype(np.float64)
    shown_c = np.where(tri_part(n, n, uplo), np.nan if beta == 0.0 else csub, np.nan)
    mats = [c.matrix(np.full(s.shape, np.nan) if alpha == 0.0 else s) for s in subs]
    c_g, C, ic, jc = c.matrix(shown_c)
    A, ia, ja = mats[0][1:]
    if routine == "pdsyrk":
        routine_fn("pdsyrk")(uplo, trans, n, k, alpha, A, ia, ja, beta, C, ic, jc)
    else:
        B, ib, jb = mats[1][1:]
        routine_fn("pdsyr2k")(uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    name = f"{routine} {uplo}{trans} {c.dtype.__name__} n={n} k={k} alpha={alpha} beta={beta} {fam}"
    ops = [s if trans == "N" else s.T for s in subs]
    pairs = [(ops[0], ops[0])] if routine == "pdsyrk" else [(ops[0], ops[1]), (ops[1], ops[0])]
    ref = sum((x @ y.T for x, y in pairs), np.zeros((n, n))) * alpha
    bd = sum((np.abs(x) @ np.abs(y).T for x, y in pairs), np.zeros((n, n))) * abs(alpha)
    if beta != 0.0:
        ref, bd = ref + beta * csub, bd + abs(beta) * np.abs(csub)
    got = C.to_global().astype(np.float64)[ic:ic + n, jc:jc + n]
    err, bound = np.zeros(c_g.shape), np.zeros(c_g.shape)
    err[ic:ic + n, jc:jc + n], bound[ic:ic + n, jc:jc + n] = np.abs(got - ref), bd
    written = sub_mask(c_g.shape, ic, jc, n, n, tri_part(n, n, uplo))
    return c.check(name, C, c_g, written, err, bound, k)


def case_add(c: Case, routine: str, uplo: str | None, trans: str) -> list[str]:
    rng = c.rng
    m, n = int(rng.integers(1, 20)), int(rng.integers(1, 20))
    alpha = float(rng.choice([1.0, -2.5, 0.5, 0.0], p=[0.3, 0.3, 0.3, 0.1]))
    beta = float(rng.choice([0.0, 1.0, 0.5]))
    fam = str(rng.choice(FAMILIES))
    opa = operand(fam, m, n, rng).astype(c.dtype).astype(np.float64)
    csub = operand(fam, m, n, rng).astype(c.dtype).astype(np.float64)
    part = np.ones((m, n), bool) if uplo is None else tri_part(m, n, uplo)
    shown_a = np.where(part & (alpha != 0.0), opa, np.nan)
    shown_c = np.where(part, np.nan if beta == 0.0 else csub, csub)
    _, A, ia, ja = c.matrix(shown_a if trans == "N" else shown_a.T)
    c_g, C, ic, jc = c.matrix(shown_c)
    if routine == "pdgeadd":
        linalg.pdgeadd(trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    elif routine == "pdtradd":
        linalg.pdtradd(uplo, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
    else:
        linalg.pdtran(m, n, alpha, A, ia, ja, beta, C, ic, jc)
    name = f"{routine} {uplo or ''}{trans} {c.dtype.__name__} m={m} n={n} alpha={alpha} beta={beta} {fam}"
    ref, bd = alpha * opa, abs(alpha) * np.abs(opa)
    if beta != 0.0:
        ref, bd = ref + beta * csub, bd + abs(beta) * np.abs(csub)
    got = C.to_global().astype(np.float64)[ic:ic + m, jc:jc + n]
    err, bound = np.zeros(c_g.shape), np.zeros(c_g.shape)
    err[ic:ic + m, jc:jc + n], bound[ic:ic + m, jc:jc + n] = np.abs(got - ref), bd
    return c.check(name, C, c_g, sub_mask(c_g.shape, ic, jc, m, n, part), err, bound, 0)


def spd(family: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """A symmetric positive definite matrix of ``family`` (Hilbert: ill-conditioned; graded: D S D)."""
    if family == "hilbert":
        i = np.arange(n)
        return 1.0 / (i[:, None] + i[None, :] + 1.0) + 1e-3 * np.eye(n)
    x = rng.uniform(-1, 1, (n, n))
    a = x @ x.T + n * np.eye(n)
    if family == "graded":
        d = 10.0 ** rng.uniform(-4, 4, n)
        return d[:, None] * a * d[None, :]
    return a * {"tiny": 1e-8, "huge": 1e8}.get(family, 1.0)


def case_potrf(c: Case, uplo: str, failing: bool) -> list[str]:
    """PDPOTRF (+ PDPOTRS) on an SPD matrix, or FactorizationError naming the minor for a non-SPD one."""
    rng = c.rng
    n, nrhs = int(rng.integers(1, 25)), int(rng.integers(1, 4))
    fam = str(rng.choice(("uniform", "tiny", "huge", "graded", "hilbert")))
    a = spd(fam, n, rng)
    minor = 0
    if failing:  # pivot j becomes -|a_jj|: leading minors 1..j are PD, minor j+1 is not
        j = int(rng.integers(0, n))
        low = np.linalg.cholesky(a)
        a[j, j] = low[j, :j] @ low[j, :j] - abs(a[j, j])
        minor = j + 1
    a = a.astype(c.dtype).astype(np.float64)
    shown = np.where(tri_part(n, n, "L" if uplo == "U" else "U", strict=True), np.nan, a)
    a_g, A, ia, ja = c.matrix(shown)
    name = f"pdpotrf {uplo} {c.dtype.__name__} n={n} {fam}" + (f" minor={minor}" if failing else "")
    try:
        linalg.pdpotrf(uplo, n, A, ia, ja)
    except linalg.FactorizationError as e:
        if not failing or e.minor != minor:
            return [f"{name}: FactorizationError minor={e.minor}"]
        return []
    if failing:
        return [f"{name}: no FactorizationError"]
    got = A.to_global()
    written = sub_mask(a_g.shape, ia, ja, n, n, tri_part(n, n, uplo))
    f = got.astype(np.float64)[ia:ia + n, ja:ja + n]
    low = np.tril(f) if uplo == "L" else np.triu(f).T
    err, bound = np.zeros(a_g.shape), np.zeros(a_g.shape)
    recon = np.abs(low @ low.T - a)  # backward error |L L^T - A| <= c n eps |L||L^T|
    err[ia:ia + n, ja:ja + n] = recon if uplo == "L" else recon.T
    bd = np.abs(low) @ np.abs(low).T
    bound[ia:ia + n, ja:ja + n] = bd if uplo == "L" else bd.T
    probs = c.check(name, A, a_g, written, err, bound, n)
    b_g, B, ib, jb = c.matrix(operand("uniform", n, nrhs, rng))
    linalg.pdpotrs(uplo, n, nrhs, A, ia, ja, B, ib, jb)
    x = B.to_global().astype(np.float64)[ib:ib + n, jb:jb + nrhs]
    b0 = b_g.astype(np.float64)[ib:ib + n, jb:jb + nrhs]
    err, bound = np.zeros(b_g.shape), np.zeros(b_g.shape)
    err[ib:ib + n, jb:jb + nrhs] = np.abs(low @ (low.T @ x) - b0)
    bound[ib:ib + n, jb:jb + nrhs] = np.abs(low) @ (np.abs(low.T) @ np.abs(x)) + np.abs(b0)
    return probs + c.check(name.replace("pdpotrf", "pdpotrs"), B, b_g,
                           sub_mask(b_g.shape, ib, jb, n, nrhs), err, bound, 2 * n)


def all_cases():
    """(function, arguments) of every routine x flag combination."""
    for routine in ("pdtrsm", "pdtrmm"):
        for flags in itertools.product("LR", "UL", "NTC", "UN"):
            yield case_tri, (routine, *flags)
    for routine in ("pdsyrk", "pdsyr2k"):
        for flags in itertools.product("UL", "NTC"):
            yield case_rank, (routine, *flags)
    for trans in "NTC":
        yield case_add, ("pdgeadd", None, trans)
        for uplo in "UL":
            yield case_add, ("pdtradd", uplo, trans)
    yield case_add, ("pdtran", None, "T")
    for uplo in "LU":
        for failing in (False, False, False, True):
            yield case_potrf, (uplo, failing)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("nprow", type=int)
    p.add_argument("npcol", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, args.nprow, args.npcol)
    rng = np.random.default_rng(args.seed)
    cases = failures = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for _ in range(args.repeat):
            for dtype in (np.float64, np.float32):
                c = Case(grid, rng, dtype)
                for fn, fargs in all_cases():
                    problems = fn(c, *fargs)
                    cases += 1
                    failures += bool(problems)
                    if grid.rank == 0:
                        for pr in problems:
                            print("FAIL", pr, flush=True)
    if grid.rank == 0:
        print(f"DONE cases={cases} failures={failures}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
