"""In-process checks of the panel exchange's fill hook (checksums written straight into the panel slot) and of
the fused copy + checksum-column kernel (no mpirun: 1 x 1 grid). The multi-process path is exercised by every
ft_pdgemm test on 2 x 2 / 2 x 3 grids (tests/linalg/test_abft_mpi.py), which route through the hook."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg import abft
from ftkit.linalg._abft_kernels import copy_col_sums, encode_cols_into
from ftkit.linalg._summa import AllgatherExchange, plan_summa
from ftkit.linalg.descriptor import BlockCyclic1D


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
    w = abft.segment_weights(bounds)
    nc = len(bounds) - 1
    ext = np.asfortranarray(np.full((30, 11 + 4 * nc), np.nan))
    encode_cols_into(b, bounds, w, ext, True)
    assert np.array_equal(ext[:, :11], b)
    ref = abft.encode_cols(np.ascontiguousarray(b), bounds)  # separate sums pass
    np.testing.assert_allclose(ext[:, 11:], ref, rtol=1e-14, atol=1e-14)
    direct = np.asfortranarray(np.zeros_like(ext))
    copy_col_sums(b, bounds, w, direct)
    assert np.array_equal(direct, ext)
