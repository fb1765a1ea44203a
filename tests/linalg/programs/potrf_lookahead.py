"""PDPOTRF's look-ahead against the sequential schedule, on one grid: the factor, the not-positive-definite
report and a resume at a panel boundary.

usage: potrf_lookahead.py NPROW NPCOL (NPROW * NPCOL ranks)

The sequential reference is the schedule without look-ahead, written here from the panel engine's own steps
(factor and broadcast the diagonal block, solve and broadcast the panel, gather it, one update of the whole
trailing matrix): the same GEMM per block column, so the look-ahead must give its result bit for bit. Cases
(``uplo`` L and U; n not a multiple of nb; offsets; aligned and redistributed work matrices):

- SPD: ``pdpotrf``'s factor equals the reference's bit for bit (and ``L L.T`` reconstructs A), and
  ``ft_pdpotrf``'s equals ``pdpotrf``'s bit for bit;
- not positive definite, the bad minor in panel 0 (the prologue), in the first column of panel 1 and inside
  panel 2 (both factored by the look-ahead, before the previous panel's update has finished) and in the last
  panel: ``FactorizationError`` with the same minor on every rank, and A left bit for bit as the reference
  leaves it;
- resume: the factored columns ``< e_k`` taken when ``run`` reports panel ``k`` done, put into a fresh work
  copy of A whose trailing matrix is then rebuilt (``ft_pdpotrf``'s restart) and factored from panel ``k+1``:
  the factor bit for bit.

Rank 0 prints ``CASE ...`` / ``FAIL ...`` per case and ``DONE cases=C failures=F``.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.cholesky._column_recompute import rebuild_trailing
from ftkit.linalg.cholesky._lookahead import factor_panels
from ftkit.linalg.cholesky.potrf import CholeskyWork

# (n, mb, nb, ia, ja, size of A): aligned (mb == nb, ia % nb == ja % nb) and redistributed layouts
LAYOUTS = [(45, 6, 6, 0, 0, 45), (50, 7, 7, 3, 3, 55), (37, 5, 4, 2, 1, 41)]


def _spd(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(-1, 1, (n, n))
    return x @ x.T + n * np.eye(n)


def _sequential(work: CholeskyWork) -> int:
    """The schedule without look-ahead: every panel factored, solved, sent and applied in turn."""
    st = work.steps
    for k in range(len(st.panels)):
        bad, low = st.factor_diagonal(k)
        if bad >= 0:
            return bad
        assert low is not None
        mine = st.solve_panel(k, low)
        pieces = st.gather(mine.reshape(-1, order="F"), k, mine.shape[1])
        st.apply_update(k, mine, st.column_rows(k, [st.rows_of(k, pc) for pc in pieces]))
    return -1


def _factor(how: str, grid: linalg.ProcessGrid, a_g: np.ndarray, lay: tuple, uplo: str) -> tuple:
    """Factor with ``how`` ("lookahead", "sequential", "ft"); return (A after, minor or 0)."""
    n, mb, nb, ia, ja, _ = lay
    A = linalg.DistributedMatrix.from_global(grid, a_g, mb=mb, nb=nb)
    try:
        if how == "ft":
            linalg.ft_pdpotrf(uplo, n, A, ia, ja)
        elif how == "lookahead":
            linalg.pdpotrf(uplo, n, A, ia, ja)
        else:
            work = CholeskyWork(uplo, n, A, ia, ja)
            bad = _sequential(work)
            work.write_back()
            if bad >= 0:
                return A.to_global(), bad + 1
    except linalg.FactorizationError as e:
        return A.to_global(), e.minor
    return A.to_global(), 0


def _resumed(grid: linalg.ProcessGrid, a_g: np.ndarray, lay: tuple, uplo: str, k: int) -> np.ndarray:
    """Factor, keep the factored columns < e_k when panel k is reported done, resume at k+1 from them."""
    n, mb, nb, ia, ja, _ = lay
    A = linalg.DistributedMatrix.from_global(grid, a_g, mb=mb, nb=nb)
    first = CholeskyWork(uplo, n, A, ia, ja)
    saved: dict[str, np.ndarray] = {}

    def keep(j: int) -> None:
        if j == k:
            saved["w"] = first.w.copy()
    factor_panels(first.steps, 0, keep)
    e = first.steps.panels[k][1]
    cols = first.cols.indices_on(grid.mycol) < e  # the factored columns: what ft_pdpotrf checkpoints
    A = linalg.DistributedMatrix.from_global(grid, a_g, mb=mb, nb=nb)
    work = CholeskyWork(uplo, n, A, ia, ja)
    work.w[:, cols] = saved["w"][:, cols]
    rebuild_trailing(work.steps, k + 1)
    work.factor("PDPOTRF", k + 1)
    return A.to_global()


def main() -> int:
    nprow, npcol = int(sys.argv[1]), int(sys.argv[2])
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, nprow, npcol)
    comm, cases, failures = grid.comm, 0, 0

    def report(ok: bool, name: str) -> None:
        nonlocal cases, failures
        ok = bool(comm.allreduce(int(not ok))) is False
        cases, failures = cases + 1, failures + (not ok)
        if comm.rank == 0:
            print(f"{'CASE' if ok else 'FAIL'} {nprow}x{npcol} {name}", flush=True)

    for li, lay in enumerate(LAYOUTS):
        n, mb, nb, ia, ja, size = lay
        for uplo in "LU":
            a = np.full((size, size), np.nan)
            a[ia:ia + n, ja:ja + n] = _spd(n, li)
            got, m1 = _factor("lookahead", grid, a, lay, uplo)
            ref, m0 = _factor("sequential", grid, a, lay, uplo)
            ft, m2 = _factor("ft", grid, a, lay, uplo)
            f = got[ia:ia + n, ja:ja + n]
            low = np.tril(f) if uplo == "L" else np.triu(f).T
            close = np.allclose(low @ low.T, a[ia:ia + n, ja:ja + n], rtol=1e-12, atol=1e-9)
            same = np.array_equal(got, ref, equal_nan=True) and np.array_equal(ft, got, equal_nan=True)
            report(m0 == m1 == m2 == 0 and same and close, f"{lay} {uplo} spd: bitwise={same} close={close}")
            blocks = CholeskyWork(uplo, n, linalg.DistributedMatrix.from_global(grid, a, mb=mb, nb=nb), ia,
                                  ja).steps.panels
            panels = len(blocks)
            # the bad pivot: in panel 0, at the first column of panel 1, inside panel 2, in the last one
            for c in (min(1, blocks[0][1] - 1), blocks[1][0], (blocks[2][0] + blocks[2][1]) // 2, n - 1):
                bad = a.copy()
                sub = bad[ia:ia + n, ja:ja + n]
                chol = np.linalg.cholesky(sub)
                sub[c, c] = chol[c, :c] @ chol[c, :c] - 1.0
                got, m1 = _factor("lookahead", grid, bad, lay, uplo)
                ref, m0 = _factor("sequential", grid, bad, lay, uplo)
                minors = comm.allgather(m1)
                same = np.array_equal(got, ref, equal_nan=True)
                report(m0 == c + 1 and set(minors) == {c + 1} and same,
                       f"{lay} {uplo} minor {c + 1}: got {sorted(set(minors))} state bitwise={same}")
            for k in sorted({0, 1, panels - 2}):
                if 0 <= k < panels - 1:
                    res = _resumed(grid, a, lay, uplo, k)
                    ref, _ = _factor("sequential", grid, a, lay, uplo)
                    same = np.array_equal(res, ref, equal_nan=True)
                    report(same, f"{lay} {uplo} resumed after panel {k}: bitwise={same}")
    if comm.rank == 0:
        print(f"DONE cases={cases} failures={failures}", flush=True)
    grid.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
