"""resilient_pdsyrk and resilient_pdsyr2k through the conformance cases of ``pblas3_conformance`` (issue 33).

usage: resilient_rank_conformance.py NPROW NPCOL --seed S --repeat R --dir DIR

Every UPLO x TRANS combination x {float64, float32} runs ``R`` seeded cases of
``pblas3_conformance.case_rank`` (sizes 1..19, k including 0, offsets, a block size and source process per
matrix, alpha including 0, beta including 0, the hard families, NaN wherever the routine must not read, the
other triangle of C compared bit for bit). Each case runs the plain routine on a copy of C first, then the
resilient one on C, given the store directory ``DIR/store`` or (every other case) a handle of
``protect_pdsyrk`` / ``protect_pdsyr2k``. The result is checked against numpy as the plain routine's is; a
PDSYRK result must also equal the plain routine's bit for bit (the same tiles multiplied by the same GEMMs).
Rank 0 prints ``FAIL ...`` per bad case and ``DONE cases=N failures=F protected=P``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import pblas3_conformance as conf
from mpi4py import MPI

from ftkit import linalg


def resilient(routine: str, store: Path, protect: bool, problems: list[str]):  # type: ignore[no-untyped-def]
    """The plain routine on a copy of C, then the resilient one on C; PDSYRK's two results compared."""

    def run(*args) -> None:  # type: ignore[no-untyped-def]
        C, ic, jc = args[-3:]
        plain = C.copy()
        getattr(linalg, routine)(*args[:-3], plain, ic, jc)
        fn = getattr(linalg, f"resilient_{routine}")
        if protect:  # the protector takes the arguments without alpha and beta
            pargs = args[:4] + args[5:-4] + args[-3:]
            with getattr(linalg, f"protect_{routine}")(*pargs, store=store) as handle:
                fn(*args, store=handle)
        else:
            fn(*args, store=store)
        same = C.local.tobytes() == plain.local.tobytes()
        if routine == "pdsyrk" and not C.grid.comm.allreduce(same, op=MPI.LAND):
            problems.append(f"{C.dtype} n={args[2]} k={args[3]}: not the plain routine's result bit for bit")

    return run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("nprow", type=int)
    p.add_argument("npcol", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, args.nprow, args.npcol)
    rng = np.random.default_rng(args.seed)
    store = Path(args.dir, "store")
    cases = failures = protected = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for _ in range(args.repeat):
            for dtype in (np.float64, np.float32):
                c = conf.Case(grid, rng, dtype)
                for routine, uplo, trans in itertools.product(("pdsyrk", "pdsyr2k"), "UL", "NTC"):
                    protect = cases % 2 == 1
                    extra: list[str] = []
                    conf.OVERRIDE[routine] = resilient(routine, store, protect, extra)
                    problems = conf.case_rank(c, routine, uplo, trans) + extra
                    cases, protected = cases + 1, protected + protect
                    failures += bool(problems)
                    if grid.rank == 0:
                        for pr in problems:
                            print(f"FAIL resilient_{routine} {uplo}{trans} protect={protect} {pr}",
                                  flush=True)
    if grid.rank == 0:
        print(f"DONE cases={cases} failures={failures} protected={protected}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
