"""Block checksums for ``C = alpha * op(A) @ op(B) + beta * C0``: encoding, bounds, verification, correction.

The contract (what every function here assumes and guarantees)
---------------------------------------------------------------
C's rows are cut into *row segments* and its columns into *column segments* (at most ``bs`` long, never
straddling a distribution block, so each segment lives on one process). Row segment ``bi`` and column segment
``bj`` make the C block ``C_IJ``. For each row segment of op(A) up to four checksum rows are kept, for each
column segment of op(B) up to four checksum columns (:data:`NCHK`; :func:`checksum_kinds` says how many a
threshold needs: the squares only serve the statistical one):

- ``e^T A_I``     plain column sums          ``B_J e``     plain row sums
- ``w^T A_I``     index-weighted sums        ``B_J w``     index-weighted sums, ``w = (1, 2, ..., len)``
- ``e^T |A_I|``   sums of absolute values    ``|B_J| e``   sums of absolute values
- ``e^T A_I^2``   sums of squares            ``B_J^2 e``   sums of squares (statistical threshold only)

They are computed from local data only and travel with the data (stacked under / beside the SUMMA panels).
Their products give, per block, the expected plain sum ``e^T C_IJ e``, the row-weighted sum
``w^T C_IJ e``, the column-weighted sum ``e^T C_IJ w`` and the magnitude ``M_IJ = e^T (|alpha||A||B| +
|beta||C0|)_IJ e`` that every rounding-error bound is proportional to.

Thresholds (per block, on the plain sum; the weighted sums get ``len`` times more)
---------------------------------------------------------------------------------
- ``rigorous``: an a-priori bound that holds for *any* summation order, with or without FMA, blocked or not,
  including underflow:
  ``(gamma_{k+4} + gamma_{r+c}(1+gamma_{k+4}) + gamma_{k+r+c+2}) * M / (1 - gamma_{k+r+c+2})
  + underflow term``, where ``gamma_n = n u / (1 - n u)``, ``u = 2**-53``, ``k`` the inner dimension and
  ``r, c`` the block's sides. The three terms are the error of the computed C, of summing the block, and of
  the checksum product. A correct computation is never flagged, at any scale.
- ``statistical``: rounding errors add up like a random walk (Higham & Mary, 2019). A sum computed in
  ``n`` steps errs by about ``u sqrt(sum of squared partial sums / 3)``; its partial sums drift towards the
  total (``k S^2 / 3``) and wander with the terms (``k / 2 * sum of squared terms``). Applied to the
  checksum product and to the elements of C (whose errors add independently over the block), with
  ``S`` the expected block sum, ``T2`` the sum over k of squared checksum products, ``P2 = sum_k
  (sum_i a_il^2)(sum_j b_lj^2)`` (from a fourth checksum, sums of squares) and ``Q`` the block's sum of
  squares of the computed C: ``V = k/3 (S^2 + Q) + (k/2 + r + c)(T2 + P2) + (r + c) Q`` and the threshold is
  ``lambda u sqrt(V)`` with the safety factor :data:`STAT_LAMBDA` (set from measurement), never above the
  rigorous one. A corrupted element inflates ``Q`` by its own square only, i.e. the threshold by about
  ``lambda u sqrt(k)`` times the error: detection is unaffected. It adapts to cancellation (mixed signs
  give small partial sums), which a bound in ``|A||B|`` cannot. It assumes independent roundings:
  strongly structured data (e.g. a constant matrix, where every dot product makes the same rounding error)
  can exceed it; a block flagged only by the statistical threshold is therefore recomputed and accepted if
  it then passes the rigorous bound (reported as a rounding alarm, not an error).

Correction of one block
-----------------------
A single wrong element ``c_ij + d`` makes the residuals ``(d, i d, j d)`` (weights are 1-based), so
``i = r_w / r_e`` and ``j = r_w' / r_e`` locate it in O(1); it is then set to ``expected_sum - sum(others)``
and the block is re-verified against all three checksums. When the location is ambiguous (the error is too
close to the threshold) or re-verification fails (several wrong elements), the caller recomputes the block.

Block size rule (:func:`choose_bs`)
-----------------------------------
The smallest detectable error grows like ``2 bs^2 (k + 2 bs) u`` times the typical ``|A||B|`` element (the
rigorous threshold of a block of ``bs^2`` elements), the cost like ``3/bs`` (``4/bs`` statistical: extra
panel rows/columns) + ``5/bs^2`` (checksum GEMMs) of the multiply, plus memory passes that do not depend on
``bs`` (encoding the pieces, verifying C), which dominate on a single node. Measured
(``benchmarks/bench_abft.py --quick --bs 32 64 128 256``, 2 x 2, n = 2048, shared machine): the CPU-time
overhead does not improve measurably beyond bs = 64 (noise +-10 %), the statistical threshold's tightness
stays 12-16x whatever bs, while the rigorous detection limit grows 4x per doubling. ``bs`` is therefore the
largest power of two <= 256 that divides both distribution block sizes and keeps ``2 bs^2 (k + 2 bs) u <=
2**-24``: a flip of the 20th mantissa bit (``>= 2**-21`` relative) then exceeds the rigorous threshold 8x for
data without cancellation (bs = 128 for k = 4096).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ABFTArgumentError
from ._abft_kernels import block_sums_into, encode_cols_into, encode_rows_into

__all__ = [
    "U",
    "NCHK",
    "checksum_kinds",
    "STAT_LAMBDA",
    "gamma",
    "segment_bounds",
    "dense_bounds",
    "segment_weights",
    "encode_rows",
    "encode_cols",
    "ChecksumProduct",
    "block_sums",
    "block_sums_sq",
    "Prediction",
    "summarize_c0",
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
U = 2.0**-53
#: Smallest positive subnormal float64 (absolute error floor of a product that underflows).
ETA = 2.0**-1074
#: Most checksum rows (columns) per row (column) segment: plain, index-weighted, absolute, squares (the
#: squares only for the statistical threshold, :func:`checksum_kinds`).
NCHK = 4
#: Safety factor of the statistical threshold ``lambda * u * sqrt(V)``. Measured (1500 random products of
#: every adversarial family, bs 1..64, k up to 1500): the largest ``|residual| / (u sqrt(V))`` is 1.1-1.8 for
#: uniform, normal, tiny, huge, cancelling and mixed-scale data, 2.3 for Hilbert-like data; 8 leaves a 3.4x
#: margin while
#: the threshold stays within ~5-10x of the observed residuals (the tightness bench_abft.py reports).
STAT_LAMBDA = 8.0


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
        raise ABFTArgumentError(f"bs must be >= 1, got {bs}")
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
    out = np.empty((_kinds(kinds) * (len(bounds) - 1), a.shape[1]), order="F")
    encode_rows_into(a, np.asarray(bounds, dtype=np.int64), segment_weights(bounds), out, False, kinds)
    return out


def encode_cols(b: np.ndarray, bounds: np.ndarray, kinds: int = NCHK) -> np.ndarray:
    """Return the ``(k, kinds nseg)`` checksum columns of ``b`` (plain, weighted, absolute, squared sums)."""
    out = np.empty((b.shape[0], _kinds(kinds) * (len(bounds) - 1)), order="F")
    encode_cols_into(b, np.asarray(bounds, dtype=np.int64), segment_weights(bounds), out, False, kinds)
    return out


def _kinds(kinds: int) -> int:
    if kinds not in (NCHK - 1, NCHK):
        raise ABFTArgumentError(f"kinds={kinds!r}: 3 (plain, weighted, absolute) or 4 (and squared)")
    return int(kinds)


class ChecksumProduct:
    """Accumulate, panel by panel, the checksum products that predict every C block's sums.

    Parameters
    ----------
    nr, nc
        Number of row and column segments of this process's C.
    kinds
        Checksum kinds per segment (:func:`checksum_kinds`): 4 feeds the statistical threshold's second
        moment ``p2``; with 3 the prediction has no ``p2`` (the statistical threshold then takes its coarse
        form).
    """

    def __init__(self, nr: int, nc: int, kinds: int = NCHK) -> None:
        self.nr, self.nc, self.kinds = nr, nc, _kinds(kinds)
        self.ee = np.zeros((nr, nc))
        self.we = np.zeros((nr, nc))
        self.ew = np.zeros((nr, nc))
        self.ww = np.zeros((nr, nc))
        self.mabs = np.zeros((nr, nc))
        self.t2 = np.zeros((nr, nc))  # sum over k of (plain checksum products)^2
        self.p2 = np.zeros((nr, nc))  # sum over k of (A squares sums) (B squares sums)
        self.k = 0

    def add(self, achk: np.ndarray, bchk: np.ndarray) -> None:
        """Add one panel: ``achk`` ``(kinds nr, kp)`` checksum rows, ``bchk`` ``(kp, kinds nc)`` columns."""
        nr, nc = self.nr, self.nc
        if nr == 0 or nc == 0:
            self.k += achk.shape[1]
            return
        # plain and weighted A rows against plain and weighted B columns: [[ee, ew], [we, ww]]
        p = achk[: 2 * nr] @ bchk[:, : 2 * nc]
        self.ee += p[:nr, :nc]
        self.ew += p[:nr, nc:]
        self.we += p[nr:, :nc]
        self.ww += p[nr:, nc:]
        self.mabs += achk[2 * nr : 3 * nr] @ bchk[:, 2 * nc : 3 * nc]
        with np.errstate(over="ignore", invalid="ignore"):  # overflow marks the block unchecked
            self.t2 += np.square(achk[:nr]) @ np.square(bchk[:, :nc])
            if self.kinds == NCHK:
                self.p2 += achk[3 * nr : 4 * nr] @ bchk[:, 3 * nc : 4 * nc]
        self.k += achk.shape[1]

    def predict(
        self, alpha: float, beta: float, c0_sums: tuple[Sequence[np.ndarray], np.ndarray] | None = None
    ) -> Prediction:
        """Return the expected block sums and magnitudes of ``alpha * op(A) @ op(B) + beta * C0``.

        ``c0_sums`` (from :func:`summarize_c0`, taken before the update) is needed when ``beta != 0``.
        """
        exp = [alpha * self.ee, alpha * self.we, alpha * self.ew, alpha * self.ww]
        mabs = abs(alpha) * self.mabs
        t2 = alpha * alpha * self.t2
        p2 = alpha * alpha * self.p2 if self.kinds == NCHK else None
        if beta != 0.0:
            if c0_sums is None:
                raise ABFTArgumentError("beta != 0 needs the block sums of c0, the C before the update")
            s0, a0 = c0_sums
            exp = [e + beta * x for e, x in zip(exp, s0[:4], strict=True)]
            mabs = mabs + abs(beta) * a0
            p2 = p2 + beta * beta * s0[4] if p2 is not None else None
        return Prediction(exp, mabs, t2, p2, self.k)


def summarize_c0(c0: np.ndarray, rb: np.ndarray, cb: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Return what a prediction needs from the C before the update: its block sums (with squares) and
    absolute block sums."""
    return block_sums_sq(c0, rb, cb), abs_block_sums(c0, rb, cb)


@dataclass
class Prediction:
    """What the checksums predict for every block: ``expected`` sums (plain, row-, column-, doubly-weighted),
    the magnitude ``mabs`` of the rigorous bound, the second moments ``t2`` / ``p2`` of the statistical one
    (see :func:`thresholds`; ``p2`` is ``None`` without the squared checksums, and the statistical threshold
    then takes its coarse form), and the inner dimension ``k``."""

    expected: list[np.ndarray]
    mabs: np.ndarray
    t2: np.ndarray
    p2: np.ndarray | None
    k: int

    def thresholds(
        self,
        rb: np.ndarray,
        cb: np.ndarray,
        tol: float | str | None,
        alpha: float,
        beta: float,
        csq: np.ndarray | None = None,
    ) -> np.ndarray:
        """Per-block thresholds (:func:`thresholds`); ``csq`` = block sums of squares of the computed C.

        A block whose checksum product overflowed (its second moments ``t2``/``p2`` are not finite: values
        beyond about ``1e154``, or ``Inf``/``NaN``, in its rows of op(A) or columns of op(B)) gets an infinite
        threshold: its checksums cannot be trusted, so it is unchecked (:class:`Verification`), not checked
        against a bound that no longer means anything.
        """
        thr = thresholds(
            self.mabs,
            self.k,
            np.diff(rb),
            np.diff(cb),
            tol=tol,
            alpha=alpha,
            beta=beta,
            s=self.expected[0],
            t2=self.t2,
            p2=self.p2,
            csq=csq,
        )
        overflowed = ~np.isfinite(self.t2)
        if self.p2 is not None:
            overflowed |= ~np.isfinite(self.p2)
        return np.where(overflowed, np.inf, thr) if overflowed.any() else thr


# ------------------------------------------------------------------ block sums of C
def block_sums(
    c: np.ndarray, rb: np.ndarray, cb: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return the plain, row-, column- and doubly-weighted sums of every block of ``c`` (each ``(nr, nc)``).

    Summed in two stages (down each row segment of a column, then across the column segment) in one pass
    over ``c``, so each sum has at most ``r + c`` roundings, which the bounds assume. Non-finite elements
    stay in their own block.
    """
    ee, we, ew, ww, _ = block_sums_sq(c, rb, cb)
    return ee, we, ew, ww


def block_sums_sq(c: np.ndarray, rb: np.ndarray, cb: np.ndarray) -> tuple[np.ndarray, ...]:
    """Return :func:`block_sums` plus every block's sum of squares (five ``(nr, nc)`` arrays, one pass)."""
    nr, nc = len(rb) - 1, len(cb) - 1
    out = np.zeros((5, nr, nc))
    if nr and nc:
        block_sums_into(
            c,
            np.asarray(rb, dtype=np.int64),
            np.asarray(cb, dtype=np.int64),
            segment_weights(rb),
            segment_weights(cb),
            out,
        )
    return out[0], out[1], out[2], out[3], out[4]


def abs_block_sums(c: np.ndarray, rb: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Return the sum of ``|c|`` over every block (``(nr, nc)``)."""
    return _seg_sum(_seg_sum(np.abs(c), cb, 1), rb, 0)


# ------------------------------------------------------------------ thresholds
def thresholds(
    mabs: np.ndarray,
    k: int,
    rlen: np.ndarray,
    clen: np.ndarray,
    *,
    tol: float | str | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    s: np.ndarray | None = None,
    t2: np.ndarray | None = None,
    p2: np.ndarray | None = None,
    csq: np.ndarray | None = None,
) -> np.ndarray:
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
    s, t2, p2, csq
        Statistical model inputs (all ``(nr, nc)``, see the module docstring): expected plain sums, sums of
        squared checksum products, of products of squared-sum checksums (+ ``beta^2`` C0's squares), and the
        computed C's sums of squares. Without them the statistical threshold falls back to
        ``lambda u sqrt(k + r + c + 4) M``.

    Raises
    ------
    ABFTArgumentError
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
            raise ABFTArgumentError(
                f"tol={tol!r}: use None (rigorous), 'statistical' or a relative tolerance number"
            )
        rig = thresholds(mabs, k, rlen, clen, alpha=alpha, beta=beta)
        coarse = STAT_LAMBDA * U * np.sqrt(k + r + c + 4.0) * mabs + under
        if s is None or t2 is None or p2 is None or csq is None:
            return np.minimum(coarse, rig)
        with np.errstate(over="ignore", invalid="ignore"):
            v = (k / 3.0) * (s * s + csq) + (k / 2.0 + r + c) * (t2 + p2) + (r + c) * csq
            fine = STAT_LAMBDA * U * np.sqrt(v) + under
        # a corrupted C can make csq non-finite: fall back to the |A||B| form there
        fine = np.where(np.isfinite(fine), fine, coarse)
        return np.minimum(fine, rig)
    t = float(tol)
    if not (math.isfinite(t) and t >= 0.0):
        raise ABFTArgumentError(
            f"tol={tol!r}: a numeric tolerance must be finite and >= 0 (relative to |A||B| sums)"
        )
    return t * mabs + under


# ------------------------------------------------------------------ verification
@dataclass
class Verification:
    """Residuals of every block against its checksums.

    ``res_*`` are actual minus expected sums, ``thr`` the plain-sum threshold, ``thr_r``/``thr_c``/``thr_rc``
    the thresholds of the row-, column- and doubly-weighted sums (the largest weight times ``thr``),
    ``flagged`` the blocks whose plain or weighted residual exceeds its threshold (or is not a number while
    the threshold is finite), ``unchecked`` the blocks that could not be checked at all: their expected sums
    or their threshold are not finite (an ``Inf``/``NaN`` in op(A) or op(B), or an overflow of the
    checksums), so no residual means anything. An unchecked block is never flagged and never counted as
    checked.
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
    unchecked: np.ndarray

    @property
    def max_ratio(self) -> float:
        """Largest ``|plain residual| / threshold`` over the blocks that are not flagged (0 if none)."""
        ok = ~self.flagged & (self.thr > 0) & np.isfinite(self.thr)
        if not np.any(ok):
            return 0.0
        return float(np.max(np.abs(self.res_ee[ok]) / self.thr[ok]))


def _exceeds(res: np.ndarray, thr: np.ndarray) -> np.ndarray:
    bad = ~(np.abs(res) <= thr)  # NaN residual counts as exceeding
    return bad & np.isfinite(thr)  # an overflowed magnitude cannot be checked


def verify_blocks(
    c: np.ndarray,
    rb: np.ndarray,
    cb: np.ndarray,
    expected: Sequence[np.ndarray],
    thr: np.ndarray,
    sums: Sequence[np.ndarray] | None = None,
) -> Verification:
    """Compare the block sums of ``c`` with ``expected = (ee, we, ew, ww)`` under plain-sum thresholds
    ``thr``.

    ``sums`` are ``c``'s block sums if already computed (:func:`block_sums` / :func:`block_sums_sq`).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        sums = (block_sums(c, rb, cb) if sums is None else sums)[:4]
        res = [s - e for s, e in zip(sums, expected, strict=True)]
    rl = np.diff(rb).astype(np.float64)[:, None]
    cl = np.diff(cb).astype(np.float64)[None, :]
    thr_r, thr_c, thr_rc = thr * rl, thr * cl, thr * (rl * cl)
    unchecked = ~np.isfinite(thr)
    for e in expected:
        unchecked |= ~np.isfinite(e)
    with np.errstate(invalid="ignore"):
        flagged = (
            _exceeds(res[0], thr)
            | _exceeds(res[1], thr_r)
            | _exceeds(res[2], thr_c)
            | _exceeds(res[3], thr_rc)
        ) & ~unchecked
    return Verification(res[0], res[1], res[2], res[3], thr, thr_r, thr_c, thr_rc, flagged, unchecked)


def locate_error(
    block: np.ndarray, res_ee: float, res_we: float, res_ew: float, thr: float, thr_r: float, thr_c: float
) -> tuple[int, int] | None:
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
            flat = int(np.argmax(np.abs(block)))
            return flat // c, flat % c
        return None
    if res_ee == 0.0:
        return None
    fi, fj = res_we / res_ee, res_ew / res_ee
    if not (0.5 <= fi < r + 0.5 and 0.5 <= fj < c + 0.5):
        return None
    i, j = int(round(fi)) - 1, int(round(fj)) - 1
    # uncertainty of the ratios: the thresholds, plus the rounding of the block's own sums, which scales
    # with the (possibly huge, corrupted) block rather than with |A||B|; the ratio must be an integer
    # within it
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
    wrong elements can mimic one in three of them by coincidence, hardly in all four. On failure the block
    is restored and ``False``
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


def correct_flagged(
    c: np.ndarray, rb: np.ndarray, cb: np.ndarray, v: Verification, expected: Sequence[np.ndarray]
) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]]]:
    """Correct, in place and without recomputation, every flagged block of ``c`` that holds one wrong element.

    Returns ``(fixed, rest)``: ``fixed`` lists ``(bi, bj, i, j)`` (block and the element within it that was
    rewritten), ``rest`` the flagged blocks ``(bi, bj)`` that must be recomputed.
    """
    fixed: list[tuple[int, int, int, int]] = []
    rest: list[tuple[int, int]] = []
    for bi, bj in zip(*np.nonzero(v.flagged), strict=True):
        bi, bj = int(bi), int(bj)
        blk = c[rb[bi] : rb[bi + 1], cb[bj] : cb[bj + 1]]
        where = locate_error(
            blk,
            float(v.res_ee[bi, bj]),
            float(v.res_we[bi, bj]),
            float(v.res_ew[bi, bj]),
            float(v.thr[bi, bj]),
            float(v.thr_r[bi, bj]),
            float(v.thr_c[bi, bj]),
        )
        exp = [float(e[bi, bj]) for e in expected]
        if where is not None and correct_single(blk, exp, float(v.thr[bi, bj]), where):
            fixed.append((bi, bj, where[0], where[1]))
        else:
            rest.append((bi, bj))
    return fixed, rest


# ------------------------------------------------------------------ block size rule
def choose_bs(mb: int, nb: int, k: int) -> int:
    """Return the default checksum block size for distribution blocks ``mb x nb`` and inner dimension ``k``.

    The largest power of two <= 256 that divides ``gcd(mb, nb)`` and satisfies
    ``2 bs^2 (k + 2 bs) u <= 2**-24`` (see the module docstring); at least 1.
    """
    g = math.gcd(int(mb), int(nb)) or 1
    bs = 256
    while bs > 1 and (g % bs != 0 or 2 * bs * bs * (k + 2 * bs) * U > 2.0**-24):
        bs //= 2
    return bs


# ------------------------------------------------------------------ single-process convenience
def check_product(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    c0: np.ndarray | None = None,
    bs: int | tuple[int, int] = 32,
    tol: float | str | None = None,
) -> Verification:
    """Verify a dense ``c == alpha * a @ b + beta * c0`` block by block (one process, no communication).

    Blocks are ``bs x bs`` (``bs = (rows, cols)`` for rectangular ones); edge blocks may be smaller.

    Raises
    ------
    ABFTArgumentError
        On inconsistent shapes, a bad ``tol``, or ``beta != 0`` without ``c0``.
    """
    m, k = a.shape
    if b.shape[0] != k or c.shape != (m, b.shape[1]):
        raise ABFTArgumentError(f"shapes do not match: a {a.shape}, b {b.shape}, c {c.shape}")
    rbs, cbs = (bs, bs) if isinstance(bs, int) else bs
    rb, cb = dense_bounds(m, rbs), dense_bounds(c.shape[1], cbs)
    kinds = checksum_kinds(tol)
    prod = ChecksumProduct(len(rb) - 1, len(cb) - 1, kinds)
    prod.add(encode_rows(a, rb, kinds), encode_cols(b, cb, kinds))
    if beta != 0.0 and c0 is None:
        raise ABFTArgumentError("beta != 0 needs c0, the C before the update")
    pred = prod.predict(alpha, beta, summarize_c0(c0, rb, cb) if c0 is not None and beta != 0.0 else None)
    sums = block_sums_sq(c, rb, cb)
    thr = pred.thresholds(rb, cb, tol, alpha, beta, csq=sums[4])
    return verify_blocks(c, rb, cb, pred.expected, thr, sums)
