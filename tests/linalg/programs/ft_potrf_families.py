"""FT_PDPOTRF on SPD matrices of the hard families on a 2x2 grid: no false positive (rigorous and
``"statistical"`` thresholds, several checksum heights, offsets, aligned and redistributed layouts) and the
factor is PDPOTRF's bit for bit.

usage: ft_potrf_families.py (4 ranks)

Families: uniform ``R R.T / n + I``, tiny (``1e-8`` times it), huge (``1e8``), graded (``D S D`` with ``D``
over 8 orders), Hilbert plus ``1e-3 I`` (condition ~1e3 .. 1e5), cancelling (``S - (1 - 1e-6) s v v.T``, a
nearly singular update of a well-conditioned one). Rank 0 prints ``CASE`` / ``FAIL`` lines and
``DONE failures=F``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ftkit import linalg


def spd(family: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """An ``n x n`` symmetric positive definite matrix of ``family``."""
    r = rng.standard_normal((n, n))
    s = r @ r.T / n + np.eye(n)
    if family == "tiny":
        return 1e-8 * s
    if family == "huge":
        return 1e8 * s
    if family == "graded":
        d = 10.0 ** rng.uniform(-4, 4, n)
        return d[:, None] * s * d[None, :]
    if family == "hilbert":
        i = np.arange(n)
        return 1.0 / (i[:, None] + i[None, :] + 1.0) + 1e-3 * np.eye(n)
    if family == "cancel":
        v = rng.standard_normal(n)
        v /= np.linalg.norm(v)
        lo = np.linalg.eigvalsh(s)[0]
        return s + 1e3 * np.outer(v, v) - (1.0 - 1e-6) * lo * np.eye(n) + 1e-6 * np.eye(n)
    return s


def main() -> int:
    grid = linalg.ProcessGrid(MPI.COMM_WORLD, 2, 2)
    rng = np.random.default_rng(17)
    failures = 0
    for family in ("uniform", "tiny", "huge", "graded", "hilbert", "cancel"):
        for uplo, mb, off, bs, tol in (("L", 8, 0, None, None), ("U", 8, 3, 5, "statistical"),
                                       ("L", 6, 2, 3, None)):
            n = 90
            a = spd(family, n + off, rng)
            ref = linalg.DistributedMatrix.from_global(grid, a, mb=mb, nb=8)
            linalg.pdpotrf(uplo, n, ref, off, off)
            A = linalg.DistributedMatrix.from_global(grid, a, mb=mb, nb=8)
            rep = linalg.ft_pdpotrf(uplo, n, A, off, off, bs=bs, tol=tol)
            same = bool(np.array_equal(A.to_global(), ref.to_global()))
            ok = rep.detected == 0 and rep.unchecked == 0 and rep.blocks_checked > 0 and same
            failures += not ok
            if grid.rank == 0:
                print(f"{'CASE' if ok else 'FAIL'} {family} uplo={uplo} mb={mb} off={off} bs={bs} tol={tol} "
                      f"detected={rep.detected} checked={rep.blocks_checked} bitwise={same}", flush=True)
    if grid.rank == 0:
        print(f"DONE failures={failures}", flush=True)
    grid.free()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
