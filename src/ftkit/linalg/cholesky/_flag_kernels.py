"""Compiled comparisons of FT_PDPOTRF's sums with the carried checksums: a block column's segments
(:func:`segment_flags`, the verification's bound), a solved panel's (:func:`solve_flags`, the solve check's),
and the whole solve check of an error-free panel in one call (:func:`solve_check`: the sums the panel travels
with, the product with ``L^T`` and the flags), as a block column's verification (:func:`block_flags`: the sums
and the flags), and the bounds' carried sums of squares (:func:`add_squares`): per-panel Python was most of
these checks' cost on 2 x 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .._blas import call_dgemm
from ..checksums._kernels import encode_rows_into
from ._kernels import exact_sums

__all__ = ["segment_flags", "solve_flags", "solve_check", "block_flags", "add_squares"]

_COL_MAJOR, _NO_TRANS, _TRANS = 102, 111, 112


@njit(cache=True, nogil=True)
def segment_flags(got: np.ndarray, chk: np.ndarray, bounds: np.ndarray, nu: np.ndarray, rglob: np.ndarray,
                  cglob: np.ndarray, fac: np.ndarray, add: float, flag: np.ndarray, thr: np.ndarray,
                  unchecked: np.ndarray) -> None:  # pragma: no cover - compiled
    """Compare a block column's segment sums with their checksums (``UpdateChecks._flags``' bound).

    ``got`` holds the ``nr`` segments' plain, weighted and absolute column sums (``3 nr x w``, in that order
    of row blocks), ``chk`` the expected plain and weighted sums (``2 nr x w``, interleaved), ``bounds`` the
    segments' rows (``nr + 1``, from 0), ``nu`` the rows' carried sums of squares, indexed by the global row
    ``rglob[i]`` of local row ``i`` and ``cglob[t]`` of column ``t``. The threshold of segment ``s``, column
    ``t`` is ``fac[s] * (|sums| + 2 (1 + 1e-8) sum_i sqrt(nu_i) sqrt(nu_t)) + add`` (``len`` times that for
    the weighted sum); ``flag`` says which exceed it, ``unchecked`` which segments have a bound that is not
    finite (their ``flag`` is false)."""
    nr, w = flag.shape
    for s in range(nr):
        rs = 0.0
        for i in range(bounds[s], bounds[s + 1]):
            rs += np.sqrt(nu[rglob[i]])
        c = 2.0 * (1.0 + 1e-8) * rs
        ln = float(bounds[s + 1] - bounds[s])
        bad = False
        for t in range(w):
            th = fac[s] * (got[2 * nr + s, t] + c * np.sqrt(nu[cglob[t]])) + add
            thr[s, t] = th
            flag[s, t] = (not abs(got[s, t] - chk[2 * s, t]) <= th) or \
                (not abs(got[nr + s, t] - chk[2 * s + 1, t]) <= th * ln)
            if not np.isfinite(th):
                bad = True
        unchecked[s] = bad
        if bad:
            for t in range(w):
                flag[s, t] = False


@njit(cache=True, nogil=True)
def solve_flags(prod: np.ndarray, chk: np.ndarray, sq: np.ndarray, bounds: np.ndarray, low: np.ndarray,
                fac: np.ndarray, vfac: np.ndarray, nu: np.ndarray, rglob: np.ndarray, cglob: np.ndarray,
                add: float, eta: float, flag: np.ndarray, unchecked: np.ndarray) -> None:  # pragma: no cover
    """Compare a solved panel's segment sums times ``L^T`` with their checksums (the bound of
    ``UpdateChecks.check_solve``).

    ``prod`` (``2 nseg x w``) holds ``(e^T P_I; w^T P_I) L^T`` of the ``nseg`` segments, interleaved, ``chk``
    their checksums, ``sq`` the sums of squares of the panel's rows (segments ``bounds``, from 0), ``low``
    ``L``; ``nu``, ``rglob`` (of the panel's rows), ``cglob`` (of its columns), ``vfac`` and ``add`` as
    :func:`segment_flags`' ``nu``, ``rglob``, ``cglob``, ``fac``, ``add``. With ``m = (1 + 1e-8) |P_I|_rows
    |L_t|`` (the sum of the rows' norms times row ``t``'s norm: by Cauchy-Schwarz and the solve's backward
    error, a bound of ``e^T |W_I|`` in column ``t``), the threshold of segment ``s``, column ``t`` is ``2 thr0
    + fac[s] m + eta``, ``thr0 = vfac[s] (m + 2 (1 + 1e-8) sum_i sqrt(nu_i) sqrt(nu_t)) + add``
    (:func:`segment_flags`' bound of the panel's values with ``m`` for their magnitudes; ``len`` times the
    threshold for the weighted sum); ``flag[s]`` says whether any column of segment ``s`` exceeds it,
    ``unchecked[s]`` whether its threshold is not finite (its ``flag`` is then false)."""
    nseg = flag.shape[0]
    w = low.shape[0]
    lroot = np.empty(w)
    root_nu = np.empty(w)
    for t in range(w):
        acc = 0.0
        for u in range(low.shape[1]):
            acc += low[t, u] * low[t, u]
        lroot[t] = np.sqrt(acc)
        root_nu[t] = np.sqrt(nu[cglob[t]])
    for s in range(nseg):
        norm = 0.0
        rn = 0.0
        for i in range(bounds[s], bounds[s + 1]):
            norm += np.sqrt(sq[i])
            rn += np.sqrt(nu[rglob[i]])
        c = 2.0 * (1.0 + 1e-8) * rn
        ln = float(bounds[s + 1] - bounds[s])
        bad = False
        inf = False
        for t in range(w):
            mag = ((1.0 + 1e-8) * norm) * lroot[t]
            th = 2.0 * (vfac[s] * (mag + c * root_nu[t]) + add) + fac[s] * mag + eta
            if not np.isfinite(th):
                inf = True
            if (not abs(prod[2 * s, t] - chk[2 * s, t]) <= th) or \
                    (not abs(prod[2 * s + 1, t] - chk[2 * s + 1, t]) <= th * ln):
                bad = True
        unchecked[s] = inf
        flag[s] = bad and not inf


@njit(cache=True, nogil=True)
def solve_check(dgemm: Any, pt: np.ndarray, rows: np.ndarray, rs: np.ndarray, sq: np.ndarray, cs: np.ndarray,
                segs: np.ndarray, enc_t: np.ndarray, low: np.ndarray, prod: np.ndarray, chk: np.ndarray,
                bounds: np.ndarray, fac: np.ndarray, vfac: np.ndarray, nu: np.ndarray, rglob: np.ndarray,
                cglob: np.ndarray, add: float, eta: float, flag: np.ndarray,
                unchecked: np.ndarray) -> int:  # pragma: no cover - compiled
    """``UpdateChecks.check_solve`` of a panel solved in place in its encoded buffer (``pt`` is ``rows.T``),
    every segment ``bs`` rows (``rows``: ``nseg bs x w``, F order; ``enc_t``: the ``2 x bs`` encoder, F
    order): the rows' sums (:func:`._kernels.exact_sums`), the segment sums ``segs`` (``2 nseg x w``, F order)
    as one product ``enc_t @ rows`` seen as ``bs x (nseg w)`` (``UpdateChecks.encode``'s call, so the same
    bits), ``prod = segs @ low.T`` and :func:`solve_flags` (the other arguments are its own), by ``dgemm``
    (CBLAS ``dgemm`` as ``carry_blocks`` takes it). Returns the number of segments flagged or
    unchecked, or -1, having done nothing, if ``pt`` is not ``rows.T`` or an operand is not in that layout
    (``low``: one unit stride)."""
    m, w = rows.shape
    nseg = flag.shape[0]
    bs = enc_t.shape[1]
    if pt.ctypes.data != rows.ctypes.data or m != nseg * bs or rows.strides[0] != 8 or \
            rows.strides[1] != 8 * m or segs.strides[0] != 8 or segs.strides[1] != 8 * 2 * nseg or \
            (low.strides[0] != 8 and low.strides[1] != 8):
        return -1
    exact_sums(rows, rs, sq, cs)
    if m > 0 and w > 0:
        call_dgemm(dgemm, _COL_MAJOR, _NO_TRANS, _NO_TRANS, 2, nseg * w, bs, 1.0, enc_t.ctypes.data, 2,
                   rows.ctypes.data, bs, 0.0, segs.ctypes.data, 2)
        if low.strides[0] == 8:
            transb, ldl = _TRANS, max(1, low.strides[1] // 8)
        else:
            transb, ldl = _NO_TRANS, max(1, low.strides[0] // 8)
        call_dgemm(dgemm, _COL_MAJOR, _NO_TRANS, transb, 2 * nseg, w, w, 1.0, segs.ctypes.data, 2 * nseg,
                   low.ctypes.data, ldl, 0.0, prod.ctypes.data, 2 * nseg)
    solve_flags(prod, chk, sq, bounds, low, fac, vfac, nu, rglob, cglob, add, eta, flag, unchecked)
    n = 0
    for s in range(nseg):
        if flag[s] or unchecked[s]:
            n += 1
    return n



@njit(cache=True, nogil=True)
def block_flags(blk: np.ndarray, bounds: np.ndarray, wts: np.ndarray, got: np.ndarray, chk: np.ndarray,
                nu: np.ndarray, rglob: np.ndarray, cglob: np.ndarray, fac: np.ndarray, add: float,
                flag: np.ndarray, thr: np.ndarray,
                unchecked: np.ndarray) -> int:  # pragma: no cover - compiled
    """``UpdateChecks._flags`` in one call: the plain, weighted and absolute segment sums of ``blk`` into
    ``got`` (``encode_rows_into``, ``wts`` the rows' weights), then :func:`segment_flags` (its arguments).
    Returns the number of segments with a flagged column or unchecked."""
    encode_rows_into(blk, bounds, wts, got, False, 3)
    segment_flags(got, chk, bounds, nu, rglob, cglob, fac, add, flag, thr, unchecked)
    n = 0
    for s in range(flag.shape[0]):
        bad = unchecked[s]
        for t in range(flag.shape[1]):
            bad = bad or flag[s, t]
        if bad:
            n += 1
    return n


@njit(cache=True, nogil=True)
def add_squares(nu: np.ndarray, idx: np.ndarray, sq: np.ndarray) -> None:  # pragma: no cover - compiled
    """``nu[idx] += sq`` (``idx`` without repeats): a panel's rows' sums of squares added to the carried ones
    (numpy's indexed add gathered, added and scattered in three calls, ~30 us a piece on a loaded 2 x 2)."""
    for i in range(idx.shape[0]):
        nu[idx[i]] += sq[i]
