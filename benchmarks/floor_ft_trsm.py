"""The least ``ft_pdtrsm``'s (or ``ft_pdtrmm``'s) checks can cost, pass by pass, beside the plain routine.

usage: ftkit launch -n 4 -- python benchmarks/floor_ft_trsm.py --grid 2x2 --n 4096 --nb 128 [--reps 3]
       [--routine trmm]

Every rank runs, alternately with a timed plain call and a timed ``ft_`` call (``bench_pblas3.py``'s call:
side L, lower, no transpose, non-unit, alpha 1), the passes over its own pieces that the scheme cannot do
without, all ranks at once (so they contend for the cores and memory as the routines' ranks do):

- ``copy``: the saved ``alpha B`` as a plain copy (``np.copyto`` into a buffer kept between calls): a
  re-solve (re-multiply) of a flagged column segment must start from exactly ``alpha B``, and the sweep
  overwrites ``B`` in place;
- ``read``: one compiled read pass over the result (the check must read every element of it after the
  sweep: a wrong element written after any in-sweep sums would not be seen);
- ``T``, ``T+sums``: the plain routine's one-pass triangle (``triangle_from``) and the ABFT one that also
  takes its checksum rows (``triangle_rows_from``), on the triangle's own piece: their difference is what
  summing ``T`` costs;
- ``copy+sums (now)``, ``result sums (now)``: the kernels the routine runs for the first two
  (TRSM: ``copy_block_sums``, ``encode_cols_into`` summing ``X``; TRMM: ``encode_cols_into`` copying,
  ``block_sums`` of the product: the four sums a rigorous check reads), for comparison.

Prints the medians (ms of CPU per rank and their sum) and, on rank 0, the floor (``copy + read`` and ``T``'s
sums) and the kernels as they are, each as a ratio to plain, beside the measured ``ft_`` ÷ plain. The
checksum products, exchanges and Python around them are not in the floor (about 2 ms per rank at n = 4096).
A measurement, not a benchmark: compare with ``bench_pblas3.py``'s ratios.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
from _phase_timer import TOTALS, print_medians, profile_call, profile_parser
from bench_pblas3 import operands
from mpi4py import MPI
from numba import njit

from ftkit import linalg
from ftkit.linalg import checksums
from ftkit.linalg.abft._solve_sums import SolveChecksums
from ftkit.linalg.checksums._kernels import encode_cols_into
from ftkit.linalg.checksums._tri_sums import copy_block_sums, triangle_rows_from
from ftkit.linalg.pblas._tri_kernel import triangle_from
from ftkit.linalg.pblas._tri_sweep import own_piece, tri_cols

PASSES = ("copy", "read", "T", "T+sums", "copy+sums (now)", "result sums (now)")


@njit(cache=True, nogil=True, fastmath=True)
def _read(w: np.ndarray) -> float:  # pragma: no cover - compiled
    s = 0.0
    for j in range(w.shape[1]):
        x = w[:, j]
        for i in range(x.shape[0]):
            s += x[i]
    return s


def _timed(name: str, fn, *args):  # type: ignore[no-untyped-def]
    c0 = time.process_time()
    out = fn(*args)
    TOTALS[name][0] += time.process_time() - c0
    return out


class _Passes:
    """The floor passes of one routine on this rank's pieces of the benchmark's operands (buffers made once
    and touched, as the routines' pooled buffers are)."""

    def __init__(self, T: linalg.DistributedMatrix, B: linalg.DistributedMatrix, routine: str) -> None:
        g, n = B.grid, B.desc.m
        rows, wcols = B.row_map(0, n), B.col_map(0, n)
        cols = tri_cols(rows, g.npcol)
        bs = checksums.choose_bs(rows.nb, wcols.nb, rows.n)
        self.chk = SolveChecksums(g, rows, cols, wcols, bs, True)
        own = own_piece(T, 0, 0, False, rows, cols)
        assert own is not None, "the benchmark's call copies T out of A's own piece"
        self.src, self.t = own
        self.t.fill(0.0)
        self.B, self.routine = B, routine
        w = B.local
        nc = len(self.chk.cl) - 1
        self.saved = np.zeros_like(w, order="F")
        self.wext = np.zeros((w.shape[0], w.shape[1] + 3 * nc), order="F")
        self.xext = np.zeros((w.shape[0], 3 * nc), order="F")
        self.text = np.zeros((3 * (len(self.chk.rl) - 1), self.t.shape[1]), order="F")
        self.bsums = np.zeros((4, len(self.chk.rl) - 1, nc))
        self.acc = np.zeros((w.shape[0], 3), order="F")

    def run(self) -> None:
        c, lay = self.chk, self.chk._lay
        w = self.B.local
        _timed("copy", np.copyto, self.saved, w)
        _timed("read", _read, w)
        _timed("T", triangle_from, self.src, self.t, lay.keep, lay.diag, False)
        _timed("T+sums", triangle_rows_from, self.src, self.t, lay.keep, lay.diag, False, c.rl, lay.rw,
               self.text, lay.place, 3)
        if self.routine == "trsm":
            _timed("copy+sums (now)", copy_block_sums, w, self.saved, c.rl, c.cl, lay.rw, c.cw, self.bsums,
                   self.acc)
            _timed("result sums (now)", encode_cols_into, w, c.cl, c.cw, self.xext, False, 3)
        else:
            _timed("copy+sums (now)", encode_cols_into, w, c.cl, c.cw, self.wext, True, 3)
            _timed("result sums (now)", checksums.block_sums, w, c.rl, c.cl)


def main() -> None:
    ap = profile_parser(__doc__)
    ap.add_argument("--routine", choices=("trsm", "trmm"), default="trsm")
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    ops = operands(grid, args.n, args.nb)
    T, B0 = ops["T"], ops["B"]
    plain = "pd" + args.routine
    passes = _Passes(T, B0.copy(), args.routine)
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    for rep in range(args.reps + 1):
        for routine in (plain, "ft_" + plain):
            B = B0.copy()
            fn = getattr(linalg, routine)
            got = profile_call(comm, lambda: fn("L", "L", "N", "N", args.n, args.n, 1.0, T, 0, 0, B, 0, 0))  # noqa: B023
            if rep:
                runs[routine].append(got)
        got = profile_call(comm, passes.run)
        if rep:
            runs["floor passes"].append(got)
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={args.n} nb={args.nb} reps={args.reps}", 20)

    def med(routine: str, phase: str) -> float:
        return float(np.median([r.get(phase, [0.0])[0] for r in runs[routine]]))

    mine = {"plain": med(plain, "TOTAL"), "ft": med("ft_" + plain, "TOTAL"),
            **{p: med("floor passes", p) for p in PASSES}}
    every = comm.gather(mine, root=0)
    if comm.rank:
        return
    tot = {k: sum(m[k] for m in every) * 1e3 for k in mine}
    t_sums = max(0.0, tot["T+sums"] - tot["T"])
    floor = tot["copy"] + tot["read"] + t_sums
    now = tot["copy+sums (now)"] + tot["result sums (now)"] + t_sums
    print(f"\nsum over ranks (ms CPU): {plain} {tot['plain']:.1f}, ft_{plain} {tot['ft']:.1f} (ratio "
          f"{tot['ft'] / tot['plain']:.3f}); passes: copy {tot['copy']:.1f}, read {tot['read']:.1f}, T "
          f"{tot['T']:.1f}, T+sums {tot['T+sums']:.1f}, copy+sums (now) {tot['copy+sums (now)']:.1f}, result "
          f"sums (now) {tot['result sums (now)']:.1f}")
    base = tot["plain"]
    print(f"floor (copy + read + T's sums) = {floor:.1f} ms: ratio {(base + floor) / base:.3f} to plain; the "
          f"kernels as they are = {now:.1f} ms: ratio {(base + now) / base:.3f}")


if __name__ == "__main__":
    main()
