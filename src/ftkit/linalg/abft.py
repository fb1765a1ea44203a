"""Block checksums for ``C = alpha * op(A) @ op(B) + beta * C0``: encoding, bounds, verification, correction.

The contract (what every function here assumes and guarantees)
---------------------------------------------------------------
C's rows are cut into *row segments* and its columns into *column segments* (at most ``bs`` long, never
straddling a distribution block, so each segment lives on one process). Row segment ``I`` and column segment
``J`` make the C block ``C_IJ``. For each row segment of op(A) three checksum rows are kept, for each column
segment of op(B) three checksum columns (:data:`NCHK`):

- ``e^T A_I``     plain column sums          ``B_J e``     plain row sums
- ``w^T A_I``     index-weighted sums        ``B_J w``     index-weighted sums, ``w = (1, 2, ..., len)``
- ``e^T |A_I|``   sums of absolute values    ``|B_J| e``   sums of absolute values

They are computed from local data only and travel with the data (stacked under / beside the SUMMA panels).
Their products give, per block, the expected plain sum ``e^T C_IJ e``, the row-weighted sum
``w^T C_IJ e``, the column-weighted sum ``e^T C_IJ w`` and the magnitude ``M_IJ = e^T (|alpha||A||B| +
|beta||C0|)_IJ e`` that every rounding-error bound is proportional to.

Thresholds (per block, on the plain sum; the weighted sums get ``len`` times more)
---------------------------------------------------------------------------------
- ``rigorous``: an a-priori bound that holds for *any* summation order, with or without FMA, blocked or not,
  including underflow: ``(gamma_{k+4} + gamma_{r+c}(1+gamma_{k+4}) + gamma_{k+r+c+2}) * M / (1 - gamma_{k+r+c+2})
  + underflow term``, where ``gamma_n = n u / (1 - n u)``, ``u = 2**-53``, ``k`` the inner dimension and
  ``r, c`` the block's sides. The three terms are the error of the computed C, of summing the block, and of
  the checksum product. A correct computation is never flagged, at any scale.
- ``statistical``: rounding errors add up like a random walk (Higham & Mary, 2019), so the error is of order
  ``sqrt(n) u M``: ``lambda * u * sqrt(k + r + c + 4) * M`` with the safety factor :data:`STAT_LAMBDA`, set
  from measurement (see ``tests/linalg/test_abft_math.py`` and ``benchmarks/bench_abft.py``) so that no
  correct product among thousands of adversarial cases is flagged. It assumes independent roundings:
  strongly structured data (e.g. a constant matrix, where every dot product makes the same rounding error)
  can exceed it by up to ``sqrt(k)``. That is why a block flagged only by the statistical threshold is
  recomputed and then accepted if it passes the rigorous bound (reported as a rounding alarm, not an error).

Correction of one block
-----------------------
A single wrong element ``c_ij + d`` makes the residuals ``(d, i d, j d)`` (weights are 1-based), so
``i = r_w / r_e`` and ``j = r_w' / r_e`` locate it in O(1); it is then set to ``expected_sum - sum(others)``
and the block is re-verified against all three checksums. When the location is ambiguous (the error is too
close to the threshold) or re-verification fails (several wrong elements), the caller recomputes the block.

Block size rule (:func:`choose_bs`)
-----------------------------------
The smallest detectable error grows like ``2 bs^2 (k + 2 bs) u`` times the typical ``|A||B|`` element (the
rigorous threshold of a block of ``bs^2`` elements), the overhead like ``3/bs`` (panel data) + ``4/bs^2``
(checksum GEMM) of the multiply plus a fixed part (absolute values, block sums) that does not depend on ``bs``.
Measured on one process (n = 1024, panels of 512; ``/tmp``-style script in ``benchmarks/bench_abft.py
--bs-sweep``): checksum work 103 %, 74 %, 56 %, 43 %, 38 % of a (small, fast) GEMM for bs = 16 ... 256,
while the detection limit grows 4x per doubling. ``bs`` is therefore the largest power of two <= 256 that
divides both distribution block sizes and keeps ``2 bs^2 (k + 2 bs) u <= 2**-24``: a flip of the 20th mantissa
bit (``>= 2**-21`` relative) then exceeds the rigorous threshold 8x for data without cancellation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "U",
    "NCHK",
    "STAT_LAMBDA",
    "gamma",
    "segment_bounds",
    "dense_bounds",
    "indicator",
    "segment_weights",
    "encode_rows",
    "encode_cols",
    "ChecksumProduct",
    "block_sums",
    "abs_block_sums",
    "thresholds",
    "Verification",
    "verify_blocks",
    "locate_error",
    "correct_single",
    "correct_flagged",
    "choose_bs",
    "check_product",
]

#: Unit roundoff of float64.
U = 2.0 ** -53
#: Smallest positive subnormal float64 (absolute error floor of a product that underflows).
ETA = 2.0 ** -1074
#: Checksum rows (columns) per row (column) segment: plain, index-weighted, absolute.
NCHK = 3
#: Safety factor of the statistical threshold ``lambda * u * sqrt(n) * M``. Measured: the largest observed
#: ``|residual| / (u sqrt(n) M)`` over the adversarial false-positive families (1000s of blocks) is about 1
#: (uniform positive data, whose partial sums grow linearly); 5 leaves a 5x margin.
STAT_LAMBDA = 5.0


def gamma(n: int | np.ndarray) -> float | np.ndarray:
    """Return Higham's ``gamma_n = n u / (1 - n u)``, the relative error bound of ``n`` roundings.

    Raises
    ------
    ValueError
        If ``n u >= 1`` (no bound exists: the dimension is absurdly large).
    """
    nu = np.asarray(n, dtype=np.float64) * U
    if np.any(nu >= 1.0):
        raise ValueError(f"gamma_n undefined for n = {n}: n * u must be < 1")
    out = nu / (1.0 - nu)
    return float(out) if np.ndim(out) == 0 else out


# ------------------------------------------------------------------ segmentation
def segment_bounds(indices: np.ndarray, offset: int, nb: int, bs: int) -> np.ndarray:
    """Cut this process's local indices of a distributed dimension into checksum segments.

    Parameters
    ----------
    indices
        Increasing submatrix indices this process owns (``BlockCyclic1D.indices_on(p)``).
    offset
        Global index of submatrix index 0 (``ia`` / ``ic``).
    nb
        Distribution block size of the dimension.
    bs
        Checksum block size (>= 1); segments are at most ``bs`` long and never straddle a distribution block.

    Returns
    -------
    numpy.ndarray
        ``bounds`` (int64, length ``nseg + 1``): segment ``s`` is local positions ``bounds[s]:bounds[s+1]``.
    """
    if bs < 1:
        raise ValueError(f"bs must be >= 1, got {bs}")
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return np.zeros(1, dtype=np.int64)
    g = idx + int(offset)
    key = (g // nb) * (nb // bs + 2) + (g % nb) // bs
    # A new segment starts where the key changes or the indices jump (a gap means another owner in between).
    new = np.empty(idx.size, dtype=bool)
    new[0] = True
    new[1:] = (key[1:] != key[:-1]) | (np.diff(idx) != 1)
    return np.append(np.flatnonzero(new), idx.size).astype(np.int64)


def dense_bounds(n: int, bs: int) -> np.ndarray:
    """Return the segment bounds of an undistributed dimension of length ``n``: ``0, bs, 2 bs, ..., n``."""
    return np.append(np.arange(0, n, bs, dtype=np.int64), n).astype(np.int64)


def segment_weights(bounds: np.ndarray) -> np.ndarray:
    """Return the weight of every position: its 1-based index within its segment (float64)."""
    n = int(bounds[-1])
    pos = np.arange(n, dtype=np.int64)
    starts = np.repeat(bounds[:-1], np.diff(bounds))
    return (pos - starts + 1).astype(np.float64)


def _seg_sum(x: np.ndarray, bounds: np.ndarray, axis: int) -> np.ndarray:
    """Sum ``x`` over each segment along ``axis`` (sequential within a segment: ``len - 1`` roundings)."""
    if bounds.size <= 1:
        shape = list(x.shape)
        shape[axis] = 0
        return np.zeros(shape)
    return np.add.reduceat(x, bounds[:-1], axis=axis)


def indicator(bounds: np.ndarray) -> np.ndarray:
    """Return the ``(2 nseg, n)`` matrix whose rows sum a segment: plain rows, then index-weighted rows.

    Multiplying by it (a BLAS GEMM) sums each segment: the zeros outside the segment add exactly and the
    weights are small integers, so each result has at most ``len`` roundings, as the bounds assume; it is
    many times faster than ``np.add.reduceat`` on the strided panels SUMMA moves.
    """
    nseg = len(bounds) - 1
    n = int(bounds[-1])
    seg = np.repeat(np.arange(nseg), np.diff(bounds))
    out = np.zeros((2 * nseg, n))
    out[seg, np.arange(n)] = 1.0
    out[nseg + seg, np.arange(n)] = segment_weights(bounds)
    return out


# ------------------------------------------------------------------ encoding
def encode_rows(a: np.ndarray, bounds: np.ndarray, ind: np.ndarray | None = None) -> np.ndarray:
    """Return the ``(3 nseg, k)`` checksum rows of ``a`` (plain, weighted, absolute sums per row segment).

    Parameters
    ----------
    a
        ``(rows, k)`` local piece of op(A) (any memory order).
    bounds
        Row segment bounds (:func:`segment_bounds`), ``bounds[-1] == rows``.
    ind
        ``indicator(bounds)``, to reuse it across panels.
    """
    ind = indicator(bounds) if ind is None else ind
    nseg = len(bounds) - 1
    out = np.empty((3 * nseg, a.shape[1]), order="F")
    np.matmul(ind, a, out=out[:2 * nseg])
    np.matmul(ind[:nseg], np.abs(a), out=out[2 * nseg:])
    return out


def encode_cols(b: np.ndarray, bounds: np.ndarray, ind: np.ndarray | None = None) -> np.ndarray:
    """Return the ``(k, 3 nseg)`` checksum columns of ``b`` (plain, weighted, absolute sums per column segment)."""
    ind = indicator(bounds) if ind is None else ind
    nseg = len(bounds) - 1
    out = np.empty((b.shape[0], 3 * nseg))
    np.matmul(b, ind.T, out=out[:, :2 * nseg])
    np.matmul(np.abs(b), ind[:nseg].T, out=out[:, 2 * nseg:])
    return out


class ChecksumProduct:
    """Accumulate, panel by panel, the checksum products that predict every C block's sums.

    Parameters
    ----------
    nr, nc
        Number of row and column segments of this process's C.
    """

    def __init__(self, nr: int, nc: int) -> None:
        self.nr, self.nc = nr, nc
        self.ee = np.zeros((nr, nc))
        self.we = np.zeros((nr, nc))
        self.ew = np.zeros((nr, nc))
        self.ww = np.zeros((nr, nc))
        self.mabs = np.zeros((nr, nc))
        self.k = 0

    def add(self, achk: np.ndarray, bchk: np.ndarray) -> None:
        """Add one panel: ``achk`` ``(3 nr, kp)`` checksum rows, ``bchk`` ``(kp, 3 nc)`` checksum columns."""
        nr, nc = self.nr, self.nc
        if nr == 0 or nc == 0:
            self.k += achk.shape[1]
            return
        # plain and weighted A rows against plain and weighted B columns: [[ee, ew], [we, ww]]
        p = achk[:2 * nr] @ bchk[:, :2 * nc]
        self.ee += p[:nr, :nc]
        self.ew += p[:nr, nc:]
        self.we += p[nr:, :nc]
        self.ww += p[nr:, nc:]
        self.mabs += achk[2 * nr:] @ bchk[:, 2 * nc:]
        self.k += achk.shape[1]


# ------------------------------------------------------------------ block sums of C
def block_sums(c: np.ndarray, rb: np.ndarray, cb: np.ndarray, rind: np.ndarray | None = None,
               cind: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return the plain, row-, column- and doubly-weighted sums of every block of ``c`` (each ``(nr, nc)``).

    Summed in two stages (down each row segment, then across each column segment, by GEMMs with the
    :func:`indicator` matrices), so each sum has at most ``r + c`` roundings, which the bounds assume.
    ``rind``/``cind`` are the indicators of ``rb``/``cb`` (computed if not given).
    """
    nr, nc = len(rb) - 1, len(cb) - 1
    rind = indicator(rb) if rind is None else rind
    cind = indicator(cb) if cind is None else cind
    if nr == 0 or nc == 0:
        z = np.zeros((nr, nc))
        return z, z.copy(), z.copy(), z.copy()
    p = (rind @ c) @ cind.T                          # (2 nr, 2 nc): [[ee, ew], [we, ww]]
    if not np.all(np.isfinite(p)):
        # 0 * Inf = NaN would smear one non-finite element over every block of its row and column
        rows = _seg_sum(c, cb, 1)
        cols = _seg_sum(c, rb, 0)
        wrows = _seg_sum(c * segment_weights(cb)[None, :], cb, 1)
        wr, wc = segment_weights(rb)[:, None], segment_weights(cb)[None, :]
        return (_seg_sum(rows, rb, 0), _seg_sum(rows * wr, rb, 0), _seg_sum(cols * wc, cb, 1),
                _seg_sum(wrows * wr, rb, 0))
    return p[:nr, :nc].copy(), p[nr:, :nc].copy(), p[:nr, nc:].copy(), p[nr:, nc:].copy()


def abs_block_sums(c: np.ndarray, rb: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Return the sum of ``|c|`` over every block (``(nr, nc)``)."""
    return _seg_sum(_seg_sum(np.abs(c), cb, 1), rb, 0)


# ------------------------------------------------------------------ thresholds
def thresholds(mabs: np.ndarray, k: int, rlen: np.ndarray, clen: np.ndarray, *, tol: float | str | None = None,
               alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    """Return the per-block threshold on ``|actual plain sum - expected plain sum|``.

    Parameters
    ----------
    mabs
        ``(nr, nc)`` computed magnitudes ``M`` (``|alpha| (e^T|A|)(|B|e) + |beta| e^T|C0|e`` per block).
    k
        Inner dimension of the product.
    rlen, clen
        Lengths of the row and column segments (``np.diff`` of the bounds).
    tol
        ``None`` (rigorous bound), ``"statistical"``, or a number: a relative tolerance, ``tol * M``.
    alpha, beta
        The product's scalars (they scale the underflow term only; ``M`` already contains them).

    Raises
    ------
    ValueError
        If ``tol`` is neither ``None``, ``"statistical"`` nor a non-negative finite number.
    """
    r = np.asarray(rlen, dtype=np.float64)[:, None]
    c = np.asarray(clen, dtype=np.float64)[None, :]
    nel = r * c
    under = 2.0 * (nel + 1.0) * (k + 4.0) * ETA * (1.0 + abs(alpha) + abs(beta))
    if tol is None:
        gk = gamma(k + 4)
        gs = gamma(r + c)
        gx = gamma(k + r + c + 2)
        factor = (gk + gs * (1.0 + gk) + gx) / (1.0 - gx)
        # Round the bound itself up: a few ulps of the factor's own evaluation.
        return factor * mabs * (1.0 + 8 * U) + under
    if isinstance(tol, str):
        if tol != "statistical":
            raise ValueError(f"tol={tol!r}: use None (rigorous), 'statistical' or a relative tolerance number")
        return STAT_LAMBDA * U * np.sqrt(k + r + c + 4.0) * mabs + under
    t = float(tol)
    if not (math.isfinite(t) and t >= 0.0):
        raise ValueError(f"tol={tol!r}: a numeric tolerance must be finite and >= 0 (relative to |A||B| sums)")
    return t * mabs + under


# ------------------------------------------------------------------ verification
@dataclass
class Verification:
    """Residuals of every block against its checksums.

    ``res_*`` are actual minus expected sums, ``thr`` the plain-sum threshold, ``thr_r``/``thr_c``/``thr_rc``
    the thresholds of the row-, column- and doubly-weighted sums (the largest weight times ``thr``),
    ``flagged`` the blocks whose plain or weighted residual exceeds its threshold (or is not a number while
    the threshold is finite).
    """

    res_ee: np.ndarray
    res_we: np.ndarray
    res_ew: np.ndarray
    res_ww: np.ndarray
    thr: np.ndarray
    thr_r: np.ndarray
    thr_c: np.ndarray
    thr_rc: np.ndarray
    flagged: np.ndarray

    @property
    def max_ratio(self) -> float:
        """Largest ``|plain residual| / threshold`` over the blocks that are not flagged (0 if none)."""
        ok = ~self.flagged & (self.thr > 0) & np.isfinite(self.thr)
        if not np.any(ok):
            return 0.0
        return float(np.max(np.abs(self.res_ee[ok]) / self.thr[ok]))


def _exceeds(res: np.ndarray, thr: np.ndarray) -> np.ndarray:
    bad = ~(np.abs(res) <= thr)          # NaN residual counts as exceeding
    return bad & np.isfinite(thr)        # an overflowed magnitude cannot be checked


def verify_blocks(c: np.ndarray, rb: np.ndarray, cb: np.ndarray, expected: Sequence[np.ndarray],
                  thr: np.ndarray, rind: np.ndarray | None = None, cind: np.ndarray | None = None) -> Verification:
    """Compare the block sums of ``c`` with ``expected = (ee, we, ew, ww)`` under plain-sum thresholds ``thr``."""
    with np.errstate(over="ignore", invalid="ignore"):
        sums = block_sums(c, rb, cb, rind, cind)
        res = [s - e for s, e in zip(sums, expected, strict=True)]
    rl = np.diff(rb).astype(np.float64)[:, None]
    cl = np.diff(cb).astype(np.float64)[None, :]
    thr_r, thr_c, thr_rc = thr * rl, thr * cl, thr * (rl * cl)
    with np.errstate(invalid="ignore"):
        flagged = (_exceeds(res[0], thr) | _exceeds(res[1], thr_r) | _exceeds(res[2], thr_c)
                   | _exceeds(res[3], thr_rc))
    return Verification(res[0], res[1], res[2], res[3], thr, thr_r, thr_c, thr_rc, flagged)


def locate_error(block: np.ndarray, res_ee: float, res_we: float, res_ew: float, thr: float, thr_r: float,
                 thr_c: float) -> tuple[int, int] | None:
    """Return the ``(i, j)`` of the single wrong element the residuals point to, or ``None`` if ambiguous.

    O(1) from the residuals when they are finite: ``i = r_we / r_ee - 1`` (weights are 1-based), accepted only
    when its uncertainty from the thresholds is below half an index and the ratio is an integer within it.
    When the residuals are not finite (an exponent flip to Inf/NaN, or to a value so large the weighted sums
    overflow) the block is scanned for the non-finite or largest element (only then). The caller re-verifies.
    """
    r, c = block.shape
    if not (math.isfinite(res_ee) and math.isfinite(res_we) and math.isfinite(res_ew)):
        # Inf/NaN element, or one so large that the weighted sums overflowed: it is the odd one out
        bad = np.argwhere(~np.isfinite(block))
        if len(bad) == 1:
            return int(bad[0][0]), int(bad[0][1])
        if len(bad) == 0 and block.size:
            i, j = np.unravel_index(int(np.argmax(np.abs(block))), block.shape)
            return int(i), int(j)
        return None
    if res_ee == 0.0:
        return None
    fi, fj = res_we / res_ee, res_ew / res_ee
    if not (0.5 <= fi < r + 0.5 and 0.5 <= fj < c + 0.5):
        return None
    i, j = round(fi) - 1, round(fj) - 1
    # uncertainty of the ratios: the thresholds, plus the rounding of the block's own sums, which scales
    # with the (possibly huge, corrupted) block rather than with |A||B|; the ratio must be an integer within it
    own = float(gamma(r + c + 4)) * float(np.abs(block).sum()) / abs(res_ee)
    ui = (thr_r + abs(fi) * thr) / abs(res_ee) + (r + abs(fi)) * own
    uj = (thr_c + abs(fj) * thr) / abs(res_ee) + (c + abs(fj)) * own
    if ui >= 0.5 or uj >= 0.5 or abs(fi - (i + 1)) > ui or abs(fj - (j + 1)) > uj:
        return None
    return i, j


def correct_single(block: np.ndarray, expected: Sequence[float], thr: float, where: tuple[int, int]) -> bool:
    """Set element ``where`` of ``block`` (a view, changed in place) from the plain checksum and re-verify.

    The element becomes ``expected_sum - sum(other elements)``; the block is then accepted only if all four
    sums (plain, row-, column- and doubly-weighted) agree with their checksums within the thresholds: two
    wrong elements can mimic one in three of them by coincidence, hardly in all four. On failure the block is restored and ``False``
    returned (the caller recomputes it).
    """
    i, j = where
    old = block[i, j]
    block[i, j] = 0.0
    rb = np.array([0, block.shape[0]], dtype=np.int64)
    cb = np.array([0, block.shape[1]], dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        rest = block_sums(block, rb, cb)[0][0, 0]
        block[i, j] = expected[0] - rest
    v = verify_blocks(block, rb, cb, [np.array([[e]]) for e in expected], np.array([[thr]]))
    if v.flagged[0, 0] or not math.isfinite(block[i, j]):
        block[i, j] = old
        return False
    return True


def correct_flagged(c: np.ndarray, rb: np.ndarray, cb: np.ndarray, v: Verification,
                    expected: Sequence[np.ndarray]
                    ) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]]]:
    """Correct, in place and without recomputation, every flagged block of ``c`` that holds one wrong element.

    Returns ``(fixed, rest)``: ``fixed`` lists ``(I, J, i, j)`` (block and the element within it that was
    rewritten), ``rest`` the flagged blocks ``(I, J)`` that must be recomputed.
    """
    fixed: list[tuple[int, int, int, int]] = []
    rest: list[tuple[int, int]] = []
    for I, J in zip(*np.nonzero(v.flagged), strict=True):
        I, J = int(I), int(J)
        blk = c[rb[I]:rb[I + 1], cb[J]:cb[J + 1]]
        where = locate_error(blk, float(v.res_ee[I, J]), float(v.res_we[I, J]), float(v.res_ew[I, J]),
                             float(v.thr[I, J]), float(v.thr_r[I, J]), float(v.thr_c[I, J]))
        exp = [float(e[I, J]) for e in expected]
        if where is not None and correct_single(blk, exp, float(v.thr[I, J]), where):
            fixed.append((I, J, where[0], where[1]))
        else:
            rest.append((I, J))
    return fixed, rest


# ------------------------------------------------------------------ block size rule
def choose_bs(mb: int, nb: int, k: int) -> int:
    """Return the default checksum block size for distribution blocks ``mb x nb`` and inner dimension ``k``.

    The largest power of two <= 256 that divides ``gcd(mb, nb)`` and satisfies
    ``2 bs^2 (k + 2 bs) u <= 2**-24`` (see the module docstring); at least 1.
    """
    g = math.gcd(int(mb), int(nb)) or 1
    bs = 256
    while bs > 1 and (g % bs != 0 or 2 * bs * bs * (k + 2 * bs) * U > 2.0 ** -24):
        bs //= 2
    return bs


# ------------------------------------------------------------------ single-process convenience
def check_product(a: np.ndarray, b: np.ndarray, c: np.ndarray, *, alpha: float = 1.0, beta: float = 0.0,
                  c0: np.ndarray | None = None, bs: int = 32, tol: float | str | None = None) -> Verification:
    """Verify a dense ``c == alpha * a @ b + beta * c0`` block by block (one process, no communication).

    Raises
    ------
    ValueError
        On inconsistent shapes, a bad ``tol``, or ``beta != 0`` without ``c0``.
    """
    m, k = a.shape
    if b.shape[0] != k or c.shape != (m, b.shape[1]):
        raise ValueError(f"shapes do not match: a {a.shape}, b {b.shape}, c {c.shape}")
    rb, cb = dense_bounds(m, bs), dense_bounds(c.shape[1], bs)
    prod = ChecksumProduct(len(rb) - 1, len(cb) - 1)
    prod.add(encode_rows(a, rb), encode_cols(b, cb))
    exp = [alpha * prod.ee, alpha * prod.we, alpha * prod.ew, alpha * prod.ww]
    mabs = abs(alpha) * prod.mabs
    if beta != 0.0:
        if c0 is None:
            raise ValueError("beta != 0 needs c0, the C before the update")
        exp = [e + beta * s for e, s in zip(exp, block_sums(c0, rb, cb), strict=True)]
        mabs = mabs + abs(beta) * abs_block_sums(c0, rb, cb)
    thr = thresholds(mabs, k, np.diff(rb), np.diff(cb), tol=tol, alpha=alpha, beta=beta)
    return verify_blocks(c, rb, cb, exp, thr)
