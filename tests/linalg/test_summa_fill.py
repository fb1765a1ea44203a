"""In-process checks of the panel exchange's fill hook (checksums written straight into the panel slot) and of
the fused copy + checksum kernels (and check_product's numpy sums) against explicit sums (no mpirun: 1 x 1
grid). The multi-process path is exercised by every ft_pdgemm test on 2 x 2 / 2 x 3 grids
(tests/linalg/test_abft_mpi.py), which route through the hook."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg import checksums
from ftkit.linalg.checksums._kernels import copy_col_sums, encode_cols_into, encode_rows_into
from ftkit.linalg.descriptor import BlockCyclic1D
from ftkit.linalg.pblas._summa import AllgatherExchange, plan_summa


def _grid() -> linalg.ProcessGrid:
    return linalg.ProcessGrid(MPI.COMM_SELF, 1, 1)


def test_fill_callbacks_write_extended_panels_once():
    grid = _grid()
    ka = kb = BlockCyclic1D(8, 4, 0, 0, 1)
    step = plan_summa(ka, kb, 8)[0]
    rng = np.random.default_rng(3)
    a = np.asfortranarray(rng.random((5, 8)))
    b = np.asfortranarray(rng.random((8, 3)))
    seen = {}

    def fill_a(slot: np.ndarray) -> None:
        seen["a"] = slot.shape
        slot[:5] = a
        slot[5:] = a.sum(axis=0)

    def fill_b(buf: np.ndarray) -> None:
        seen["b"] = buf.shape
        buf[:, :3] = b
        buf[:, 3:] = b.sum(axis=1, keepdims=True)

    ex = AllgatherExchange()
    ap, bp = ex.start(grid, step, a, b, extra_rows=2, extra_cols=1, fill_a=fill_a, fill_b=fill_b).wait()
    assert seen == {"a": (7, 8), "b": (8, 4)}
    assert ap.shape == (7, 8) and bp.shape == (8, 4)
    assert np.array_equal(ap[:5], a) and np.array_equal(ap[5], a.sum(axis=0))
    assert np.array_equal(bp[:, :3], b) and np.array_equal(bp[:, 3], b.sum(axis=1))
    assert not np.shares_memory(ap, a) and not np.shares_memory(bp, b)
    # without a fill the extras are zero; without extras the piece itself is the panel (pdgemm's path)
    ap, bp = ex.start(grid, step, a, b, extra_rows=1, extra_cols=2).wait()
    assert np.array_equal(ap[:5], a) and not ap[5:].any()
    assert np.array_equal(bp[:, :3], b) and not bp[:, 3:].any()
    ap, bp = ex.start(grid, step, a, b).wait()
    assert ap is a and bp is b
    ex.release()


def test_fused_copy_col_sums_matches_separate_passes():
    rng = np.random.default_rng(4)
    big = np.asfortranarray(rng.uniform(-1, 1, (40, 11)))
    b = big[3:33, :]  # a band of rows of a column-major local array, as a SUMMA B piece is
    bounds = np.array([0, 4, 9, 11], dtype=np.int64)
    w = checksums.segment_weights(bounds)
    nc = len(bounds) - 1
    ext = np.asfortranarray(np.full((30, 11 + 4 * nc), np.nan))
    encode_cols_into(b, bounds, w, ext, True)
    assert np.array_equal(ext[:, :11], b)
    ref = checksums.encode_cols(np.ascontiguousarray(b), bounds)  # separate sums pass
    np.testing.assert_allclose(ext[:, 11:], ref, rtol=1e-14, atol=1e-14)
    direct = np.asfortranarray(np.zeros_like(ext))
    copy_col_sums(b, bounds, w, direct)
    assert np.array_equal(direct, ext)


def _explicit_sums(x: np.ndarray, bounds: np.ndarray, kinds: int, axis: int) -> np.ndarray:
    """Per segment along ``axis``: plain, 1-based weighted, absolute (and squared) sums, stacked by kind."""
    out = []
    for kind in range(kinds):
        for s in range(len(bounds) - 1):
            seg = np.take(x, np.arange(bounds[s], bounds[s + 1]), axis=axis)
            w = np.arange(1, seg.shape[axis] + 1, dtype=float)
            w = w[:, None] if axis == 0 else w[None, :]
            term = (seg, w * seg, np.abs(seg), seg * seg)[kind]
            out.append(term.sum(axis=axis))
    return np.stack(out, axis=axis)


@pytest.mark.parametrize("kinds", [3, 4])
@pytest.mark.parametrize("bounds", [[0, 4, 9, 11], [0, 1, 2, 7, 11], [0, 11], [0, 3, 9]])
def test_encoding_kernels_match_explicit_sums(kinds, bounds):
    # strided pieces as SUMMA cuts them (a band of rows / a run of columns of a column-major local array),
    # segments of lengths 1..11 (the column kernel adds four columns at a time), and segments that do not
    # cover the whole piece ([0, 3, 9] of 11)
    rng = np.random.default_rng(5)
    bounds = np.array(bounds, dtype=np.int64)
    w = checksums.segment_weights(bounds)
    nseg, covered = len(bounds) - 1, int(bounds[-1])
    big = np.asfortranarray(rng.uniform(-1, 1, (40, 40)))
    b = big[3:33, 2:13]  # (30, 11): band of rows, not contiguous
    ref = _explicit_sums(b[:, :covered], bounds, kinds, axis=1)
    sums = []
    for copy in (False, True):
        base = 11 if copy else 0
        ext = np.asfortranarray(np.full((30, base + kinds * nseg), np.nan))
        encode_cols_into(b, bounds, w, ext, copy, kinds)
        if copy:
            assert np.array_equal(ext[:, :11], b)
        np.testing.assert_allclose(ext[:, base:], ref, rtol=1e-13, atol=1e-13)
        sums.append(ext[:, base:])
    assert np.array_equal(sums[0], sums[1])  # the copying loop adds as the summing one does, to the bit
    a = big[2:13, 3:33]  # (11, 30) rows of op(A) x k
    ref = _explicit_sums(a[:covered], bounds, kinds, axis=0)
    for copy in (False, True):
        base = 11 if copy else 0
        ext = np.asfortranarray(np.full((base + kinds * nseg, 30), np.nan))
        if copy and covered < 11:
            continue  # the row kernel copies segment by segment: SUMMA pieces are always covered
        encode_rows_into(np.asfortranarray(a), bounds, w, ext, copy, kinds)
        encode_rows_into(a, bounds, w, ext, copy, kinds)  # strided view: same result
        if copy:
            assert np.array_equal(ext[:11], a)
        np.testing.assert_allclose(ext[base:], ref, rtol=1e-13, atol=1e-13)
    # check_product's numpy sums (no kernel) agree with the same explicit sums, on the same strided pieces
    np.testing.assert_allclose(checksums.dense_encode(b, bounds, kinds, axis=1), _explicit_sums(
        b[:, :covered], bounds, kinds, axis=1), rtol=1e-13, atol=1e-13)  # fmt: skip
    np.testing.assert_allclose(checksums.dense_encode(a, bounds, kinds, axis=0), _explicit_sums(
        a[:covered], bounds, kinds, axis=0), rtol=1e-13, atol=1e-13)  # fmt: skip
    # the public wrappers: the first three kinds do not depend on whether squares are asked for
    np.testing.assert_array_equal(
        checksums.encode_rows(a[:covered], bounds, 3),
        checksums.encode_rows(a[:covered], bounds, 4)[: 3 * nseg],
    )
    bc = b[:, :covered]
    three, four = checksums.encode_cols(bc, bounds, 3), checksums.encode_cols(bc, bounds, 4)
    np.testing.assert_array_equal(three, four[:, : 3 * nseg])
    with pytest.raises(ValueError):
        checksums.encode_rows(a, bounds, 2)


def test_block_sums_match_explicit_sums():
    rng = np.random.default_rng(6)
    c = np.asfortranarray(rng.uniform(-1, 1, (40, 37)))[1:38, 2:35]  # strided view, as C's local part
    rb = np.array([0, 5, 16, 37], dtype=np.int64)
    cb = np.array([0, 1, 9, 33], dtype=np.int64)
    with_sq = checksums.block_sums_sq(c, rb, cb)
    without = checksums.block_sums(c, rb, cb)  # the same pass, squares dropped
    dense = checksums.dense_block_sums_sq(c, rb, cb)  # check_product's numpy sums (no kernel)
    for bi in range(3):
        for bj in range(3):
            blk = c[rb[bi] : rb[bi + 1], cb[bj] : cb[bj + 1]]
            wr = np.arange(1, blk.shape[0] + 1)[:, None]
            wc = np.arange(1, blk.shape[1] + 1)[None, :]
            exp = [blk.sum(), (wr * blk).sum(), (blk * wc).sum(), (wr * blk * wc).sum(), (blk * blk).sum()]
            for q in range(5):
                np.testing.assert_allclose(with_sq[q][bi, bj], exp[q], rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(dense[q][bi, bj], exp[q], rtol=1e-12, atol=1e-12)
            for q in range(4):
                np.testing.assert_allclose(without[q][bi, bj], exp[q], rtol=1e-12, atol=1e-12)


def test_three_checksum_kinds_serve_rigorous_and_numeric_thresholds():
    # squared sums are only computed for the statistical threshold; without them its model falls back to the
    # coarse |A||B| form (never below the fine one's safety), and the rigorous threshold is unchanged
    assert checksums.checksum_kinds(None) == 3 and checksums.checksum_kinds(1e-9) == 3
    assert checksums.checksum_kinds("statistical") == 4
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((40, 50)), rng.standard_normal((50, 30))
    rb, cb = checksums.dense_bounds(40, 16), checksums.dense_bounds(30, 16)
    preds = {}
    for kinds in (3, 4):
        prod = checksums.ChecksumProduct(len(rb) - 1, len(cb) - 1, kinds)
        prod.add(checksums.encode_rows(a, rb, kinds), checksums.encode_cols(b, cb, kinds))
        preds[kinds] = prod.predict(1.0, 0.0)
    assert preds[3].p2 is None and preds[4].p2 is not None
    for e3, e4 in zip(preds[3].expected, preds[4].expected, strict=True):
        np.testing.assert_array_equal(e3, e4)
    rig = [preds[q].thresholds(rb, cb, None, 1.0, 0.0) for q in (3, 4)]
    np.testing.assert_array_equal(rig[0], rig[1])
    c = a @ b
    for tol in (None, "statistical", 1e-12):
        assert not checksums.check_product(a, b, c, bs=16, tol=tol).flagged.any()
    c[5, 7] += 1e-6
    assert checksums.check_product(a, b, c, bs=16).flagged[0, 0]
