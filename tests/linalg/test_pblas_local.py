"""In-process checks of the local kernels and the 1 x 1 grid path (no mpirun)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import DescriptorError, PBLASArgumentError
from ftkit.linalg._blas import HAVE_CBLAS, gemm_update
from ftkit.linalg.descriptor import BlockCyclic1D
from ftkit.linalg.pblas._summa import plan_summa


def test_openblas_is_used():
    # numpy's wheel ships OpenBLAS with the scipy_ prefixed symbols; losing it would silently slow pdgemm.
    assert HAVE_CBLAS


@pytest.mark.parametrize("ao,bo", [("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")])
@pytest.mark.parametrize("shape", [(5, 3, 4), (1, 1, 1), (7, 1, 3), (3, 4, 1), (1, 6, 1)])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_gemm_update_on_strided_views(ao, bo, shape, beta):
    m, k, n = shape
    rng = np.random.default_rng(1)
    a = np.array(rng.random((m, k)), order=ao)
    b = np.array(rng.random((k, n)), order=bo)
    big = np.asfortranarray(rng.random((m + 3, n + 2)))
    c = big[1:1 + m, 2:2 + n]  # a strided column-major view, as a submatrix of a local array is
    if beta == 0.0:
        c[...] = np.nan  # must be overwritten, not read
    before = big.copy()
    expect = -2.5 * a @ b + (beta * before[1:1 + m, 2:2 + n] if beta else 0.0)
    gemm_update(-2.5, a, b, c, beta)
    np.testing.assert_allclose(c, expect, rtol=1e-13, atol=1e-13)
    outside = np.ones(big.shape, bool)
    outside[1:1 + m, 2:2 + n] = False
    assert np.array_equal(big[outside], before[outside])


def test_plan_permutation_matches_b_order():
    ka = BlockCyclic1D(23, 2, 1, 1, 3)   # k over 3 process columns
    kb = BlockCyclic1D(23, 3, 2, 0, 2)   # k over 2 process rows, other blocks and phase
    steps = plan_summa(ka, kb, width=7)
    assert [s.k0 for s in steps] == [0, 7, 14, 21] and steps[-1].k1 == 23
    for s in steps:
        assert sorted(s.a_order) == list(range(s.k0, s.k1)) == sorted(s.b_order)
        assert s.perm is not None and np.array_equal(s.a_order[s.perm], s.b_order)
        for q in range(3):  # each owner's slice holds exactly its indices in the range
            idx = ka.indices_on(q)
            assert list(idx[s.a_cols[q]]) == [i for i in idx if s.k0 <= i < s.k1]
    same = plan_summa(ka, BlockCyclic1D(23, 2, 1, 1, 3), width=7)
    assert all(s.perm is None for s in same)


def test_one_by_one_grid_pdgemm_and_errors():
    grid = linalg.ProcessGrid(MPI.COMM_SELF, 1, 1)
    rng = np.random.default_rng(3)
    ga, gb, gc = rng.random((9, 8)), rng.random((5, 9)), rng.random((8, 6))
    A = linalg.DistributedMatrix.from_global(grid, ga, mb=2, nb=3)
    B = linalg.DistributedMatrix.from_global(grid, gb, mb=4, nb=1)
    C = linalg.DistributedMatrix.from_global(grid, gc, mb=3, nb=2)
    linalg.pdgemm("T", "T", 6, 4, 5, 2.0, A, 1, 2, B, 0, 3, 0.5, C, 2, 1)
    ref = gc.copy()
    ref[2:8, 1:5] = 2.0 * ga[1:6, 2:8].T @ gb[0:4, 3:8].T + 0.5 * gc[2:8, 1:5]
    np.testing.assert_allclose(C.to_global(), ref, rtol=1e-14)
    assert np.array_equal(C.to_global()[:2], gc[:2])  # outside the submatrix: untouched, bit for bit
    with pytest.raises(PBLASArgumentError) as exc:
        linalg.pdgemm("N", "N", 6, 4, 5, 1.0, A, 5, 0, B, 0, 0, 0.0, C, 0, 0)
    assert exc.value.position == 8 and exc.value.routine == "PDGEMM" and isinstance(exc.value, ValueError)
    with pytest.raises(DescriptorError, match="local array has shape"):
        linalg.DistributedMatrix(grid, A.desc, np.zeros((3, 3)))


def test_public_names_resolve():
    # DESIGN.md's linalg API, including the lazily re-exported fault-tolerant routines and state table.
    for name in ["ProcessGrid", "Descriptor", "DistributedMatrix", "pdgemm", "pdsymm", "cannon", "ft_pdgemm",
                 "get_state_table", "set_state_table", "reset_state"]:
        assert name in linalg.__all__
        assert callable(getattr(linalg, name))
    for name in linalg.__all__:
        getattr(linalg, name)
    with pytest.raises(AttributeError):
        linalg.no_such_routine  # noqa: B018



@pytest.mark.parametrize("m,k,n", [(3, 5, 1), (2, 9, 1), (1, 9, 3), (1, 9, 1)])
@pytest.mark.parametrize("one_column_c", [False, True])
def test_gemm_update_bits_do_not_depend_on_the_operands_layout(m, k, n, one_column_c):
    """A vector-shaped product gives the same bits from a bare operand and from a slice of a larger buffer:
    ft_pdsyrk's A panels carry checksum rows under a tile's rows, pdsyrk's do not (issue 33)."""
    rng = np.random.default_rng(5)
    for trial in range(20):
        a = rng.standard_normal((m, k)) * 10.0 ** rng.integers(-3, 8, (m, k))
        b = np.asfortranarray(rng.standard_normal((k, n)))
        results = []
        for pad in (0, 8):
            buf = np.zeros((m + pad, k + pad), order="F")
            buf[:m, :k] = a
            if one_column_c and n == 1:  # a one-column local array: its column stride is one element
                c = np.lib.stride_tricks.as_strided(np.ones(m), (m, 1), (8, 8))
            else:
                c = np.ones((m + 2, n), order="F")[:m]
            gemm_update(0.5, buf[:m, :k], b, c, 1.0)
            results.append(c.copy())
        assert np.array_equal(results[0], results[1]), (trial, results[0] - results[1])
