"""The least ``ft_pdpotrf``'s present checks can cost, measured pass by pass beside plain ``pdpotrf``.

usage: ftkit launch -n 4 -- python benchmarks/floor_ft_potrf.py --grid 2x2 --n 4096 --nb 128 [--reps 3]

Every rank runs, alternately with a timed plain ``pdpotrf`` (its ``apply_update`` timed apart: the big
GEMMs' rate), the passes over its own piece of the matrix that the scheme cannot do without, on the
factorization's own layout (:class:`UpdateChecks`' segments and block columns), all ranks at once (so they
contend for the cores and memory as the factorization's ranks do):

- ``read``: one read pass over the lower block trapezoid (compiled, vectorized);
- ``copy``: the saved copy of it as ``CholeskyWork`` takes it (numpy block copies);
- ``copy+sums``: the copy and the initial plain and weighted segment sums in one compiled pass;
- ``init (now)``: ``UpdateChecks.init`` as it is (a separate pass of small products), for comparison;
- ``carry gemm``: the carry's products alone (``carry_blocks``' dgemm calls, no row sums), every panel;
- ``carry rowsums``: the receivers' row sums of the rows of P they multiply, every panel;
- ``panel sums``: one read pass over this process's rows of each panel (what ``encode`` must read);
- ``panel exact sums`` / ``panel segment sums``: the two passes the check takes instead
  (``_kernels.exact_sums``: the row sums, sums of squares and column sums in the receivers' fixed orders, so
  no reassociation; the segment sums as one product with the encoder), for comparison: a compiled pass that
  took all four sums at once measured 1.3-2.3x the two (one process, in cache: ``exact_sums``' fixed orders
  keep it from vectorizing);
- ``panel copy``: one copy of them (the solve check keeps the panel's values, ``before``, for locating a
  wrong one while the solution is checked: the solution and the values are both needed at that moment, and
  the solution must end in both ``W`` and the send buffer, so one copy more than plain's solve);
- ``solve check``: the check's product of the panel's segment sums with ``L_kk^T`` (``check_solve``);
- ``diagonal``: one read pass over each diagonal block (its verification before it is factored);
- ``big gemm``: the update's GEMMs' shape, for the rate.

It prints the medians (ms of CPU per rank and their sum) and, on rank 0, the floor: the copy with its sums,
the carry's flops at the big GEMMs' rate, the panel sums and the receivers' row sums, the panel copy and the
checks (solve check, diagonal), as a ratio to plain.
A measurement, not a benchmark: compare with ``bench_pblas3.py``'s ratios.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
from _phase_timer import TOTALS, print_medians, profile_call, profile_parser, timed
from bench_pblas3 import operands
from mpi4py import MPI
from numba import njit

from ftkit import linalg
from ftkit.linalg import _blas
from ftkit.linalg.cholesky import _steps
from ftkit.linalg.cholesky._abft import UpdateChecks
from ftkit.linalg.cholesky._kernels import copy_checksums, exact_sums, row_sums
from ftkit.linalg.cholesky.potrf import CholeskyWork


@njit(cache=True, nogil=True, fastmath=True)
def _read(w: np.ndarray, clo: np.ndarray, cend: np.ndarray, r0: np.ndarray) -> float:  # pragma: no cover
    s = 0.0
    for j in range(clo.shape[0]):
        for c in range(clo[j], cend[j]):
            for i in range(r0[j], w.shape[0]):
                s += w[i, c]
    return s


@njit(cache=True, nogil=True)
def _carry_gemms(dgemm, colp, sums, chk_t, c0, starts, firsts, ii0):  # type: ignore[no-untyped-def]
    ldp, lds, ldc = colp.strides[1] // 8, sums.strides[1] // 8, chk_t.strides[1] // 8  # pragma: no cover
    flops = 0.0
    for j in range(firsts.shape[0]):
        a, b = starts[j], starts[j + 1]
        n = chk_t.shape[1] - 2 * firsts[j]
        if b <= a or n <= 0:
            continue
        dgemm(102, 111, 112, b - a, n, colp.shape[1], -1.0, colp.ctypes.data + 8 * a, ldp,
              sums.ctypes.data + 8 * 2 * (firsts[j] - ii0), lds, 1.0,
              chk_t.ctypes.data + 8 * (c0 + a + ldc * 2 * firsts[j]), ldc)
        flops += 2.0 * (b - a) * n * colp.shape[1]
    return flops


def _timed(name: str, fn, *args):  # type: ignore[no-untyped-def]
    c0 = time.process_time()
    out = fn(*args)
    TOTALS[name][0] += time.process_time() - c0
    return out


def _passes(S: linalg.DistributedMatrix, n: int, flops: dict[str, float]) -> None:
    """Every floor pass once, on a work copy of ``S``'s layout."""
    A = S.copy()
    work = CholeskyWork("L", n, A, 0, 0, in_place=True)
    st = work.steps
    ch = UpdateChecks(st, None)
    w = st.w
    saved = np.zeros_like(w, order="F")  # touched: the pooled buffer ft_pdpotrf copies into is reused
    first_row = np.array([ch.rlo[s] for s in ch._cseg], np.int64)
    cend = ch._cend[1:]
    _timed("read", _read, w, ch.clo, cend, first_row)
    _timed("copy", work._copy_lower, w, saved, True)
    _timed("copy+sums", copy_checksums, w, saved, ch.chk_t, ch.rlo, ch.clo, cend, ch._cseg, ch.wts)
    _timed("init (now)", ch.init, 0)
    nb = st.rows.nb
    rng = np.random.default_rng(0)
    big = np.asfortranarray(rng.standard_normal((w.shape[0], nb)))
    panel_to = np.zeros_like(big, order="F")
    low = np.asfortranarray(np.tril(rng.standard_normal((nb, nb))))
    prod = np.zeros((2 * len(ch.rblk) + 2, nb), order="F")
    flops["big"] = flops["carry"] = flops["update"] = 0.0
    for k in range(len(st.panels)):
        jj0 = int(np.searchsorted(ch.cblk, k + 1))
        if jj0 == len(ch.cblk):
            continue
        c0 = int(ch.clo[jj0])
        ncol = w.shape[1] - c0
        colp = big[:ncol] if ncol <= big.shape[0] else np.asfortranarray(rng.standard_normal((ncol, nb)))
        ii0 = int(ch.seg0[k + 1])
        nrow = w.shape[0] - int(ch.rlo[ii0])
        sums = np.asfortranarray(big[:max(2 * (len(ch.rblk) - ii0), 1)])
        starts = ch._cend[jj0:] - c0
        flops["carry"] += _timed("carry gemm", _carry_gemms, _blas._dgemm, colp, sums, ch.chk_t, c0, starts,
                                 ch._cseg[jj0:], ii0)
        got = np.empty(ncol)
        _timed("carry rowsums", row_sums, colp, got)
        if st.grid.mycol == int(st.cols.owners[st.panels[k][0]]):  # the panel's rows: read once
            pr = big[:nrow]
            _timed("panel sums", _read, pr, np.zeros(1, np.int64), np.array([nb], np.int64),
                   np.zeros(1, np.int64))
            _timed("panel copy", np.copyto, panel_to[:nrow], pr)
            if nrow % nb == 0:  # every segment nb rows (the default bs): the check's compiled case
                mine = np.asfortranarray(pr)  # contiguous, as the encoded buffer's rows
                rs, sq, cs = np.empty(nrow), np.empty(nrow), np.empty(nb)
                _timed("panel exact sums", exact_sums, mine, rs, sq, cs)
                segs = np.empty((2 * (nrow // nb), nb), order="F")
                _timed("panel segment sums", _blas.gemm_update, 1.0, ch._enc_t,
                       mine.reshape((nb, -1), order="F"), segs.reshape((2, -1), order="F"), 0.0)
            nseg2 = 2 * (len(ch.rblk) - ii0)
            _timed("solve check", _blas.gemm_update, 1.0, big[:nseg2], low.T, prod[:nseg2], 0.0)
        if st.owns_diagonal(k):
            s_k, e_k = st.panels[k]
            d = w[st.rows.range_on(st.grid.myrow, s_k, e_k), st.cols.range_on(st.grid.mycol, s_k, e_k)]
            _timed("diagonal", _read, d, np.zeros(1, np.int64), np.array([d.shape[1]], np.int64),
                   np.zeros(1, np.int64))
        for j in range(jj0, len(ch.cblk)):
            r = int(ch.rlo[ch._cseg[j]]) if ch._cseg[j] < len(ch.rblk) else w.shape[0]
            flops["update"] += 2.0 * (w.shape[0] - r) * (ch._cend[j + 1] - ch.clo[j]) * nb
    c = np.zeros((w.shape[0], nb), order="F")
    for _ in range(4):
        _timed("big gemm", _blas.gemm_update, -1.0, big, big[:nb].T, c)
        flops["big"] += 2.0 * w.shape[0] * nb * nb


def main() -> None:
    args = profile_parser(__doc__).parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    S = operands(grid, args.n, args.nb)["S"]
    _steps.CholeskySteps.apply_update = timed("apply_update", _steps.CholeskySteps.apply_update)
    runs: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
    flops: dict[str, float] = {}
    for rep in range(args.reps + 1):
        A = S.copy()
        got = profile_call(comm, lambda: linalg.pdpotrf("L", args.n, A, 0, 0))  # noqa: B023
        floor = profile_call(comm, lambda: _passes(S, args.n, flops))
        if rep:
            runs["pdpotrf"].append(got)
            runs["floor passes"].append(floor)
    print_medians(comm, runs, f"{{routine}} grid={args.grid} n={args.n} nb={args.nb} reps={args.reps}", 20)

    def med(routine: str, phase: str) -> float:
        return float(np.median([r.get(phase, [0.0])[0] for r in runs[routine]]))

    mine = {"plain": med("pdpotrf", "TOTAL"), "upd": med("pdpotrf", "apply_update"),
            **{p: med("floor passes", p) for p in ("read", "copy", "copy+sums", "carry gemm", "carry rowsums",
                                                   "panel sums", "big gemm", "init (now)", "panel copy",
                                                   "solve check", "diagonal", "panel exact sums",
                                                   "panel segment sums")}}
    every = comm.gather((mine, flops), root=0)
    if comm.rank:
        return
    tot = {k: sum(m[k] for m, _ in every) for k in mine}
    fl = {k: sum(f[k] for _, f in every) for k in every[0][1]}
    rate = fl["update"] / tot["upd"]
    carry_at_rate = fl["carry"] / rate
    floor = (tot["copy+sums"] + carry_at_rate + tot["carry rowsums"] + tot["panel sums"] + tot["panel copy"]
             + tot["solve check"] + tot["diagonal"])
    print(f"\nsum over ranks (ms CPU): plain {tot['plain'] * 1e3:.1f}, its updates {tot['upd'] * 1e3:.1f} "
          f"({fl['update'] / 1e9:.2f} GFLOP: {rate / 1e9:.1f} GFLOP/s per CPU second); big gemm alone "
          f"{fl['big'] / tot['big gemm'] / 1e9:.1f} GFLOP/s; carry {fl['carry'] / 1e9:.3f} GFLOP = "
          f"{fl['carry'] / fl['update']:.4f} of the update: {carry_at_rate * 1e3:.1f} ms at the updates' "
          f"rate, {tot['carry gemm'] * 1e3:.1f} ms as its own dgemm calls "
          f"({fl['carry'] / tot['carry gemm'] / 1e9:.1f} GFLOP/s)")
    print(f"passes: read {tot['read'] * 1e3:.1f}, copy {tot['copy'] * 1e3:.1f}, copy+sums "
          f"{tot['copy+sums'] * 1e3:.1f}, init as it is {tot['init (now)'] * 1e3:.1f}, receivers' row sums "
          f"{tot['carry rowsums'] * 1e3:.1f}, panel sums {tot['panel sums'] * 1e3:.1f}, panel copy "
          f"{tot['panel copy'] * 1e3:.1f}, solve check {tot['solve check'] * 1e3:.1f}, diagonal "
          f"{tot['diagonal'] * 1e3:.1f}; the check's sums as taken: exact "
          f"{tot['panel exact sums'] * 1e3:.1f} + segment {tot['panel segment sums'] * 1e3:.1f}")
    print(f"floor (copy+sums + carry at rate + row sums + panel sums + panel copy + checks) = "
          f"{floor * 1e3:.1f} ms: ratio "
          f"{(tot['plain'] + floor) / tot['plain']:.3f} to plain")


if __name__ == "__main__":
    main()
