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

from ...errors import ABFTArgumentError
from ._sums import (
    ETA,
    NCHK,
    U,
    abs_block_sums,
    block_sums,
    block_sums_sq,
    check_kinds,
    checksum_kinds,
    dense_block_sums_sq,
    dense_bounds,
    dense_encode,
    encode_cols,
    encode_rows,
    gamma,
    segment_bounds,
    segment_weights,
)
from ._verify import Verification, correct_flagged, correct_single, locate_error, verify_blocks

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
    "dense_encode",
    "dense_block_sums_sq",
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

#: Safety factor of the statistical threshold ``lambda * u * sqrt(V)``. Measured (1500 random products of
#: every adversarial family, bs 1..64, k up to 1500): the largest ``|residual| / (u sqrt(V))`` is 1.1-1.8 for
#: uniform, normal, tiny, huge, cancelling and mixed-scale data, 2.3 for Hilbert-like data; 8 leaves a 3.4x
#: margin while
#: the threshold stays within ~5-10x of the observed residuals (the tightness bench_abft.py reports).
STAT_LAMBDA = 8.0

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
        self.nr, self.nc, self.kinds = nr, nc, check_kinds(kinds)
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


def summarize_c0(c0: np.ndarray, rb: np.ndarray, cb: np.ndarray, copy_to: np.ndarray | None = None,
                 keep: np.ndarray | None = None, zero_rest: bool = True,
                 ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Return what a prediction needs from the C before the update: its block sums (with squares) and
    absolute block sums (one pass over ``c0``, which also copies it into ``copy_to`` if given: the segments
    must then cover all of ``c0``). ``keep``: only the rows ``keep[0, j]:keep[1, j]`` of column ``j`` are
    C0's, the others are zero (:func:`block_sums_sq`; ``zero_rest``: whether the copy gets those zeros)."""
    *sums, absum = block_sums_sq(c0, rb, cb, with_abs=True, copy_to=copy_to, keep=keep, zero_rest=zero_rest)
    return tuple(sums), absum


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
    r, c, under0, factor = _shape_terms(k, rlen, clen)
    under = under0 * (1.0 + abs(alpha) + abs(beta))
    if tol is None:
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


#: :func:`_shape_terms` of recent block shapes (read-only arrays): every check of one layout needs the same.
_SHAPE_TERMS: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


def _shape_terms(k: int, rlen: np.ndarray, clen: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`thresholds` derives from the inner dimension and the block sides alone: the sides ``r``
    (column) and ``c`` (row), the underflow term without its scalar factor and the rigorous bound's factor
    on ``M``; kept per shape (a dozen small numpy operations per call otherwise)."""
    ra, ca = np.asarray(rlen), np.asarray(clen)
    key = (k, ra.dtype.str, ra.shape, ra.tobytes(), ca.dtype.str, ca.shape, ca.tobytes())
    got = _SHAPE_TERMS.get(key)
    if got is None:
        r = np.asarray(rlen, dtype=np.float64)[:, None]
        c = np.asarray(clen, dtype=np.float64)[None, :]
        nel = r * c
        under0 = 2.0 * (nel + 1.0) * (k + 4.0) * ETA
        gk = gamma(k + 4)
        gs = gamma(r + c)
        gx = gamma(k + r + c + 2)
        factor = (gk + gs * (1.0 + gk) + gx) / (1.0 - gx)
        got = (r, c, under0, np.asarray(factor, dtype=np.float64))
        for a in got:
            a.flags.writeable = False
        if len(_SHAPE_TERMS) >= 64:
            _SHAPE_TERMS.clear()
        _SHAPE_TERMS[key] = got
    return got


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

    Blocks are ``bs x bs`` (``bs = (rows, cols)`` for rectangular ones); edge blocks may be smaller. The
    checksums and block sums are those of the distributed multiply, taken with numpy
    (:func:`dense_encode`, :func:`dense_block_sums_sq`), not with its compiled kernels: a first call in a
    process starts no compiler (the settle phase of a failure-tolerant multiply relies on that).

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
    prod.add(dense_encode(a, rb, kinds, axis=0), dense_encode(b, cb, kinds, axis=1))
    if beta != 0.0 and c0 is None:
        raise ABFTArgumentError("beta != 0 needs c0, the C before the update")
    c0_sums = None
    if c0 is not None and beta != 0.0:
        c0_sums = (dense_block_sums_sq(c0, rb, cb), abs_block_sums(c0, rb, cb))
    pred = prod.predict(alpha, beta, c0_sums)
    sums = dense_block_sums_sq(c, rb, cb)
    thr = pred.thresholds(rb, cb, tol, alpha, beta, csq=sums[4])
    return verify_blocks(c, rb, cb, pred.expected, thr, sums)
