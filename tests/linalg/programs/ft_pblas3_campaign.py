"""Run FT_PDTRSM / FT_PDTRMM / FT_PDSYRK / FT_PDSYR2K through the conformance cases, clean and with bit flips.

usage: ft_pblas3_campaign.py NPROW NPCOL --seed S --trials N

Each trial takes one random case of ``pblas3_conformance`` (random flags, sizes, offsets, layouts, hard
families: tiny, huge, graded, Hilbert, cancelling, ill-conditioned triangles; float64 or float32) and runs the
ft_ routine instead of the plain one, with a random checksum block size. The trials take the four routines
in turn, every other round clean, with the rigorous or the statistical threshold: any detected block is a
false positive, and the result must pass the conformance check. The other rounds flip one exponent or high
mantissa bit at a random injection point (A, B or C, random step and rank): the result must still pass the
check with the block-wise bound a checksum guarantees (``bs^2`` times the largest magnitude; an error below
it can be invisible to the block's sums), so a flip that mattered was found and corrected. A clean float64
FT_PDTRSM / FT_PDTRMM / FT_PDSYRK / FT_PDSYR2K must also equal the plain routine's result bit for bit.
Rank 0 prints ``FAIL ...`` and ``DONE trials=T failures=F false_positives=P flips=X detected=D corrected=K``.
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np
import pblas3_conformance as conf
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan

CASES = [(conf.case_tri, "pdtrsm", 4), (conf.case_tri, "pdtrmm", 4), (conf.case_rank, "pdsyrk", 2),
         (conf.case_rank, "pdsyr2k", 2)]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("nprow", type=int)
    p.add_argument("npcol", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trials", type=int, default=40)
    args = p.parse_args()
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, args.nprow, args.npcol)
    rng = np.random.default_rng(args.seed)
    failures = false_pos = flips = detected = corrected = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for trial in range(args.trials):
            fn, routine, nflags = CASES[trial % 4]
            flags = [str(rng.choice(list(x))) for x in (("LR", "UL", "NTC", "UN") if nflags == 4 else
                                                          ("UL", "NTC"))]
            dtype = np.float32 if rng.random() < 0.25 else np.float64
            clean = trial // 4 % 2 == 1  # every routine both clean and flipped, in turn
            plan = None
            if not clean:
                target = str(rng.choice(["A", "B", "C"]))
                plan = InjectionPlan([BitFlip(target=target, bits=(44, 61), persistent=False)],
                                     seed=int(rng.integers(1 << 30)))
            kw = dict(bs=int(rng.integers(2, 9)), tol=None if rng.random() < 0.5 else "statistical",
                      inject=plan)
            reports: list = []
            unequal: list | None = [] if clean and dtype == np.float64 else None
            conf.OVERRIDE[routine] = functools.partial(_ft_call, routine, kw=kw, reports=reports,
                                                       unequal=unequal)
            case = conf.Case(grid, rng, dtype)
            case.flip_bs = None if clean else kw["bs"]
            problems = fn(case, routine, *flags)
            rep = reports[-1]
            made = grid.comm.allreduce(len(plan.records) if plan else 0)
            flips += made
            detected += rep.detected
            corrected += rep.corrected
            if grid.comm.allreduce(len(unequal or [])):
                problems.append("error-free result differs from the plain routine's (not bit for bit)")
            if clean and rep.detected:
                false_pos += 1
                problems.append(f"false positive: {rep.detected} block(s) {rep.detected_blocks[:4]}")
            failures += bool(problems)
            if grid.rank == 0:
                for pr in problems:
                    print(f"FAIL trial {trial} ft_{routine} {''.join(flags)} {kw['tol']} bs={kw['bs']} {pr} "
                          f"(events: {sorted({e.action for e in rep.events})})", flush=True)
    if grid.rank == 0:
        print(f"DONE trials={args.trials} failures={failures} false_positives={false_pos} flips={flips} "
              f"detected={detected} corrected={corrected}", flush=True)
    return 0


#: Position of the matrix the routines whose error-free result is the plain one's bit for bit write.
OUTPUT = {"pdtrsm": 10, "pdtrmm": 10, "pdsyrk": 9, "pdsyr2k": 12}


def _ft_call(routine: str, *args: object, kw: dict, reports: list, unequal: list | None) -> None:
    """Run the ft_ routine on ``args``; with ``unequal`` (clean float64 trials of the routines in
    :data:`OUTPUT`, whose error-free result is the plain routine's bit for bit) run the plain routine on a
    copy first and note a difference on this process in ``unequal``."""
    plain = None
    if unequal is not None and routine in OUTPUT:
        out = OUTPUT[routine]
        mine = args[out]
        # the copy with the very strides of the local array (a one-row array may be C-ordered), which decide
        # whether BLAS or numpy multiplies into it
        plain = linalg.DistributedMatrix(mine.grid, mine.desc, np.empty_like(mine.local))
        plain.local[...] = mine.local
        assert plain.local.strides == mine.local.strides
        getattr(linalg, routine)(*args[:out], plain, *args[out + 1:])
    reports.append(getattr(linalg, "ft_" + routine)(*args, **kw))
    if plain is not None and not np.array_equal(plain.local, args[OUTPUT[routine]].local, equal_nan=True):
        unequal.append(routine)


if __name__ == "__main__":
    sys.exit(main())
