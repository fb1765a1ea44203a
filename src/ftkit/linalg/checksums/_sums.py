"""The sums ABFT works with: segmentations, checksum encodings of op(A) and op(B), block sums of C, and
Higham's ``gamma_n`` (the contract is in :mod:`ftkit.linalg.checksums`, which re-exports everything here)."""

from __future__ import annotations

import numpy as np

from ...errors import ABFTArgumentError
from ..matrix import segment_bounds  # the one segmentation (layer 0), re-exported as checksums'
from ._block_kernels import block_sums_into
from ._kernels import encode_cols_into, encode_rows_into

__all__ = ["U", "ETA", "NCHK", "gamma", "checksum_kinds", "segment_bounds", "dense_bounds", "segment_weights",
           "encode_rows", "encode_cols", "check_kinds", "block_sums", "block_sums_sq", "abs_block_sums",
           "dense_encode", "dense_block_sums_sq"]

#: Unit roundoff of float64.
U = 2.0**-53
#: Smallest positive subnormal float64 (absolute error floor of a product that underflows).
ETA = 2.0**-1074
#: Most checksum rows (columns) per row (column) segment: plain, index-weighted, absolute, squares (the
#: squares only for the statistical threshold, :func:`checksum_kinds`).
NCHK = 4

def gamma(n: int | np.ndarray) -> float | np.ndarray:
    """Return Higham's ``gamma_n = n u / (1 - n u)``, the relative error bound of ``n`` roundings.

    Raises
    ------
    ABFTArgumentError
        If ``n u >= 1`` (no bound exists: the dimension is absurdly large).
    """
    nu = np.asarray(n, dtype=np.float64) * U
    if np.any(nu >= 1.0):
        raise ABFTArgumentError(f"gamma_n undefined for n = {n}: n * u must be < 1")
    out = nu / (1.0 - nu)
    return float(out) if np.ndim(out) == 0 else out


def checksum_kinds(tol: float | str | None) -> int:
    """Return how many checksum kinds (rows per row segment, columns per column segment) ``tol`` needs.

    4 (plain, weighted, absolute, squared) for ``"statistical"``, 3 otherwise: the rigorous and the numeric
    thresholds only need the magnitudes ``|A||B|``, so the squared sums are neither computed nor sent.
    """
    return NCHK if tol == "statistical" else NCHK - 1


# ------------------------------------------------------------------ segmentation
def dense_bounds(n: int, bs: int) -> np.ndarray:
    """Return the segment bounds of an undistributed dimension of length ``n``: ``0, bs, 2 bs, ..., n``."""
    return np.append(np.arange(0, n, bs, dtype=np.int64), n).astype(np.int64)


#: Weights of recently seen segmentations (read-only arrays): a checked product needs its row and column
#: weights four times (encoding, verification) and calls repeat with the same layout.
_WEIGHTS: dict[bytes, np.ndarray] = {}


def segment_weights(bounds: np.ndarray) -> np.ndarray:
    """Return the weight of every position: its 1-based index within its segment (float64, read-only)."""
    b = np.asarray(bounds, dtype=np.int64)
    key = b.tobytes()
    w = _WEIGHTS.get(key)
    if w is None:
        n = int(b[-1])
        pos = np.arange(n, dtype=np.int64)
        starts = np.repeat(b[:-1], np.diff(b))
        w = (pos - starts + 1).astype(np.float64)
        w.flags.writeable = False
        if len(_WEIGHTS) >= 64:
            _WEIGHTS.clear()
        _WEIGHTS[key] = w
    return w


def _seg_sum(x: np.ndarray, bounds: np.ndarray, axis: int) -> np.ndarray:
    """Sum ``x`` over each segment along ``axis`` (sequential within a segment: ``len - 1`` roundings)."""
    if bounds.size <= 1:
        shape = list(x.shape)
        shape[axis] = 0
        return np.zeros(shape)
    return np.add.reduceat(x, bounds[:-1], axis=axis)


# ------------------------------------------------------------------ encoding
def encode_rows(a: np.ndarray, bounds: np.ndarray, kinds: int = NCHK) -> np.ndarray:
    """Return the ``(kinds nseg, k)`` checksum rows of ``a`` (plain, weighted, absolute, squared segment sums;
    the squared ones only with ``kinds == 4``).

    Parameters
    ----------
    a
        ``(rows, k)`` local piece of op(A) (any memory order; F order is fastest).
    bounds
        Row segment bounds (:func:`segment_bounds`), ``bounds[-1] == rows``.
    kinds
        3 or 4 (:func:`checksum_kinds`).
    """
    out = np.empty((check_kinds(kinds) * (len(bounds) - 1), a.shape[1]), order="F")
    encode_rows_into(a, np.asarray(bounds, dtype=np.int64), segment_weights(bounds), out, False, kinds)
    return out


def encode_cols(b: np.ndarray, bounds: np.ndarray, kinds: int = NCHK) -> np.ndarray:
    """Return the ``(k, kinds nseg)`` checksum columns of ``b`` (plain, weighted, absolute, squared sums)."""
    out = np.empty((b.shape[0], check_kinds(kinds) * (len(bounds) - 1)), order="F")
    encode_cols_into(b, np.asarray(bounds, dtype=np.int64), segment_weights(bounds), out, False, kinds)
    return out


def check_kinds(kinds: int) -> int:
    if kinds not in (NCHK - 1, NCHK):
        raise ABFTArgumentError(f"kinds={kinds!r}: 3 (plain, weighted, absolute) or 4 (and squared)")
    return int(kinds)


# ------------------------------------------------------------------ block sums of C
def block_sums(
    c: np.ndarray, rb: np.ndarray, cb: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return the plain, row-, column- and doubly-weighted sums of every block of ``c`` (each ``(nr, nc)``).

    Summed in two stages (down each row segment of a column, then across the column segment) in one pass
    over ``c``, so each sum has at most ``r + c`` roundings, which the bounds assume. Non-finite elements
    stay in their own block. The sums of :func:`block_sums_sq` to the bit, without its squares (a pass
    ~5 % shorter: what a rigorous check needs).
    """
    nr, nc = len(rb) - 1, len(cb) - 1
    out = np.zeros((4, nr, nc))
    if nr and nc:
        block_sums_into(c, np.asarray(rb, dtype=np.int64), np.asarray(cb, dtype=np.int64),
                        segment_weights(rb), segment_weights(cb), out, _NO_COPY, _ALL_ROWS)
    ee, we, ew, ww = out
    return ee, we, ew, ww


#: "No copy" and "all rows kept" for :func:`~ftkit.linalg.checksums._block_kernels.block_sums_into`.
_NO_COPY = np.empty((0, 0), order="F")
_ALL_ROWS = np.empty((2, 0), dtype=np.int64)


def block_sums_sq(c: np.ndarray, rb: np.ndarray, cb: np.ndarray, *, with_abs: bool = False,
                  copy_to: np.ndarray | None = None, keep: np.ndarray | None = None,
                  zero_rest: bool = True) -> tuple[np.ndarray, ...]:
    """Return :func:`block_sums` plus every block's sum of squares (five ``(nr, nc)`` arrays, one pass);
    ``with_abs`` adds a sixth, the sums of absolute values (:func:`abs_block_sums`), in the same pass;
    ``keep`` (``(2, ncols)`` int64) takes only rows ``keep[0, j]:keep[1, j]`` of column ``j`` as ``c``'s,
    the others as zero (never read); ``copy_to`` (the segments covering all of ``c``) receives that ``c``,
    zeros included, in the same pass (without ``zero_rest``, only the kept rows)."""
    nr, nc = len(rb) - 1, len(cb) - 1
    out = np.zeros((6 if with_abs else 5, nr, nc))
    if nr and nc:
        block_sums_into(c, np.asarray(rb, dtype=np.int64), np.asarray(cb, dtype=np.int64),
                        segment_weights(rb), segment_weights(cb), out,
                        _NO_COPY if copy_to is None else copy_to, _ALL_ROWS if keep is None else keep,
                        zero_rest)
    return tuple(out)


def abs_block_sums(c: np.ndarray, rb: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Return the sum of ``|c|`` over every block (``(nr, nc)``)."""
    return _seg_sum(_seg_sum(np.abs(c), cb, 1), rb, 0)


# ------------------------------------------------------------------ the same sums, in numpy
# For check_product (one process, no fused copy to save): the settle phase of resilient_pdgemm verifies its
# recomputed tiles with it, often as a process's first ABFT work. A kernel's first call in a process sets up
# numba (0.35-0.6 s of CPU on 2 cores, whatever the data size), which then lands in the first failure's
# recovery; these cost a few memory passes over the operands instead, a few percent of the tile's GEMM.
def dense_encode(x: np.ndarray, bounds: np.ndarray, kinds: int, axis: int) -> np.ndarray:
    """Return :func:`encode_rows` (``axis=0``) or :func:`encode_cols` (``axis=1``) of ``x``, taken with numpy.

    The same sums (plain, weighted, absolute and with ``kinds == 4`` squared sums of each segment, stacked
    along ``axis``), added in another order: equal up to rounding, within the same bounds. One segment at a
    time, so the temporaries stay small.
    """
    b = np.asarray(bounds, dtype=np.int64)
    nseg, kinds = len(b) - 1, check_kinds(kinds)
    xs = x if axis == 0 else x.T  # segments along the first axis
    w = segment_weights(b)
    out = np.empty((kinds * nseg, xs.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: the block is unchecked, as in the kernels
        for s in range(nseg):
            lo, hi = int(b[s]), int(b[s + 1])
            seg = xs[lo:hi]
            out[s] = seg.sum(axis=0)
            out[nseg + s] = (w[lo:hi, None] * seg).sum(axis=0)
            out[2 * nseg + s] = np.abs(seg).sum(axis=0)
            if kinds == NCHK:
                out[3 * nseg + s] = np.square(seg).sum(axis=0)
    return out if axis == 0 else out.T


def dense_block_sums_sq(c: np.ndarray, rb: np.ndarray, cb: np.ndarray) -> tuple[np.ndarray, ...]:
    """Return :func:`block_sums_sq` of ``c``, taken with numpy.

    In the same two stages (down each row segment, then across the column segment): at most ``r + c``
    roundings per sum, non-finite elements stay in their own block.
    """
    rb, cb = np.asarray(rb, dtype=np.int64), np.asarray(cb, dtype=np.int64)
    if len(rb) <= 1 or len(cb) <= 1:
        return tuple(np.zeros((len(rb) - 1, len(cb) - 1)) for _ in range(5))
    c = c[: int(rb[-1]), : int(cb[-1])]
    wr, wc = segment_weights(rb)[:, None], segment_weights(cb)[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        down, down_w = _seg_sum(c, rb, 0), _seg_sum(wr * c, rb, 0)
        squares = _seg_sum(_seg_sum(np.square(c), rb, 0), cb, 1)
        return (_seg_sum(down, cb, 1), _seg_sum(down_w, cb, 1), _seg_sum(down * wc, cb, 1),
                _seg_sum(down_w * wc, cb, 1), squares)
