"""FT_PDPOTRF's compiled solve check (:func:`ftkit.linalg.cholesky._flag_kernels.solve_check`) against the
calls it replaces in ``UpdateChecks.check_solve``: the same sums bit for bit, the same flags."""

from __future__ import annotations

import numpy as np
import pytest

from ftkit.linalg import _blas
from ftkit.linalg._blas import gemm_update
from ftkit.linalg.cholesky._flag_kernels import solve_check, solve_flags
from ftkit.linalg.cholesky._kernels import exact_sums


@pytest.mark.parametrize("order", ["F", "C"])
def test_solve_check_matches_the_separate_calls(order):
    """One compiled call: the row sums, sums of squares and column sums and the segment sums equal the
    separate calls' (``exact_sums``, encode's product) bit for bit, and the flags equal ``solve_flags``' on
    numpy's product: a segment whose checksum is off is flagged, one whose bound is not finite is unchecked
    (not flagged), the others pass; an operand that is not the buffer's rows is refused untouched."""
    if _blas._dgemm is None:
        pytest.skip("no CBLAS: check_solve takes the separate calls (test_without_cblas.py)")
    rng = np.random.default_rng(5)
    nseg, bs, w = 5, 8, 6
    m = nseg * bs
    rows = np.asfortranarray(rng.standard_normal((m, w)))
    low = np.tril(rng.standard_normal((w, w))) + 4 * np.eye(w)
    low = np.asfortranarray(low) if order == "F" else np.ascontiguousarray(low)
    enc_t = np.asfortranarray(np.stack([np.ones(bs), np.arange(1.0, bs + 1)]))
    bounds = np.arange(0, m + 1, bs, dtype=np.int64)
    nu = rng.random(m + w)
    rglob, cglob = np.arange(m, dtype=np.int64), np.arange(m, m + w, dtype=np.int64)
    fac, vfac = np.full(nseg, 1e-12), np.full(nseg, 1e-13)
    want = {name: np.empty(shape) for name, shape in (("rs", m), ("sq", m), ("cs", w))}
    want["segs"] = np.empty((2 * nseg, w), order="F")
    exact_sums(rows, want["rs"], want["sq"], want["cs"])
    gemm_update(1.0, enc_t, rows.reshape((bs, -1), order="F"), want["segs"].reshape((2, -1), order="F"),
                beta=0.0)
    chk = np.asfortranarray(want["segs"] @ low.T)
    chk[2 * 1 + 1, 3] += 1e-3  # segment 1's weighted sum: off
    nu[rglob[3 * bs + 2]] = np.inf  # segment 3: a bound that is not finite
    prod = np.empty((2 * nseg, w), order="F")
    want_flag, want_unchecked = np.zeros(nseg, bool), np.zeros(nseg, bool)
    solve_flags(np.asfortranarray(want["segs"] @ low.T), chk, want["sq"], bounds, low, fac, vfac, nu, rglob,
                cglob, 0.0, 1e-300, want_flag, want_unchecked)
    assert want_flag.tolist() == [False, True, False, False, False]
    assert want_unchecked.tolist() == [False, False, False, True, False]

    got = {name: np.full_like(a, np.nan) for name, a in want.items()}
    flag, unchecked = np.zeros(nseg, bool), np.zeros(nseg, bool)

    def run(pt: np.ndarray) -> int:
        return solve_check(_blas._dgemm, pt, rows, got["rs"], got["sq"], got["cs"], got["segs"], enc_t, low,
                           prod, chk, bounds, fac, vfac, nu, rglob, cglob, 0.0, 1e-300, flag, unchecked)

    assert run(rows.T.copy()) == -1  # a copy of the rows, not them: nothing done
    assert all(np.isnan(a).all() for a in got.values())
    assert run(rows.T) == 2
    for name, a in want.items():
        assert np.array_equal(got[name], a), name
    np.testing.assert_allclose(prod, want["segs"] @ low.T, rtol=1e-13, atol=1e-13)
    assert np.array_equal(flag, want_flag) and np.array_equal(unchecked, want_unchecked)


def test_block_flags_matches_the_separate_calls():
    """The verification's one call: the segment sums and the flags equal ``encode_rows_into`` then
    ``segment_flags`` (segments of unequal heights, a block that is a strided view): a wrong element flags
    its column, a non-finite bound leaves its segment unchecked and unflagged; the count says which."""
    from ftkit.linalg.checksums._kernels import encode_rows_into
    from ftkit.linalg.cholesky._flag_kernels import block_flags, segment_flags

    rng = np.random.default_rng(9)
    big = np.asfortranarray(rng.standard_normal((40, 12)))
    blk = big[3:30, 2:9]  # rows 3..29, columns 2..8: a view, as the block column of the work matrix
    bounds = np.array([0, 8, 16, 24, 27], np.int64)
    wts = np.concatenate([np.arange(1.0, b - a + 1) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    nr, w = len(bounds) - 1, blk.shape[1]
    got = np.empty((3 * nr, w))
    encode_rows_into(blk, bounds, wts, got, False, 3)
    chk = np.empty((2 * nr, w))
    chk[0::2], chk[1::2] = got[:nr], got[nr:2 * nr]
    blk[10, 4] += 1.0  # segment 1, column 4
    nu = rng.random(60)
    rglob, cglob = np.arange(27, dtype=np.int64), np.arange(40, 47, dtype=np.int64)
    nu[rglob[25]] = np.inf  # segment 3: not finite
    fac = np.full(nr, 1e-13)
    want = [np.empty((3 * nr, w)), np.empty((nr, w), bool), np.empty((nr, w)), np.empty(nr, bool)]
    encode_rows_into(blk, bounds, wts, want[0], False, 3)
    segment_flags(want[0], chk, bounds, nu, rglob, cglob, fac, 1e-300, want[1], want[2], want[3])
    out = [np.full_like(a, 0) for a in want]
    assert block_flags(blk, bounds, wts, out[0], chk, nu, rglob, cglob, fac, 1e-300, *out[1:]) == 2
    assert np.flatnonzero(want[1].any(axis=1)).tolist() == [1] and np.flatnonzero(want[1][1]).tolist() == [4]
    assert want[3].tolist() == [False, False, False, True]
    for a, b in zip(out, want, strict=True):
        assert np.array_equal(a, b)


def test_add_squares_is_numpys_indexed_add_bit_for_bit():
    """The carried sums of squares grow by a panel's rows' as numpy's ``nu[idx] += sq`` makes them (the bounds
    read them: the same bits keep every threshold as it was), on rows in any order, a strided ``sq``
    included, and no other entry moves."""
    from ftkit.linalg.cholesky._flag_kernels import add_squares

    rng = np.random.default_rng(3)
    nu = rng.random(50) * 1e3
    for idx, sq in ((np.array([7, 2, 40, 11], np.int64), rng.random(4) / 3),
                    (np.arange(0, 50, 3, dtype=np.int64), rng.random(34)[::2] * 1e-9)):
        want = nu.copy()
        want[idx] += sq
        add_squares(nu, idx, sq)
        assert np.array_equal(nu, want)
