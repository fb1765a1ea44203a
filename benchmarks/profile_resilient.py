"""Per-phase CPU and wall seconds of a plain level-3 routine and its ``resilient_`` version with protected
operands, per rank, interleaved.

usage: ftkit launch -n 4 -- python benchmarks/profile_resilient.py --grid 2x2 --n 4096 --nb 128 [--reps 3]
       [--routines pdtrmm pdsyrk]

Wraps the phases of :func:`~ftkit.linalg.resilient.engine.resilient_call` (building the unprotected operand,
saving the inputs, the protect phase's barrier, each SUMMA call, the rest of the iterate phase, the
agreement, the decision's hold, recording the state, removing the call's files or keeping them for the next
call on the handle: ``store.retire``) with timers that count
exclusive time (a phase nested in another is subtracted from it), runs each routine and its ``resilient_``
version alternately with the operands the benchmark uses (``bench_pblas3.py``: side L, lower, "N"; SYRK
lower "N" with beta 1), the fixed operands protected once, untimed, and prints per routine and rank the
median over ``--reps`` repetitions (after one untimed warm-up) of each phase's CPU seconds
(``time.process_time``) and wall seconds, then the sum of CPU over ranks. A profile, not a benchmark: take
the ratios from ``bench_pblas3.py --side-by-side``.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _phase_timer import print_medians, profile_call, profile_parser, timed
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.resilient import engine
from ftkit.storage.inputs import CheckpointFileStore


def _install() -> None:
    for name in ("build_operands", "_save", "_synchronize", "_iterate", "run_summa", "_agree",
                 "hold_decision", "record_failures", "resilient_call"):
        setattr(engine, name, timed(name, getattr(engine, name)))
    for name in ("save", "remove", "retire"):
        setattr(CheckpointFileStore, name, timed(f"store.{name}", getattr(CheckpointFileStore, name)))


def _operands(grid: linalg.ProcessGrid, n: int, nb: int) -> dict[str, linalg.DistributedMatrix]:
    T = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    rows, cols = T.global_rows()[:, None], T.global_cols()[None, :]
    T.local[...] = np.where(rows == cols, n + np.abs(T.local), T.local)
    B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    C = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
    return {"T": T, "B": B, "C": C}


def _run(routine: str, n: int, ops: dict[str, linalg.DistributedMatrix], store: Any) -> None:
    fn = getattr(linalg, routine)
    kw = {"store": store} if routine.startswith("resilient_") else {}
    if routine.endswith("pdtrmm"):
        fn("L", "L", "N", "N", n, n, 1.0, ops["T"], 0, 0, ops["B"].copy(), 0, 0, **kw)
    else:
        fn("L", "N", n, n, 1.0, ops["B"], 0, 0, 1.0, ops["C"].copy(), 0, 0, **kw)


def main() -> None:
    ap = profile_parser(__doc__)
    ap.add_argument("--routines", nargs="+", default=["pdtrmm", "pdsyrk"], choices=["pdtrmm", "pdsyrk"])
    ap.add_argument("--store", default=None, help="store directory (default: a temporary one, removed)")
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    n = args.n
    ops = _operands(grid, n, args.nb)
    root = args.store or comm.bcast(tempfile.mkdtemp(prefix="profile_resilient_") if comm.rank == 0 else None)
    store = str(Path(root) / "inputs")
    handles = {"pdtrmm": linalg.protect_pdtrmm("L", "L", "N", "N", n, n, ops["T"], 0, 0, ops["B"], 0, 0,
                                               store=store),
               "pdsyrk": linalg.protect_pdsyrk("L", "N", n, n, ops["B"], 0, 0, ops["C"], 0, 0, store=store)}
    _install()
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    names = [r for base in args.routines for r in (base, f"resilient_{base}")]
    for rep in range(args.reps + 1):
        for routine in names:
            handle = handles[routine.removeprefix("resilient_")]
            got = profile_call(comm, lambda: _run(routine, n, ops, handle))  # noqa: B023
            if rep:
                runs[routine].append(got)
    for h in handles.values():
        h.release()
    comm.Barrier()  # every rank has released its pieces
    left = sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*") if p.is_file())
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={n} nb={args.nb} reps={args.reps}", 18)
    if comm.rank == 0:
        print(f"\nfiles left in the store after release: {left or 'none'}")
    comm.Barrier()
    if not args.store and comm.rank == 0:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
