"""Per-phase CPU and wall seconds of ``pdtrsm`` / ``ft_pdtrsm`` (or ``pdtrmm`` / ``ft_pdtrmm``), per rank,
interleaved.

usage: ftkit launch -n 4 -- python benchmarks/profile_ft_trsm.py --grid 2x2 --n 4096 --nb 128 [--reps 3]
       [--routine trmm]

The benchmark's call (``bench_pblas3.py``: side L, lower, no transpose, non-unit, alpha 1, a well-conditioned
triangle, B uniform) on fresh copies of B, the plain and the ABFT routine alternately (``--reps`` times each
after one untimed warm-up of each). Timed apart: the sweep's arithmetic and its waits for the broadcasts, the
triangle (plain: ``triangle_operand``; ABFT: ``SolveChecksums.make_triangle`` / ``triangle_with_checksums``),
the checksums' set-up, the copy and sums of ``alpha B`` (``SolveChecksums.encode`` / ``_encode``, their
kernels apart), the check (``residuals``, its products and all-gather; ``block_sums_sq`` and
``verify_blocks``) with its waits apart,
and the report. Prints, per routine and rank, the median of each phase's exclusive CPU and wall seconds,
then the sum over ranks; ``(arrive sweep)`` / ``(leave sweep)`` are wall seconds from the call's start to
the sweep's start / end on that rank (not phases: left out of ``(rest)``). A profile, not a benchmark: use
``bench_pblas3.py`` for the ratios.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
from _phase_timer import TOTALS, print_medians, profile_call, profile_parser, timed
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg import checksums
from ftkit.linalg.abft import _solve_sums, _tri_product, level3, product
from ftkit.linalg.pblas import _tri_kernel, _tri_sweep, triangular

_MARKS = ("(arrive sweep)", "(leave sweep)")
_START: list[float] = [0.0]


def _marked_sweep(fn: Any) -> Any:
    """``fn`` (the sweep) timed, noting the wall seconds from the call's start to its start and end."""
    inner = timed("sweep", fn)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        TOTALS[_MARKS[0]][1] = time.perf_counter() - _START[0]
        try:
            return inner(*args, **kwargs)
        finally:
            TOTALS[_MARKS[1]][1] = time.perf_counter() - _START[0]
    return wrapper


def _install() -> None:
    cls = _solve_sums.SolveChecksums
    for name in ("__init__", "make_triangle", "encode", "t_blocks", "residuals", "_gather", "_send_t_sums"):
        setattr(cls, name, timed(f"SolveChecksums.{name}", getattr(cls, name)))
    for mod in (level3, triangular, _tri_product):
        mod.sweep = _marked_sweep(mod.sweep)  # type: ignore[attr-defined]
    _tri_sweep.wait_requests = timed("wait: sweep broadcasts", _tri_sweep.wait_requests)  # type: ignore[attr-defined]
    for mod in (_solve_sums, _tri_product, product):
        mod.wait_requests = timed("wait: checksums", mod.wait_requests)  # type: ignore[attr-defined]
    triangular.triangle_operand = timed("triangle_operand", triangular.triangle_operand)  # type: ignore[attr-defined]
    _solve_sums.encode_cols_into = timed("kernel encode_cols_into (X)", _solve_sums.encode_cols_into)  # type: ignore[attr-defined]
    _solve_sums.copy_block_sums = timed("kernel copy_block_sums (B)", _solve_sums.copy_block_sums)  # type: ignore[attr-defined]
    _tri_product.encode_cols_into = timed("kernel encode_cols_into (B)", _tri_product.encode_cols_into)  # type: ignore[attr-defined]
    for name in ("triangle_rows_into", "triangle_piece"):
        setattr(_solve_sums, name, timed(f"kernel {name}", getattr(_solve_sums, name)))
    _tri_kernel.triangle_in_place = timed("kernel triangle_in_place", _tri_kernel.triangle_in_place)
    _tri_sweep.triangle_piece = timed("kernel triangle_piece", _tri_sweep.triangle_piece)
    level3._check_solution = timed("_check_solution", level3._check_solution)  # type: ignore[attr-defined]
    level3.triangle_with_checksums = timed("triangle_with_checksums", level3.triangle_with_checksums)  # type: ignore[attr-defined]
    _tri_product._encode = timed("_encode", _tri_product._encode)  # type: ignore[attr-defined]
    for name in ("block_sums", "block_sums_sq", "verify_blocks"):
        setattr(checksums, name, timed(name, getattr(checksums, name)))
    _tri_product._verify_and_correct = timed("_verify_and_correct", _tri_product._verify_and_correct)  # type: ignore[attr-defined]
    _tri_product._report_of = timed("_report_of", _tri_product._report_of)  # type: ignore[attr-defined]
    _tri_product._reduce = timed("_reduce", _tri_product._reduce)  # type: ignore[attr-defined]
    for name in ("add", "predict"):
        setattr(checksums.ChecksumProduct, name, timed(f"ChecksumProduct.{name}",
                                                       getattr(checksums.ChecksumProduct, name)))
    level3.segmentation = timed("segmentation", level3.segmentation)  # type: ignore[attr-defined]
    level3.Threshold.bounds = timed("Threshold.bounds", level3.Threshold.bounds)  # type: ignore[method-assign]


def main() -> None:
    ap = profile_parser(__doc__)
    ap.add_argument("--routine", choices=("trsm", "trmm"), default="trsm")
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    n, nb = args.n, args.nb
    T = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    rows, cols = T.global_rows()[:, None], T.global_cols()[None, :]
    T.local[...] = np.where(rows == cols, n + np.abs(T.local), T.local)
    B0 = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    _install()
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    results: dict[str, np.ndarray] = {}
    plain = "pd" + args.routine
    for rep in range(args.reps + 1):
        for routine in (plain, "ft_" + plain):
            B = B0.copy()
            fn = getattr(linalg, routine)

            def run() -> None:
                _START[0] = time.perf_counter()
                fn("L", "L", "N", "N", n, n, 1.0, T, 0, 0, B, 0, 0)  # noqa: B023

            got = profile_call(comm, run)
            marks = {k: got.pop(k) for k in _MARKS if k in got}
            got["(rest)"] = [got["(rest)"][0], got["(rest)"][1] + sum(v[1] for v in marks.values())]
            got.update(marks)
            results[routine] = B.local
            if rep:
                runs[routine].append(got)
    same = comm.allreduce(bool(np.array_equal(results[plain], results["ft_" + plain])), op=MPI.LAND)
    if comm.rank == 0:
        print(f"ft_{plain}'s result bit for bit {plain}'s: {same}")
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={n} nb={nb} reps={args.reps}", 34)


if __name__ == "__main__":
    main()
