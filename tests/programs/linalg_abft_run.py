"""ft_pdgemm / ft_pdsymm under mpirun on one process grid: many cases in one run, asserting as it goes.

Usage: linalg_abft_run.py NPROW NPCOL {fp,inject} [--cases N] [--seed S]

- ``fp``: random adversarial products (families of linalg_abft_cases, random sizes, block sizes, offsets,
  transposes, alpha, beta), each with the rigorous and the statistical threshold: no block may be flagged,
  and C must equal plain ``pdgemm``'s C bit for bit (same panels, same GEMMs). ft_pdsymm too.
- ``inject``: real bit flips during the computation (C between panels on a chosen rank, op(A)/op(B) after
  encoding, persistent or in transit); checks detection, location/correction, ``mode="detect"``.

Rank 0 prints one ``SUMMARY {json}`` line at the end; any failed check raises (non-zero exit).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent))
from linalg_abft_cases import FAMILIES, make_case  # noqa: E402

from ftkit.errors import ABFTError  # noqa: E402
from ftkit.inject import BitFlip, InjectionPlan  # noqa: E402
from ftkit.linalg import (  # noqa: E402
    DistributedMatrix,
    ProcessGrid,
    checksums,  # noqa: E402
    pdgemm,
    pdsymm,
)
from ftkit.linalg.abft import ft_pdgemm, ft_pdsymm  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("nprow", type=int)
p.add_argument("npcol", type=int)
p.add_argument("what", choices=["fp", "inject"])
p.add_argument("--cases", type=int, default=50)
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()

comm = MPI.COMM_WORLD
grid = ProcessGrid(comm, args.nprow, args.npcol)
rng = np.random.default_rng(args.seed)  # identical on every rank: all draw the same cases
stats = {
    "cases": 0,
    "products": 0,
    "blocks": 0,
    "flagged": 0,
    "max_ratio_rig": 0.0,
    "max_ratio_stat": 0.0,
    "detected": 0,
    "located": 0,
    "recomputed": 0,
    "undetected_below_bound": 0,
    "abft_errors": 0,
    "detect_mode": 0,
    "symm": 0,
    "rounding": 0,
}


def dist(x: np.ndarray, mb: int, nb: int) -> DistributedMatrix:
    return DistributedMatrix.from_global(grid, x, mb=mb, nb=nb)


def gather(X: DistributedMatrix) -> np.ndarray:
    out = X.to_global()
    assert out is not None
    return out


def rig_bound(
    a: np.ndarray, b: np.ndarray, c0: np.ndarray, alpha: float, beta: float, k: int, bs: int
) -> float:
    """An upper bound of every block's rigorous threshold (bs x bs blocks of |alpha||A||B| + |beta||C0|)."""
    mel = abs(alpha) * (np.abs(a) @ np.abs(b)) + abs(beta) * np.abs(c0)
    f = float(checksums.thresholds(np.ones((1, 1)), k, np.array([bs]), np.array([bs]))[0, 0])
    return f * bs * bs * float(mel.max()) + 1e-300


def random_problem(fam: str | None = None):
    fam = fam or FAMILIES[int(rng.integers(len(FAMILIES)))]
    mb = int(rng.choice([4, 8, 16]))
    nb = int(rng.choice([4, 8, 16]))
    m, n, k = (int(x) for x in rng.integers(1, 48, size=3))
    ta, tb = str(rng.choice(["N", "T"])), str(rng.choice(["N", "T"]))
    ic, jc = (int(x) for x in rng.integers(0, 5, size=2))
    a, b, c0 = make_case(fam, m, n, k, rng)
    alpha = float(rng.choice([1.0, -0.5, 2.5]))
    beta = float(rng.choice([0.0, 1.0, -1.5]))
    return fam, mb, nb, m, n, k, ta, tb, ic, jc, a, b, c0, alpha, beta


def operands(mb, nb, m, n, k, ta, tb, ic, jc, a, b, c0):
    ag = a if ta == "N" else a.T.copy()
    bg = b if tb == "N" else b.T.copy()
    # embed the operands at offsets (A at (1, 2) ...) so submatrix arithmetic is exercised
    A = np.full((ag.shape[0] + 1, ag.shape[1] + 2), np.nan)
    A[1:, 2:] = ag
    B = np.full((bg.shape[0] + 2, bg.shape[1] + 1), np.nan)
    B[2:, 1:] = bg
    Cg = rng.standard_normal((m + ic + 1, n + jc + 2))
    Cg[ic : ic + m, jc : jc + n] = c0
    return dist(A, mb, nb), dist(B, nb, mb), Cg


def run_fp() -> None:
    for _ in range(args.cases):
        fam, mb, nb, m, n, k, ta, tb, ic, jc, a, b, c0, alpha, beta = random_problem()
        A, B, Cg = operands(mb, nb, m, n, k, ta, tb, ic, jc, a, b, c0)
        Cref = dist(Cg, mb, nb)
        pdgemm(ta, tb, m, n, k, alpha, A, 1, 2, B, 2, 1, beta, Cref, ic, jc)
        ref = gather(Cref)
        for tol in (None, "statistical"):
            C = dist(Cg, mb, nb)
            bs = None if rng.random() < 0.3 else int(rng.choice([1, 2, 3, 4, 8, 16]))
            rep = ft_pdgemm(ta, tb, m, n, k, alpha, A, 1, 2, B, 2, 1, beta, C, ic, jc, bs=bs, tol=tol)
            assert rep.detected == 0 and rep.rounding_alarms == 0 and not rep.events, (fam, tol, rep)
            got = gather(C)
            assert np.array_equal(got, ref, equal_nan=True), (
                fam,
                tol,
                np.nanmax(np.abs(got - ref)),
                mb,
                nb,
                m,
                n,
                k,
                ta,
                tb,
                ic,
                jc,
                alpha,
                beta,
                bs,
            )
            key = "max_ratio_rig" if tol is None else "max_ratio_stat"
            stats[key] = max(stats[key], rep.max_ratio)
            stats["products"] += 1
            stats["blocks"] += rep.blocks_checked
        # numpy cross-check of the product itself (loose: it checks we multiply the right things)
        want = alpha * a @ b + beta * c0
        assert np.allclose(
            ref[ic : ic + m, jc : jc + n],
            want,
            rtol=1e-9,
            atol=1e-9 * float(np.abs(a).max() * np.abs(b).max() * k + np.abs(c0).max()),
        )
        stats["cases"] += 1
    # symmetric: ft_pdsymm equals pdsymm bit for bit, nothing flagged
    for _ in range(max(2, args.cases // 5)):
        for side in ("L", "R"):
            m, n = (int(x) for x in rng.integers(1, 40, size=2))
            na = m if side == "L" else n
            s = rng.standard_normal((na, na))
            bmat = rng.standard_normal((m, n))
            c0 = rng.standard_normal((m, n))
            uplo = str(rng.choice(["U", "L"]))
            A, B = dist(s, 8, 8), dist(bmat, 8, 8)
            Cref, C = dist(c0, 8, 8), dist(c0, 8, 8)
            pdsymm(side, uplo, m, n, 1.5, A, 0, 0, B, 0, 0, 0.5, Cref, 0, 0)
            for tol in (None, "statistical"):
                C = dist(c0, 8, 8)
                rep = ft_pdsymm(side, uplo, m, n, 1.5, A, 0, 0, B, 0, 0, 0.5, C, 0, 0, tol=tol)
                assert rep.detected == 0 and not rep.events, rep
                assert np.array_equal(gather(C), gather(Cref)), (
                    side,
                    m,
                    n,
                    np.max(np.abs(gather(C) - gather(Cref))),
                )
                stats["symm"] += 1


def run_inject() -> None:
    mb = nb = 8
    for case in range(args.cases):
        fam = ("normal", "uniform", "huge", "mixed_scale")[case % 4]
        m, n, k = 40, 36, 60
        a, b, c0 = make_case(fam, m, n, k, rng)
        alpha, beta = 1.5, 0.5
        A, B = dist(a, mb, nb), dist(b, mb, nb)
        Cref = dist(c0, mb, nb)
        pdgemm("N", "N", m, n, k, alpha, A, 0, 0, B, 0, 0, beta, Cref, 0, 0, width=16)
        ref = gather(Cref)
        bound = rig_bound(a, b, c0, alpha, beta, k, 8)
        kind = case % 6
        if kind in (0, 1, 2):
            # one or two high-bit flips in C between panels, on a chosen or random rank
            nfl = 1 if kind < 2 else 2
            flips = [
                BitFlip("C", rank=(case % grid.size) if kind == 0 else None, bits="high") for _ in range(nfl)
            ]
            plan = InjectionPlan(flips, seed=1000 * args.seed + case)
            C = dist(c0, mb, nb)
            tol = None if case % 2 else "statistical"
            rep = ft_pdgemm(
                "N",
                "N",
                m,
                n,
                k,
                alpha,
                A,
                0,
                0,
                B,
                0,
                0,
                beta,
                C,
                0,
                0,
                bs=8,
                tol=tol,
                width=16,
                inject=plan,
            )
            recs = [r for rs in comm.allgather(plan.records) for r in rs]
            assert len(recs) == nfl, recs
            got = gather(C)
            assert np.all(np.abs(got - ref) <= 2 * bound), (fam, recs, np.max(np.abs(got - ref)), bound)
            assert rep.uncorrected == 0 and rep.corrected == rep.detected
            hit_blocks = {(g[0] // 8, g[1] // 8) for g in (r.global_index for r in recs)}
            flagged = set(rep.detected_blocks)
            assert flagged <= hit_blocks, (flagged, hit_blocks)
            for r in recs:
                blk = (r.global_index[0] // 8, r.global_index[1] // 8)
                big = not np.isfinite(r.after) or abs(r.after - r.before) > 4 * bound
                if big:
                    assert blk in flagged, (r, rep)
                elif blk not in flagged:
                    stats["undetected_below_bound"] += 1
            for e in rep.events:
                stats[e.action] += 1
                if e.action == "located":
                    assert e.element in {r.global_index for r in recs}, (e, recs)
            stats["detected"] += rep.detected
        elif kind == 3:
            # operand flips (top mantissa bit) after encoding: in transit -> detected and recomputed from the
            # owners' clean data; persistent (the operand itself) -> detected, recomputation cannot fix it
            a, b, c0 = make_case("normal", m, n, k, rng)
            Cref = dist(c0, mb, nb)
            pdgemm(
                "N",
                "N",
                m,
                n,
                k,
                alpha,
                dist(a, mb, nb),
                0,
                0,
                dist(b, mb, nb),
                0,
                0,
                beta,
                Cref,
                0,
                0,
                width=16,
            )
            ref = gather(Cref)
            bound = rig_bound(a, b, c0, alpha, beta, k, 8)
            target = "A" if case % 12 < 6 else "B"
            for persistent in (False, True):
                A, B = dist(a, mb, nb), dist(b, mb, nb)
                plan = InjectionPlan(
                    [BitFlip(target, rank=case % grid.size, bit=51, persistent=persistent, step=0)], seed=case
                )
                C = dist(c0, mb, nb)
                try:
                    rep = ft_pdgemm(
                        "N", "N", m, n, k, alpha, A, 0, 0, B, 0, 0, beta, C, 0, 0, bs=8, width=16, inject=plan
                    )
                    recs = [r for rs in comm.allgather(plan.records) for r in rs]
                    assert len(recs) == 1 and not persistent, (rep, recs)
                    assert rep.detected >= 1 and rep.corrected == rep.detected, (rep, recs)
                    assert all(e.action == "recomputed" for e in rep.events), rep
                    assert np.all(np.abs(gather(C) - ref) <= 2 * bound)
                    stats["detected"] += rep.detected
                    stats["recomputed"] += rep.corrected
                except ABFTError as err:
                    assert persistent, err
                    stats["abft_errors"] += 1
                    assert err.report.detected >= 1 and err.report.uncorrected >= 1  # type: ignore[attr-defined]
        elif kind == 4:
            # mode="detect": report, leave C exactly as computed (the flipped value stays)
            plan = InjectionPlan([BitFlip("C", rank=case % grid.size, bits="exponent", step=None)], seed=case)
            C = dist(c0, mb, nb)
            rep = ft_pdgemm(
                "N",
                "N",
                m,
                n,
                k,
                alpha,
                A,
                0,
                0,
                B,
                0,
                0,
                beta,
                C,
                0,
                0,
                bs=8,
                width=16,
                mode="detect",
                inject=plan,
            )
            recs = [r for rs in comm.allgather(plan.records) for r in rs]
            got = gather(C)
            diff = np.argwhere(~((got == ref) | (np.isnan(got) & np.isnan(ref))))
            assert [tuple(d) for d in diff] in ([], [tuple(recs[0].global_index)]), (diff, recs)
            if len(diff):
                assert rep.detected == 1 and rep.corrected == 0 and rep.events[0].action == "detected"
                stats["detect_mode"] += 1
        else:
            # ft_pdsymm with a flip in C
            s = rng.standard_normal((m, m))
            bm = rng.standard_normal((m, n))
            S, Bs = dist(s, mb, nb), dist(bm, mb, nb)
            Cref = dist(c0, mb, nb)
            pdsymm("L", "U", m, n, alpha, S, 0, 0, Bs, 0, 0, beta, Cref, 0, 0)
            C = dist(c0, mb, nb)
            plan = InjectionPlan([BitFlip("C", bits="high")], seed=case)
            rep = ft_pdsymm("L", "U", m, n, alpha, S, 0, 0, Bs, 0, 0, beta, C, 0, 0, bs=8, inject=plan)
            su = np.triu(s) + np.triu(s, 1).T
            bnd = rig_bound(su, bm, c0, alpha, beta, m, 8)
            assert np.all(np.abs(gather(C) - gather(Cref)) <= 2 * bnd)
            assert rep.uncorrected == 0
            stats["symm"] += 1
        stats["cases"] += 1


run_fp() if args.what == "fp" else run_inject()
comm.Barrier()
if comm.rank == 0:
    print("SUMMARY " + json.dumps(stats), flush=True)
