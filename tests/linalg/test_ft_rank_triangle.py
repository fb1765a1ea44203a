"""ft_pdsyrk / ft_pdsyr2k compute only the referenced triangle (issue 33), on a 1 x 1 grid in process: the
checked blocks are those of the slabs' off-diagonal parts and diagonal squares (not the whole square), the
result is numpy's on the triangle and the input elsewhere, and a located flip is reported at its position in
C's submatrix."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg.abft._rank_slabs import slab_bounds

N, K, NB, BS = 48, 10, 12, 4


@pytest.fixture
def grid():
    return linalg.ProcessGrid(MPI.COMM_WORLD, 1, 1)


def _mats(grid, trans):
    rng = np.random.default_rng(7)
    shape = (N, K) if trans == "N" else (K, N)
    a, b, c = rng.standard_normal(shape), rng.standard_normal(shape), rng.standard_normal((N, N))
    mk = lambda x: linalg.DistributedMatrix.from_global(grid, x, mb=NB, nb=NB)  # noqa: E731
    return a, b, c, mk(a), mk(b), mk(c)


def _triangle_blocks() -> int:
    """Checksum blocks of the pieces the slab cut computes: per slab its diagonal square and the rectangle
    strictly inside the triangle (4 slabs of 12 columns, 3 x 3 blocks of 4 per 12 x 12 square)."""
    per_square = (NB // BS) ** 2
    slabs = N // NB
    return slabs * per_square + sum(range(slabs)) * per_square


@pytest.mark.parametrize("routine", ["syrk", "syr2k"])
@pytest.mark.parametrize("uplo,trans", [("U", "N"), ("L", "T")])
def test_only_the_triangle_is_computed_and_it_is_numpy_s(grid, routine, uplo, trans):
    a, b, c, A, B, C = _mats(grid, trans)
    if routine == "syrk":
        rep = linalg.ft_pdsyrk(uplo, trans, N, K, 1.5, A, 0, 0, 0.5, C, 0, 0, bs=BS)
        opa = a if trans == "N" else a.T
        upd = opa @ opa.T
    else:
        rep = linalg.ft_pdsyr2k(uplo, trans, N, K, 1.5, A, 0, 0, B, 0, 0, 0.5, C, 0, 0, bs=BS)
        opa, opb = (a, b) if trans == "N" else (a.T, b.T)
        upd = opa @ opb.T + opb @ opa.T
    tri = np.triu(np.ones((N, N), bool)) if uplo == "U" else np.tril(np.ones((N, N), bool))
    got = C.to_global()
    assert rep.detected == 0 and rep.events == ()
    whole = (N // BS) ** 2
    assert rep.blocks_checked == _triangle_blocks() < whole  # the full square would check all 144
    np.testing.assert_allclose(got[tri], (1.5 * upd + 0.5 * c)[tri], rtol=1e-13, atol=1e-13)
    assert np.array_equal(got[~tri], c[~tri])


@pytest.mark.parametrize("seed", range(6))
def test_a_located_flip_is_reported_where_it_is_in_c(grid, seed):
    _, _, c, A, _, C = _mats(grid, "N")
    plan = InjectionPlan([BitFlip(target="C", bits=(52, 61), persistent=False)], seed=seed)
    rep = linalg.ft_pdsyrk("L", "N", N, K, 1.0, A, 0, 0, 1.0, C, 0, 0, bs=BS, inject=plan)
    (made,) = plan.records
    located = [e for e in rep.events if e.action == "located"]
    assert rep.detected == rep.corrected == 1 and len(located) == 1, rep.events
    assert located[0].element == made.global_index
    e = located[0]
    assert (e.row_block, e.col_block) == (e.element[0] // BS, e.element[1] // BS)  # segments of 4 from 0


@pytest.mark.parametrize("target", ["A", "B", "C"])
@pytest.mark.parametrize("seed", range(4))
def test_syr2k_flip_in_either_term_or_c_is_corrected(grid, target, seed):
    """Both terms go into one prediction per piece: a flip in an operand of the first term's panels or in
    C is found and corrected, and the triangle is numpy's."""
    a, b, c, A, B, C = _mats(grid, "N")
    plan = InjectionPlan([BitFlip(target=target, bits=(52, 61), persistent=False)], seed=seed)
    rep = linalg.ft_pdsyr2k("L", "N", N, K, 1.0, A, 0, 0, B, 0, 0, 1.0, C, 0, 0, bs=BS, inject=plan)
    assert len(plan.records) == 1
    assert rep.detected >= 1 and rep.corrected == rep.detected and rep.uncorrected == 0, rep.events
    tri = np.tril(np.ones((N, N), bool))
    np.testing.assert_allclose(C.to_global()[tri], (a @ b.T + b @ a.T + c)[tri], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("uplo,seed", [("L", 0), ("L", 2), ("U", 0), ("U", 1)])
def test_a_diagonal_square_is_recomputed_from_its_triangle_alone(grid, uplo, seed):
    """A flip in an operand's panel spoils a row of a diagonal square's blocks: they are recomputed with C0
    read from the square's triangle (the other triangle holds NaN and is never read) and stay NaN."""
    rng = np.random.default_rng(7)
    a, c = rng.standard_normal((N, K)), rng.standard_normal((N, N))
    tri = np.tril(np.ones((N, N), bool)) if uplo == "L" else np.triu(np.ones((N, N), bool))
    c[~tri] = np.nan
    A = linalg.DistributedMatrix.from_global(grid, a, mb=NB, nb=NB)
    C = linalg.DistributedMatrix.from_global(grid, c, mb=NB, nb=NB)
    plan = InjectionPlan([BitFlip(target="A", bits=(52, 61), persistent=False)], seed=seed)
    rep = linalg.ft_pdsyrk(uplo, "N", N, K, 1.0, A, 0, 0, 1.0, C, 0, 0, bs=BS, inject=plan)
    again = [e for e in rep.events if e.action == "recomputed"]
    assert again and rep.corrected == rep.detected == len(again) and rep.uncorrected == 0, rep.events
    assert all(e.row0 // NB == e.col0 // NB for e in again)  # blocks of a diagonal square
    got = C.to_global()
    np.testing.assert_allclose(got[tri], (a @ a.T + c)[tri], rtol=1e-12, atol=1e-12)
    assert np.isnan(got[~tri]).all()


def test_slab_bounds_land_on_block_boundaries_when_near():
    assert slab_bounds(48, 0, 12) == [0, 12, 24, 36, 48]
    assert slab_bounds(50, 3, 8) == [0, 13, 29, 37, 50]  # global 16, 32, 40: multiples of 8
    assert slab_bounds(3, 0, 2) == [0, 1, 2, 3]
    assert slab_bounds(1, 0, 4) == [0, 1]
