"""ft_pdsyrk / ft_pdsyr2k compute only the referenced triangle (issue 33), on a 1 x 1 grid in process: the
checked blocks are those of the triangle's tiles (per distribution block column, the rows from its diagonal
block on: not the whole square), the result is numpy's on the triangle and the input elsewhere, a located
flip is reported at its position in C's submatrix, and the tiles cover the triangle exactly once."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg.matrix import segment_bounds
from ftkit.linalg.pblas.rank_k import staircase

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
    """Checksum blocks of the tiles: per distribution block column (4 of 12 columns) the blocks of 12 x 12
    from its diagonal one down (3 x 3 blocks of 4 each)."""
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
    assert any(e.row0 // NB == e.col0 // NB for e in again)  # among them blocks of a diagonal square
    got = C.to_global()
    np.testing.assert_allclose(got[tri], (a @ a.T + c)[tri], rtol=1e-12, atol=1e-12)
    assert np.isnan(got[~tri]).all()


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("n,nb,ic,jc", [(48, 12, 0, 0), (37, 4, 3, 3), (20, 3, 1, 5), (9, 16, 0, 2),
                                        (40, 2, 1, 0)])
def test_tiles_cover_the_triangle_once_and_edges_are_what_lies_outside(grid, uplo, n, nb, ic, jc):
    """Every triangle element is in exactly one tile; a tile's elements outside the triangle are exactly its
    edges' masks; ``inner`` lies inside the triangle; ``keep`` names the tile rows of every column."""
    C = linalg.DistributedMatrix.zeros(grid, n + ic + 1, n + jc + 1, mb=nb, nb=nb)
    rows, cols = C.row_map(ic, n).indices_on(0), C.col_map(jc, n).indices_on(0)
    st = staircase(C, ic, jc, n, uplo, segment_bounds(rows, ic, nb), segment_bounds(cols, jc, nb))
    tri = (rows[:, None] >= cols[None, :]) if uplo == "L" else (rows[:, None] <= cols[None, :])
    count = np.zeros((n, n), int)
    for rs, cs in st.tiles:
        count[rs, cs] += 1
        assert (st.keep[0, cs] == rs.start).all() and (st.keep[1, cs] == rs.stop).all()
    assert (count[tri] == 1).all() and (count <= 1).all()
    outside = np.zeros((n, n), bool)
    for rs, cs, mask in st.edges:
        outside[rs, cs] |= mask
    assert np.array_equal(outside, (count == 1) & ~tri)
    rs, cs = st.inner
    assert tri[rs, cs].all() and (rs.stop - rs.start) * (cs.stop - cs.start) > 0
