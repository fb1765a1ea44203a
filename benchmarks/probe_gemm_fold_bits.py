"""Does OpenBLAS's dgemm keep a block's bits when extra rows are multiplied with it in the same call?

usage: OPENBLAS_NUM_THREADS=1 python benchmarks/probe_gemm_fold_bits.py [--shapes 600] [--seed 0]

The question behind folding ft_pdpotrf's carried checksum rows into the trailing update's GEMM (one call
updates ``[chk; W_J] -= [sums; P_J] P_J'.T``): the data rows must come out bit for bit as plain pdpotrf's
call on ``W_J`` alone makes them. For random shapes ``C (m x n) -= A (m x k) B (k x n)`` (``B`` given as a
transposed row-major view, as the Cholesky update's ``colp[cl].T``), this compares the ``m`` data rows of the
plain call with those of one call on ``m + q`` rows, the ``q`` extra rows placed below the data (``below``)
or above it (``above``, ``q`` a multiple of 8), and prints one JSON line per placement: how many shapes kept
the bits, split by whether ``m % 8 == 0`` and whether the plain call is small (``m n k <= 1e6``: OpenBLAS's
small-matrix kernel on SkylakeX), with a few failing shapes.

Found on this machine (OpenBLAS 0.3.31, SkylakeX kernels, 1 and 2 threads): with ``m % 8 == 0`` and
``k <= 300`` every shape kept its bits (either placement); otherwise rows of the last ``m % 8`` differ (the
tail of the 8-row tiles), and with ``k = 500`` some small shapes differ (the plain call takes the small
kernel, the bigger one the blocked path that splits ``k``). A fold guard is therefore ``m % 8 == 0`` and no
split of ``k``; see the report of issue #33 for why the fold did not pay anyway.
"""

from __future__ import annotations

import argparse
import collections
import json

import numpy as np

from ftkit.linalg._blas import HAVE_CBLAS, gemm_update


def probe(rng: np.random.Generator, place: str, shapes: int) -> dict[str, object]:
    """Compare the data rows of the plain and the extended call on ``shapes`` random shapes."""
    kept: collections.Counter[str] = collections.Counter()
    bad: list[tuple[int, int, int, int]] = []
    for t in range(shapes):
        k = int(rng.choice([1, 3, 17, 64, 100, 128, 200, 256, 300, 500]))
        n = int(rng.integers(1, 300)) if t % 2 else int(rng.choice([8, 16, 32, 64, 128]))
        m = int(rng.integers(1, 2400)) if t % 3 else int(rng.integers(1, 70))
        if t % 4 == 0:
            m = 8 * max(1, m // 8)
        q = 8 * int(rng.integers(1, 9)) if place == "above" else int(rng.integers(1, 70))
        a = np.asfortranarray(rng.standard_normal((m + q, k)))
        bt = np.ascontiguousarray(rng.standard_normal((n, k)))
        c = np.asfortranarray(rng.standard_normal((m + q + 5, n)))
        plain, folded = c.copy(order="F"), c.copy(order="F")
        d0 = q if place == "above" else 0  # the data rows' first row in the extended call
        gemm_update(-1.0, a[d0:d0 + m], bt.T, plain[d0:d0 + m])
        gemm_update(-1.0, a, bt.T, folded[:m + q])
        same = bool(np.array_equal(plain[d0:d0 + m], folded[d0:d0 + m]))
        kept[f"m%8{'==' if m % 8 == 0 else '!='}0,{'small' if m * n * k <= 1e6 else 'big'},{same}"] += 1
        if not same and len(bad) < 12:
            bad.append((m, q, n, k))
    return {"place": place, "shapes": shapes, "counts": dict(sorted(kept.items())), "failing (m,q,n,k)": bad}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not HAVE_CBLAS:
        raise SystemExit("numpy's OpenBLAS CBLAS symbols were not found: nothing to probe")
    rng = np.random.default_rng(args.seed)
    for place in ("below", "above"):
        print(json.dumps(probe(rng, place, args.shapes)), flush=True)


if __name__ == "__main__":
    main()
