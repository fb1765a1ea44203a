"""In-process tests of the ABFT mathematics (ftkit.linalg.checksums): checksums, bounds, location,
correction."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.errors import DescriptorError
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg import checksums
from ftkit.linalg._blas import gemm_update
from ftkit.linalg.matrix import segment_bounds

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "programs"))
from linalg_abft_cases import FAMILIES, make_case  # noqa: E402


def panel_product(a, b, c0, alpha, beta, width, plan=None):
    """C = alpha a b + beta c0 as SUMMA computes it (panel by panel), with optional C flips between panels."""
    m, n = a.shape[0], b.shape[1]
    c = np.asfortranarray(beta * c0) if beta != 0 else np.zeros((m, n), order="F")
    steps = list(range(0, a.shape[1], width))
    for s, k0 in enumerate(steps):
        if plan is not None:
            plan.apply("C", 0, s, c)
        gemm_update(alpha, a[:, k0 : k0 + width], b[k0 : k0 + width], c)
    if plan is not None:
        plan.apply("C", 0, len(steps), c)
    return c, len(steps)


def expected_sums(a, b, c0, alpha, beta, bs, tol, c=None):
    """Segment bounds, expected sums and thresholds, as ft_pdgemm computes them (``c`` feeds the statistical
    model's C term; without it the coarse statistical form is used)."""
    m, k = a.shape
    n = b.shape[1]
    rb, cb = checksums.dense_bounds(m, bs), checksums.dense_bounds(n, bs)
    prod = checksums.ChecksumProduct(len(rb) - 1, len(cb) - 1)
    prod.add(checksums.encode_rows(a, rb), checksums.encode_cols(b, cb))
    pred = prod.predict(alpha, beta, checksums.summarize_c0(c0, rb, cb) if beta != 0 else None)
    csq = checksums.block_sums_sq(c, rb, cb)[4] if c is not None else None
    thr = pred.thresholds(rb, cb, tol, alpha, beta, csq=csq)
    return rb, cb, tuple(pred.expected), thr


def test_gamma():
    assert checksums.gamma(0) == 0.0
    assert checksums.gamma(10) == pytest.approx(10 * 2.0**-53, rel=1e-12)
    with pytest.raises(ValueError):
        checksums.gamma(2**53)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    nb=st.integers(1, 64),
    bs=st.integers(1, 70),
    offset=st.integers(0, 200),
    nprocs=st.integers(1, 4),
    p=st.integers(0, 3),
)
def test_segments_cover_and_never_straddle_a_distribution_block(n, nb, bs, offset, nprocs, p):
    p = p % nprocs
    g = np.arange(offset, offset + n)
    owners = (g // nb) % nprocs
    idx = np.flatnonzero(owners == p)
    bounds = checksums.segment_bounds(idx, offset, nb, bs)
    assert bounds[0] == 0 and bounds[-1] == idx.size
    lens = np.diff(bounds)
    assert np.all(lens >= 1) and np.all(lens <= bs)
    for s in range(len(bounds) - 1):
        seg = idx[bounds[s] : bounds[s + 1]] + offset
        assert len(set(seg // nb)) == 1  # one distribution block: one owner
        assert np.all(np.diff(seg) == 1)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 300), nb=st.integers(1, 64), offset=st.integers(0, 200), nprocs=st.integers(1, 4),
       p=st.integers(0, 3))
def test_whole_block_segments_are_this_process_s_part_of_each_distribution_block(n, nb, offset, nprocs, p):
    # bs=None (PDSYRK's tiles): one segment per distribution block the process holds, all of its part
    p = p % nprocs
    g = np.arange(offset, offset + n)
    idx = np.flatnonzero((g // nb) % nprocs == p)
    bounds = segment_bounds(idx, offset, nb)
    blocks = [idx[bounds[s] : bounds[s + 1]] + offset for s in range(len(bounds) - 1)]
    assert [int(b[0] // nb) for b in blocks] == sorted(set((idx + offset) // nb))
    for b in blocks:
        assert np.array_equal(b, np.arange(b[0], b[-1] + 1)) and len(set(b // nb)) == 1
    # the checksums' name is the same function; bs = nb cuts the same segments
    assert checksums.segment_bounds is segment_bounds
    assert np.array_equal(bounds, segment_bounds(idx, offset, nb, nb))


def test_segment_length_below_one_is_refused_naming_the_fix():
    with pytest.raises(DescriptorError, match="bs must be >= 1.*positive length or None"):
        segment_bounds(np.arange(4), 0, 2, 0)


def test_encoding_equals_explicit_sums():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 11))
    rb = np.array([0, 5, 16, 37])
    chk = checksums.encode_rows(a, rb)
    for s in range(3):
        blk = a[rb[s] : rb[s + 1]]
        w = np.arange(1, len(blk) + 1)[:, None]
        np.testing.assert_allclose(chk[s], blk.sum(0), rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(chk[3 + s], (w * blk).sum(0), rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(chk[6 + s], np.abs(blk).sum(0), rtol=1e-13)
    bchk = checksums.encode_cols(a.T, rb)
    np.testing.assert_allclose(bchk, chk.T, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_block_sums_without_squares_are_block_sums_sq_s_up_to_the_order_of_additions(seed):
    # The four-sum pass (a rigorous check's) is a compiled variant of the five-sum one: the same sums. Not
    # always to the bit: the kernels may reassociate (numba fastmath), and the vectorizer may group the
    # additions of the two loops differently (they agreed to the bit on AVX-512 Xeons, not on an AVX2 EPYC).
    # Any grouping of a segment sum of r + c terms is within gamma(r + c) of the exact sum: the bound the
    # checks assume, so the two passes differ by at most twice that.
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 200)), int(rng.integers(1, 200))
    c = np.asfortranarray(rng.standard_normal((m, n)) * 10.0 ** rng.integers(-8, 8, size=(m, n)))
    rb = checksums.dense_bounds(m, int(rng.choice([1, 7, 16, 64])))
    cb = checksums.dense_bounds(n, int(rng.choice([3, 16, 50])))
    four, five = checksums.block_sums(c, rb, cb), checksums.block_sums_sq(c, rb, cb)
    assert len(four) == 4
    sizes = np.diff(rb)[:, None] + np.diff(cb)[None, :]
    magnitude = checksums.block_sums(np.asfortranarray(np.abs(c)), rb, cb)  # weights > 0: sums of |terms|
    for x, y, mag in zip(four, five[:4], magnitude, strict=True):
        assert np.all(np.abs(x - y) <= 2.0 * checksums.gamma(sizes + 2) * mag), (x - y, mag)
    # and the two passes see the same elements: a change in one element moves both alike
    c[m // 2, n // 2] += 1e6
    four2, five2 = checksums.block_sums(c, rb, cb), checksums.block_sums_sq(c, rb, cb)
    assert np.all(np.abs(four2[0] - four[0] - (five2[0] - five[0])) <= 2.0 * checksums.gamma(sizes + 2) * (
        magnitude[0] + 1e6))


def test_thresholds_kept_per_shape_are_the_formula_s():
    # the per-shape terms are reused across calls: a second call with other magnitudes and scalars must still
    # give the module docstring's bound, computed here from scratch
    rlen, clen, k = np.array([32, 17, 5]), np.array([8, 32]), 777
    rng = np.random.default_rng(3)
    for alpha, beta in ((1.0, 0.0), (-2.5, 0.75)):
        mabs = rng.random((3, 2)) * 10.0
        got = checksums.thresholds(mabs, k, rlen, clen, alpha=alpha, beta=beta)
        r, c = rlen.astype(float)[:, None], clen.astype(float)[None, :]
        gk, gs, gx = checksums.gamma(k + 4), checksums.gamma(r + c), checksums.gamma(k + r + c + 2)
        under = 2.0 * (r * c + 1.0) * (k + 4.0) * 2.0**-1074 * (1.0 + abs(alpha) + abs(beta))
        want = (gk + gs * (1.0 + gk) + gx) / (1.0 - gx) * mabs * (1.0 + 8 * checksums.U) + under
        assert got.tobytes() == want.tobytes()
        assert checksums.thresholds(mabs, k, rlen, clen, tol=1e-3, alpha=alpha, beta=beta).tobytes() == (
            1e-3 * mabs + under).tobytes()


@pytest.mark.parametrize("lower", [True, False])
def test_kept_rows_are_summed_and_copied_with_zeros_elsewhere(lower):
    # a square's triangle (NaN in the other one, never read): the sums and the copy equal those of the
    # square with its other triangle zero, in one pass; copy_kept moves the triangle back alone
    from ftkit.linalg.checksums._tri_sums import copy_kept

    rng = np.random.default_rng(3)
    n = 23
    c = np.asfortranarray(rng.standard_normal((n, n)))
    tri = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    c[~tri] = np.nan
    j = np.arange(n)
    keep = np.array([j, np.full(n, n)] if lower else [np.zeros(n, int), j + 1], dtype=np.int64)
    rb, cb = np.array([0, 4, 12, 23]), np.array([0, 8, 16, 23])
    masked = np.where(tri, c, 0.0)
    copy = np.full((n, n), 7.0, order="F")
    got = checksums.block_sums_sq(c, rb, cb, with_abs=True, copy_to=copy, keep=keep)
    want = checksums.block_sums_sq(masked, rb, cb, with_abs=True)
    for g, w in zip(got, want, strict=True):  # other summation order (vectorized), same bounds
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(copy, masked)
    (s0, a0) = checksums.summarize_c0(c, rb, cb, keep=keep)
    np.testing.assert_allclose(a0, want[5], rtol=1e-13)
    dst = np.asfortranarray(rng.standard_normal((n, n)))
    before = dst.copy()
    copy_kept(masked, dst, keep)
    np.testing.assert_array_equal(dst, np.where(tri, masked, before))


@pytest.mark.parametrize("view", [False, True], ids=["array", "row-offset-view"])
def test_copy_block_sums_copies_exactly_and_sums_every_block(view):
    # ft_pdtrsm's saved alpha B: the copy bit for bit, and the block sums (plain, column-weighted,
    # row-weighted, absolute) those of numpy, on segments that are not multiples of four columns (the
    # kernel's tail), from a strided view as B's local_view at a row offset is; a NaN reaches only its block
    from ftkit.linalg.checksums._tri_sums import copy_block_sums

    rng = np.random.default_rng(5)
    full = np.asfortranarray(rng.standard_normal((32, 23)))
    b = full[3:30] if view else np.asfortranarray(full[3:30])
    b[5, 9] = np.nan
    rb, cb = np.array([0, 7, 8, 20, 27]), np.array([0, 4, 11, 12, 23])
    wr, wc = checksums.segment_weights(rb), checksums.segment_weights(cb)
    dst = np.full((27, 23), 7.0, order="F")
    out = np.full((4, 4, 4), 7.0)
    copy_block_sums(b, dst, rb, cb, wr, wc, out, np.full((27, 3), 7.0, order="F"))
    assert np.array_equal(dst, b, equal_nan=True)
    for i in range(4):
        for j in range(4):
            blk = b[rb[i]:rb[i + 1], cb[j]:cb[j + 1]]
            want = [blk.sum(), (blk * wc[cb[j]:cb[j + 1]]).sum(), (blk * wr[rb[i]:rb[i + 1], None]).sum(),
                    np.abs(blk).sum()]
            if (i, j) == (0, 1):  # b[5, 9]'s block
                assert np.isnan(out[:, i, j]).all()
            else:
                np.testing.assert_allclose(out[:, i, j], want, rtol=1e-13, atol=1e-13)


def test_integer_products_have_exactly_zero_residual():
    # every product and sum is exact: any algebra slip in the checksum bookkeeping would show up as != 0
    rng = np.random.default_rng(1)
    for bs in (1, 3, 8, 32):
        a, b, c0 = make_case("integer_exact", 45, 38, 70, rng)
        c0 = np.round(c0)
        c, _ = panel_product(a, b, c0, 2.0, -3.0, 16)
        rb, cb, exp, thr = expected_sums(a, b, c0, 2.0, -3.0, bs, None)
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        assert not v.flagged.any()
        assert all(np.all(r == 0) for r in (v.res_ee, v.res_we, v.res_ew, v.res_ww))


@pytest.mark.parametrize("tol", [None, "statistical"])
def test_no_false_positives_on_1000_adversarial_cases(tol):
    rng = np.random.default_rng(1234 if tol is None else 4321)
    worst = 0.0
    blocks = 0
    for t in range(1000):
        fam = FAMILIES[t % len(FAMILIES)]
        k = int(rng.integers(1, 500))
        m, n = tuple(int(x) for x in rng.integers(1, 80, size=2))
        bs = int(rng.choice([1, 4, 8, 16, 32, 64]))
        alpha = float(rng.choice([1.0, -0.5, 3.0, 1e-3]))
        beta = float(rng.choice([0.0, 1.0, -2.0]))
        a, b, c0 = make_case(fam, m, n, k, rng)
        c, _ = panel_product(a, b, c0, alpha, beta, int(rng.integers(1, 300)))
        rb, cb, exp, thr = expected_sums(a, b, c0, alpha, beta, bs, tol, c)
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        assert not v.flagged.any(), (t, fam, m, n, k, bs, alpha, beta)
        worst = max(worst, v.max_ratio)
        blocks += v.flagged.size
    assert blocks > 10000
    # the statistical threshold is tight (residuals reach a sizeable fraction of it), the rigorous one is not
    if tol == "statistical":
        assert 0.02 < worst < 0.5
    else:
        assert worst < 0.2


def test_rigorous_threshold_is_larger_than_statistical():
    mabs = np.full((2, 2), 5.0)
    rig = checksums.thresholds(mabs, 1000, np.array([32, 32]), np.array([32, 32]))
    stat = checksums.thresholds(mabs, 1000, np.array([32, 32]), np.array([32, 32]), tol="statistical")
    assert np.all(rig > 5 * stat)
    assert np.all(
        checksums.thresholds(mabs, 10, np.array([4, 4]), np.array([4, 4]), tol=1e-6) == pytest.approx(5e-6)
    )
    for bad in ("rigorous", -1.0, float("nan")):
        with pytest.raises(ValueError):
            checksums.thresholds(mabs, 10, np.array([4, 4]), np.array([4, 4]), tol=bad)


def _flip_case(
    seed, fam="normal", bits="high", m=70, n=60, k=150, bs=16, tol=None, nflips=1, same_block=False, bit=None
):
    rng = np.random.default_rng(seed)
    a, b, c0 = make_case(fam, m, n, k, rng)
    ref, nsteps = panel_product(a, b, c0, 1.5, 0.5, 64)
    if same_block:
        flips = [
            BitFlip("C", rank=0, index=(3, 4), bits=bits, bit=bit),
            BitFlip("C", rank=0, index=(5, 1), bits=bits, bit=bit),
        ]
    else:
        flips = [BitFlip("C", rank=0, bits=bits) for _ in range(nflips)]
    plan = InjectionPlan(flips, seed=seed)
    plan.resolve(1, nsteps)
    c, _ = panel_product(a, b, c0, 1.5, 0.5, 64, plan)
    rb, cb, exp, thr = expected_sums(a, b, c0, 1.5, 0.5, bs, tol, c)
    _, _, _, thr_rig = expected_sums(a, b, c0, 1.5, 0.5, bs, None)
    return a, b, c0, ref, c, plan, rb, cb, exp, thr, thr_rig


@pytest.mark.parametrize("fam", ["normal", "uniform", "huge", "mixed_scale"])
@pytest.mark.parametrize("tol", [None, "statistical"])
def test_every_high_bit_flip_in_C_is_detected_located_and_corrected(fam, tol):
    fixed_o1 = 0
    total = 0
    for seed in range(60):
        a, b, c0, ref, c, plan, rb, cb, exp, thr, thr_rig = _flip_case(seed, fam, tol=tol)
        (rec,) = plan.records
        i, j = rec.local_index
        bi, bj = i // 16, j // 16
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        # the flip changes C[i, j] by |after - before| (on top of rounding): above the threshold, it is seen
        delta = abs(rec.after - rec.before) if np.isfinite(rec.after) else np.inf
        if delta > 2 * thr[bi, bj]:
            assert v.flagged[bi, bj], (seed, rec, thr[bi, bj])
        if not v.flagged.any():
            # undetected: then the result is within the bound of the failure-free one
            assert abs(c[i, j] - ref[i, j]) <= 2 * thr_rig[bi, bj]
            continue
        assert np.flatnonzero(v.flagged).tolist() == [bi * v.flagged.shape[1] + bj]
        total += 1
        fixed, rest = checksums.correct_flagged(c, rb, cb, v, exp)
        if fixed:
            assert fixed == [(bi, bj, i - rb[bi], j - cb[bj])]
            fixed_o1 += 1
        else:
            assert rest == [(bi, bj)]
            blk = (slice(rb[bi], rb[bi + 1]), slice(cb[bj], cb[bj + 1]))
            c[blk] = 1.5 * a[blk[0]] @ b[:, blk[1]] + 0.5 * c0[blk]  # the owner's recomputation
        assert np.all(np.abs(c - ref) <= 2 * thr_rig.repeat(np.diff(rb), 0).repeat(np.diff(cb), 1))
        assert not checksums.verify_blocks(c, rb, cb, exp, thr).flagged.any()
    assert total >= 55
    assert fixed_o1 >= 0.9 * total  # O(1) location handles nearly all; the rest fall back


def test_low_bit_flips_below_threshold_leave_result_within_bound():
    undetected = 0
    for seed in range(40):
        a, b, c0, ref, c, plan, rb, cb, exp, thr, thr_rig = _flip_case(seed, "uniform", bits=(0, 8))
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        if not v.flagged.any():
            undetected += 1
            assert np.all(np.abs(c - ref) <= thr_rig.repeat(np.diff(rb), 0).repeat(np.diff(cb), 1))
    assert undetected == 40  # a flip of bit <= 8 is ~1e-13 relative: far below the bound


def test_two_errors_in_different_blocks_are_both_corrected():
    done = 0
    for seed in range(30):
        a, b, c0, ref, c, plan, rb, cb, exp, thr, thr_rig = _flip_case(
            seed, "normal", bits="exponent", nflips=2
        )
        r1, r2 = plan.records
        if (r1.local_index[0] // 16, r1.local_index[1] // 16) == (
            r2.local_index[0] // 16,
            r2.local_index[1] // 16,
        ):
            continue
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        fixed, rest = checksums.correct_flagged(c, rb, cb, v, exp)
        assert (
            v.flagged.sum()
            == len(fixed) + len(rest)
            == 2 - sum(abs(r.after - r.before) < thr.max() for r in (r1, r2))
        )
        for bi, bj in rest:
            blk = (slice(rb[bi], rb[bi + 1]), slice(cb[bj], cb[bj + 1]))
            c[blk] = 1.5 * a[blk[0]] @ b[:, blk[1]] + 0.5 * c0[blk]
        assert np.all(np.abs(c - ref) <= 2 * thr_rig.repeat(np.diff(rb), 0).repeat(np.diff(cb), 1))
        done += 1
    assert done >= 20


def test_two_comparable_errors_in_one_block_fall_back_to_recomputation():
    n_fallback = 0
    for seed in range(10):
        a, b, c0, ref, c, plan, rb, cb, exp, thr, _ = _flip_case(seed, "uniform", same_block=True, bit=48)
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        assert v.flagged[0, 0]
        before = c.copy()
        fixed, rest = checksums.correct_flagged(c, rb, cb, v, exp)
        assert fixed == [] and rest == [(0, 0)]
        np.testing.assert_array_equal(c, before)  # a failed O(1) attempt leaves the block untouched
        n_fallback += 1
    assert n_fallback == 10


def test_second_much_smaller_error_in_a_block_stays_within_the_weighted_bound():
    # a big and a ~2**-19 times smaller error: the O(1) fix may accept the block; what it leaves is then below
    # the weighted checksums' threshold (r x the plain one): documented limit of single-element correction
    for seed in range(10):
        rng = np.random.default_rng(seed)
        a, b, c0 = make_case("uniform", 32, 32, 100, rng)
        c, _ = panel_product(a, b, c0, 1.0, 0.0, 64)
        ref = c.copy()
        rb, cb, exp, thr = expected_sums(a, b, c0, 1.0, 0.0, 16, None)
        c[3, 4] *= 1.5
        c[5, 1] *= 1 + 2.0**-20
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        fixed, rest = checksums.correct_flagged(c, rb, cb, v, exp)
        if fixed:
            assert np.max(np.abs(c - ref)) <= v.thr_r[0, 0]
        else:
            assert rest == [(0, 0)]


def test_flip_to_nonfinite_is_located():
    rng = np.random.default_rng(5)
    a, b, c0 = make_case("uniform", 40, 40, 60, rng)
    c, _ = panel_product(a, b, c0, 1.0, 0.0, 64)
    ref = c.copy()
    rb, cb, exp, thr = expected_sums(a, b, c0, 1.0, 0.0, 8, None)
    for val in (np.inf, -np.inf, np.nan):
        c[13, 22] = val
        v = checksums.verify_blocks(c, rb, cb, exp, thr)
        assert v.flagged.sum() == 1 and v.flagged[1, 2]
        fixed, rest = checksums.correct_flagged(c, rb, cb, v, exp)
        assert fixed == [(1, 2, 5, 6)] and rest == []
        assert abs(c[13, 22] - ref[13, 22]) <= 2 * thr[1, 2]


def test_error_in_A_after_encoding_is_detected_in_its_row():
    rng = np.random.default_rng(8)
    a, b, c0 = make_case("normal", 64, 48, 100, rng)
    rb, cb, exp, thr = expected_sums(a, b, c0, 1.0, 0.0, 16, "statistical")  # checksums of the good A
    plan = InjectionPlan([BitFlip("A", rank=0, step=0, index=(20, 7), bits="mantissa_top20")], seed=1)
    plan.resolve(1, 1)
    bad = a.copy()
    plan.apply("A", 0, 0, bad)
    c, _ = panel_product(bad, b, c0, 1.0, 0.0, 200)
    v = checksums.verify_blocks(c, rb, cb, exp, thr)
    assert v.flagged[1].all() and v.flagged.sum() == v.flagged.shape[1]  # every block of block row 1
    fixed, rest = checksums.correct_flagged(c, rb, cb, v, exp)
    # one wrong row element per block (row 20, all columns): not a single-element error
    assert fixed == [] and len(rest) == v.flagged.shape[1]


def test_choose_bs_rule():
    assert checksums.choose_bs(256, 256, 100) == 256
    assert checksums.choose_bs(256, 256, 4096) == 128
    assert checksums.choose_bs(64, 64, 4096) == 64
    assert checksums.choose_bs(48, 64, 100) == 16
    assert checksums.choose_bs(7, 7, 10) == 1
    for k in (10, 1000, 100000):
        bs = checksums.choose_bs(256, 256, k)
        assert 2 * bs * bs * (k + 2 * bs) * checksums.U <= 2.0**-24


def test_check_product_convenience():
    rng = np.random.default_rng(3)
    a, b, c0 = make_case("normal", 30, 20, 40, rng)
    c = a @ b
    assert not checksums.check_product(a, b, c, bs=8).flagged.any()
    c[3, 3] += 1e-6
    assert checksums.check_product(a, b, c, bs=8).flagged[0, 0]
    with pytest.raises(ValueError):
        checksums.check_product(a, b, c, beta=1.0)


def test_check_product_starts_no_compiled_kernel(monkeypatch):
    # resilient_pdgemm's settle phase verifies its recomputed tiles with check_product, often as a process's
    # first ABFT work: a kernel there puts numba's start-up (0.35-0.6 s) into the first failure's recovery
    from ftkit.linalg.checksums import _sums as _abft_sums

    def refuse(*args, **kwargs):
        raise AssertionError("check_product called a compiled kernel")

    for name in ("encode_rows_into", "encode_cols_into", "block_sums_into"):
        monkeypatch.setattr(_abft_sums, name, refuse)
    rng = np.random.default_rng(8)
    a, b, c0 = make_case("normal", 48, 40, 56, rng)  # a 48 x 56, b 56 x 40: 3 x 5 blocks of 16 x 8
    for tol in (None, "statistical"):
        c = 0.5 * (a @ b) + 2.0 * c0
        v = checksums.check_product(a, b, c, alpha=0.5, beta=2.0, c0=c0, bs=(16, 8), tol=tol)
        assert v.flagged.shape == (3, 5) and not v.flagged.any() and not v.unchecked.any()
        c[20, 30] += 1e-6 * np.abs(c).max()
        v = checksums.check_product(a, b, c, alpha=0.5, beta=2.0, c0=c0, bs=(16, 8), tol=tol)
        assert np.argwhere(v.flagged).tolist() == [[1, 3]]


def test_check_product_reports_a_poisoned_block_row_unchecked():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((32, 24)), rng.standard_normal((24, 40))
    a[5, 7] = np.inf  # row block 0 of the product cannot be checked; the others still are
    c = a @ b
    c[20, 33] += 1.0
    with np.errstate(invalid="ignore"):
        v = checksums.check_product(a, b, c, bs=8)
    assert v.unchecked[0].all() and not v.unchecked[1:].any()
    assert np.argwhere(v.flagged).tolist() == [[2, 4]]
