"""Verification of C's blocks against their predicted checksums, and the O(1) correction of a block with one
wrong element (the contract is in :mod:`ftkit.linalg.checksums`, which re-exports everything here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._sums import block_sums, gamma

__all__ = ["Verification", "verify_blocks", "locate_error", "correct_single", "correct_flagged"]


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
