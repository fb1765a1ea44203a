"""Time ftkit's level-3 routines and the Cholesky solver, plain and ABFT-checked (run under mpirun).

usage: ftkit launch -n 4 -- python benchmarks/bench_pblas3.py --grid 2x2 --cases 4096,128 [--reps 2]
       [--routines pdtrsm ft_pdtrsm ...] [--check]

Each case ``N,NB``: N x N matrices with NB x NB blocks (RSRC = CSRC = 0, ScaLAPACK's layout), uniform [-1, 1)
data (the triangular and SPD operands made well conditioned). Routines: ``pdtrsm`` / ``pdtrmm`` (side L,
lower, no transpose, non-unit, alpha 1), ``pdsyrk`` / ``pdsyr2k`` (lower, "N", k = N, beta 1), ``pdpotrf``
(lower), their ``ft_`` versions (rigorous threshold), and ``ft_pdpotrf_ckpt`` (ft_pdpotrf with a level-1
checkpoint every 4 panels, into ``--ckpt-dir``). Timing as in the ScaLAPACK anchor programs
(``/work/shared/anchors/scalapack``): untimed warm-up call, then ``Barrier; t0; call; allreduce(MAX)``, CPU
time summed over ranks; every timed call starts from a fresh copy of its operands (copy not timed). Prints
``RES sys=ftkit routine=.. grid=.. n=.. nb=.. rep=.. t=.. gflops=.. cpu=..`` per call, the flop counts of
ScaLAPACK's testers (TRSM/TRMM N^3, SYRK N^3, SYR2K 2 N^3, POTRF N^3/3). ``--check`` also compares each
result with numpy on rank 0 (small sizes only) and prints ``CHECK ... OK|FAIL``.

Set ``OPENBLAS_NUM_THREADS=1`` for 1-thread ranks, as the ScaLAPACK side runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import linalg

FLOPS = {"pdtrsm": 1.0, "pdtrmm": 1.0, "pdsyrk": 1.0, "pdsyr2k": 2.0, "pdpotrf": 1.0 / 3.0}
ALL = ["pdtrsm", "ft_pdtrsm", "pdtrmm", "ft_pdtrmm", "pdsyrk", "ft_pdsyrk", "pdsyr2k", "ft_pdsyr2k",
       "pdpotrf", "ft_pdpotrf", "ft_pdpotrf_ckpt"]
Mats = dict[str, linalg.DistributedMatrix]


def operands(grid: linalg.ProcessGrid, n: int, nb: int) -> Mats:
    """T (well-conditioned lower triangle), S (SPD), B and C (uniform), generated without a global array."""
    T = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    S = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    rows, cols = T.global_rows()[:, None], T.global_cols()[None, :]
    T.local[...] = np.where(rows == cols, n + np.abs(T.local), T.local)
    S.local[...] = np.where(rows == cols, 2.0 * n, S.local + 0.0)
    # S = (R + R.T) / 2 + 2n I: symmetric and strictly diagonally dominant, hence SPD
    sym = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
    linalg.pdtran(n, n, 0.5, S, 0, 0, 0.0, sym, 0, 0)
    linalg.pdgeadd("N", n, n, 0.5, S, 0, 0, 1.0, sym, 0, 0)
    B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    C = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
    return {"T": T, "S": sym, "B": B, "C": C}


def call(routine: str, n: int, ops: Mats, ckpt: object) -> linalg.DistributedMatrix:
    """Run ``routine`` on fresh copies of its operands; return the matrix it wrote."""
    T, S, B, C = ops["T"], ops["S"].copy(), ops["B"].copy(), ops["C"].copy()
    base = routine.removeprefix("ft_").removesuffix("_ckpt")
    fn = getattr(linalg, routine.removesuffix("_ckpt"))
    comm = T.grid.comm
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    if base in ("pdtrsm", "pdtrmm"):
        fn("L", "L", "N", "N", n, n, 1.0, T, 0, 0, B, 0, 0)
        out = B
    elif base == "pdsyrk":
        fn("L", "N", n, n, 1.0, ops["B"], 0, 0, 1.0, C, 0, 0)
        out = C
    elif base == "pdsyr2k":
        fn("L", "N", n, n, 1.0, ops["B"], 0, 0, ops["T"], 0, 0, 1.0, C, 0, 0)
        out = C
    elif routine == "ft_pdpotrf_ckpt":
        fn("L", n, S, 0, 0, ckpt=ckpt, ckpt_every=4)
        out = S
    else:
        fn("L", n, S, 0, 0)
        out = S
    t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    cpu = comm.allreduce(time.process_time() - c0, op=MPI.SUM)
    call.last = (t, cpu)  # type: ignore[attr-defined]
    return out


def check(routine: str, n: int, ops: Mats, out: linalg.DistributedMatrix) -> str:
    """Compare ``out`` with numpy; return ``OK`` or ``FAIL <error>`` (collective: gathers)."""
    g = {k: v.to_global() for k, v in ops.items()}
    got = out.to_global()
    base = routine.removeprefix("ft_").removesuffix("_ckpt")
    low = np.tril(g["T"])
    if base == "pdtrsm":
        err = np.abs(low @ got - g["B"]).max() / (np.abs(low).max() * np.abs(got).max() * n)
    elif base == "pdtrmm":
        err = np.abs(got - low @ g["B"]).max() / (np.abs(low).max() * np.abs(g["B"]).max() * n)
    elif base in ("pdsyrk", "pdsyr2k"):
        ref = g["B"] @ g["B"].T if base == "pdsyrk" else g["B"] @ g["T"].T + g["T"] @ g["B"].T
        ref = ref + g["C"]
        mask = np.tril(np.ones((n, n), bool))
        err = np.abs(got - ref)[mask].max() / (np.abs(ref).max() * n)
        if not np.array_equal(got[~mask], g["C"][~mask]):
            return "FAIL upper triangle changed"
    else:
        f = np.tril(got)
        err = np.abs(f @ f.T - g["S"]).max() / (np.abs(g["S"]).max() * n)
    return "OK" if err < 1e-14 else f"FAIL rel_err={err:.2e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="2x2")
    ap.add_argument("--cases", nargs="+", default=["4096,128"])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--routines", nargs="+", default=ALL, choices=ALL)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ckpt-dir", default=None, help="checkpoint directory (default: a temporary one)")
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    ckpt = None
    if "ft_pdpotrf_ckpt" in args.routines:
        import ftkit  # the checkpoint layer: only this variant needs it

        root = Path(args.ckpt_dir or comm.bcast(tempfile.mkdtemp(prefix="bench_pblas3_") if comm.rank == 0
                                                else None))
        ckpt = ftkit.Checkpointer(config=ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global",
                                                      meta_dir=root / "meta"), comm=comm)
    for case in args.cases:
        n, nb = map(int, case.split(","))
        ops = operands(grid, n, nb)
        for routine in args.routines:
            out = call(routine, n, ops, ckpt)  # warm-up (untimed)
            if args.check:
                verdict = check(routine, n, ops, out)
                if comm.rank == 0:
                    print(f"CHECK sys=ftkit routine={routine} grid={args.grid} n={n} nb={nb} {verdict}",
                          flush=True)
            for rep in range(args.reps):
                call(routine, n, ops, ckpt)
                t, cpu = call.last  # type: ignore[attr-defined]
                flops = FLOPS[routine.removeprefix("ft_").removesuffix("_ckpt")] * n**3
                if comm.rank == 0:
                    print(f"RES sys=ftkit routine={routine} grid={args.grid} n={n} nb={nb} rep={rep} "
                          f"t={t:.4f} gflops={flops / t / 1e9:.2f} cpu={cpu:.3f}", flush=True)
    if ckpt is not None:
        ckpt.finalize()


if __name__ == "__main__":
    main()
