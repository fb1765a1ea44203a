"""protect_operands on a 1 x 1 grid, in process: the handle's contract (reuse, misuse, what is written); and
resilient_pdtrmm's steps multiplying only the band of B their part of the triangle reaches (in one SUMMA
pipeline), and leaving nothing in the store once released."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from ftkit.errors import PBLASArgumentError
from ftkit.linalg import DistributedMatrix, ProcessGrid, pdgemm, pdtrmm
from ftkit.linalg.descriptor import BlockCyclic1D
from ftkit.linalg.pblas._summa import plan_summa, run_summa
from ftkit.linalg.resilient import resilient_pdgemm, resilient_pdtrmm
from ftkit.linalg.resilient.protected import protect_operands
from ftkit.storage.inputs import CheckpointFileStore, recycles


@pytest.fixture
def mats():
    grid = ProcessGrid(MPI.COMM_WORLD, 1, 1)
    A = DistributedMatrix.random(grid, 24, 16, mb=4, nb=4, seed=1)
    B = DistributedMatrix.random(grid, 16, 20, mb=4, nb=4, seed=2)
    C = DistributedMatrix.random(grid, 24, 20, mb=4, nb=4, seed=3)
    return grid, A, B, C


def _files(root):
    return sorted(str(p.relative_to(root)).split("-", 1)[0] + "/" + p.name for p in root.rglob("*.ftk"))


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_reused_handle_gives_pdgemm_bit_for_bit_and_writes_only_what_it_must(tmp_path, mats, beta):
    _, A, B, C = mats
    ref = C.copy()
    pdgemm("N", "N", 24, 20, 16, 1.5, A, 0, 0, B, 0, 0, beta, ref, 0, 0)
    with protect_operands("N", "N", 24, 20, 16, A, 0, 0, B, 0, 0, C, 0, 0, store=tmp_path) as ops:
        assert _files(tmp_path) == ["operands/a.0.ftk", "operands/b.0.ftk"]
        inodes = set()
        for _ in range(3):
            C2 = C.copy()
            res = resilient_pdgemm("N", "N", 24, 20, 16, 1.5, A, 0, 0, B, 0, 0, beta, C2, 0, 0, store=ops)
            assert res.failed_ranks == ()
            assert np.array_equal(res.C.local, ref.local)
            # the per-call C copy (only written when beta != 0) is kept after a successful call as a spare,
            # never read as an input, that the next call rewrites in place (the same file every call)
            spare = ["operands/spare-c.0.ftk"] if beta else []
            assert _files(tmp_path) == ["operands/a.0.ftk", "operands/b.0.ftk", *spare]
            inodes |= {p.stat().st_ino for p in tmp_path.rglob("spare-c.0.ftk")}
        assert len(inodes) == (1 if beta else 0)
    assert _files(tmp_path) == []  # released on leaving the with block


def test_submatrix_update_with_handle(tmp_path, mats):
    _, A, B, C = mats
    ref = C.copy()
    pdgemm("T", "N", 10, 12, 8, -1.0, A, 2, 3, B, 4, 5, 0.0, ref, 6, 7)
    ops = protect_operands("T", "N", 10, 12, 8, A, 2, 3, B, 4, 5, C, 6, 7, store=tmp_path)
    res = resilient_pdgemm("T", "N", 10, 12, 8, -1.0, A, 2, 3, B, 4, 5, 0.0, C, 6, 7, store=ops)
    assert np.array_equal(res.C.local, ref.local)
    ops.release()


def test_misused_handles_are_refused_with_the_fix(tmp_path, mats):
    grid, A, B, C = mats
    ops = protect_operands("N", "N", 24, 20, 16, A, 0, 0, B, 0, 0, C, 0, 0, store=tmp_path)
    other = A.copy()
    with pytest.raises(PBLASArgumentError, match="same DistributedMatrix objects"):
        resilient_pdgemm("N", "N", 24, 20, 16, 1.0, other, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=ops)
    with pytest.raises(PBLASArgumentError, match="other arguments"):
        resilient_pdgemm("N", "N", 20, 20, 16, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=ops)
    with pytest.raises(PBLASArgumentError, match="other arguments"):
        resilient_pdgemm("N", "N", 24, 20, 16, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=ops,
                         algorithm="cannon")
    ops.release()
    with pytest.raises(PBLASArgumentError, match="released"):
        resilient_pdgemm("N", "N", 24, 20, 16, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=ops)
    with pytest.raises(PBLASArgumentError, match="algorithm"):
        protect_operands("N", "N", 24, 20, 16, A, 0, 0, B, 0, 0, C, 0, 0, store=tmp_path, algorithm="x")


# (side, uplo, where B's Inf is: the row (side L) or column (side R) index k, the indices of the result
# the step holding k must not reach): T is lower for ("L", "L") and ("R", "L"), upper otherwise
BANDS = [("L", "L", 23, slice(0, 20)), ("L", "U", 0, slice(4, 24)), ("R", "L", 0, slice(4, 24)),
         ("R", "U", 23, slice(0, 20))]


@pytest.mark.parametrize("side,uplo,k,unreached", BANDS)
def test_trmm_multiplies_each_step_only_into_the_band_its_part_of_the_triangle_reaches(
        tmp_path, side, uplo, k, unreached):
    # An Inf in B at k meets only T's column (side L) or row (side R) k, whose entries outside the triangle
    # are zeros: multiplied anyway (the square's flops), 0 * Inf would put NaN in the whole result. Steps of
    # 4 (one block): the step holding k reaches its own block and one side of it, as the plain sweep does.
    grid = ProcessGrid(MPI.COMM_WORLD, 1, 1)
    A = DistributedMatrix.random(grid, 24, 24, mb=4, nb=4, seed=1)
    B = DistributedMatrix.random(grid, 24, 24, mb=4, nb=4, seed=2)
    if side == "L":
        B.local[k, :] = np.inf
    else:
        B.local[:, k] = np.inf
    ref, got = B.copy(), B.copy()
    pdtrmm(side, uplo, "N", "N", 24, 24, 1.5, A, 0, 0, ref, 0, 0)
    resilient_pdtrmm(side, uplo, "N", "N", 24, 24, 1.5, A, 0, 0, got, 0, 0, store=tmp_path, width=4)
    part = (unreached, slice(None)) if side == "L" else (slice(None), unreached)
    assert np.isfinite(ref.local[part]).all()
    assert np.isfinite(got.local[part]).all()
    np.testing.assert_allclose(got.local[part], ref.local[part], rtol=1e-13, atol=1e-13)


def test_per_step_tiles_run_in_one_pipeline_as_one_call_per_step_bit_for_bit():
    # resilient_pdtrmm's steps reach different bands of B: run_summa takes the tiles as a function of the
    # step, so the steps share one pipeline (the next exchange in flight during this step's GEMMs) and give
    # exactly the GEMMs of one call per step with that step's tiles
    grid = ProcessGrid(MPI.COMM_WORLD, 1, 1)
    rng = np.random.default_rng(5)
    a, b = np.asfortranarray(rng.standard_normal((24, 20))), np.asfortranarray(rng.standard_normal((20, 12)))
    c0 = np.asfortranarray(rng.standard_normal((24, 12)))
    ka = kb = BlockCyclic1D(20, 4, 0, 0, 1)
    steps = plan_summa(ka, kb, 4)

    def band(step):  # a lower-triangular A's band: the rows from the step's first k on, none for one step
        return [] if step.index == 2 else [(slice(step.k0, None), slice(None))]

    got, ref = c0.copy(order="F"), c0.copy(order="F")
    run_summa(grid, a, b, got, ka, kb, 1.5, steps=steps, beta=0.5, tiles=band)
    for i, step in enumerate(steps):
        run_summa(grid, a, b, ref, ka, kb, 1.5, steps=[step], beta=0.5 if i == 0 else 1.0, tiles=band(step))
    assert np.array_equal(got, ref)
    assert not np.array_equal(got, c0)


def test_a_directory_store_is_opened_without_fsync_and_an_explicit_store_is_used_as_it_is(tmp_path, mats):
    # the saved inputs only have to outlive a killed process (the page cache does), not a crash of the
    # machine holding them (protected's module docstring); a CheckpointFileStore given as store= keeps fsync
    grid, A, B, C = mats
    ops = protect_operands("N", "N", 24, 20, 16, A, 0, 0, B, 0, 0, C, 0, 0, store=tmp_path / "plain")
    assert isinstance(ops.store, CheckpointFileStore) and ops.store.fsync is False
    durable = CheckpointFileStore(tmp_path / "durable", fsync=True)
    kept = protect_operands("N", "N", 24, 20, 16, A, 0, 0, B, 0, 0, C, 0, 0, store=durable)
    assert kept.store is durable
    ref = C.copy()
    pdgemm("N", "N", 24, 20, 16, 1.0, A, 0, 0, B, 0, 0, 0.5, ref, 0, 0)
    for handle in (ops, kept):
        got = C.copy()
        resilient_pdgemm("N", "N", 24, 20, 16, 1.0, A, 0, 0, B, 0, 0, 0.5, got, 0, 0, store=handle)
        assert np.array_equal(got.local, ref.local)
        handle.release()


@pytest.mark.parametrize("side,uplo", [("L", "L"), ("R", "U")])
def test_a_call_that_returns_leaves_nothing_in_the_store(tmp_path, side, uplo):
    # each process removes its own saved inputs at the end of an error-free call, rank 0 the call's directory
    grid = ProcessGrid(MPI.COMM_WORLD, 1, 1)
    A = DistributedMatrix.random(grid, 24, 24, mb=4, nb=4, seed=1)
    B = DistributedMatrix.random(grid, 24, 24, mb=4, nb=4, seed=2)
    seen: list[list[str]] = []

    def on_step(index: int) -> None:  # the call's B is saved while it runs
        seen.append(sorted(p.name for p in tmp_path.rglob("*")))

    resilient_pdtrmm(side, uplo, "N", "N", 24, 24, 1.5, A, 0, 0, B, 0, 0, store=tmp_path, width=8,
                     on_step=on_step)
    assert "b.0.ftk" in seen[0]
    assert list(tmp_path.iterdir()) == []


class _PlainStore:
    """An input store of the contract's three methods only: it does not declare recycling."""

    def __init__(self, root):
        self.inner = CheckpointFileStore(root, fsync=False)

    def save(self, key, array):
        self.inner.save(key, array)

    def load(self, key):
        return self.inner.load(key)

    def remove(self, prefix):
        self.inner.remove(prefix)


def test_a_store_that_does_not_recycle_is_used_without_spares(tmp_path, mats):
    # recycling is an optional part of the store contract: a call on a handle in such a store saves its C
    # afresh every call and removes it at the end, as a call without a handle does
    _, A, B, C = mats
    store = _PlainStore(tmp_path)
    assert not recycles(store) and recycles(store.inner)
    ref = C.copy()
    pdgemm("N", "N", 24, 20, 16, 1.5, A, 0, 0, B, 0, 0, 0.5, ref, 0, 0)
    with protect_operands("N", "N", 24, 20, 16, A, 0, 0, B, 0, 0, C, 0, 0, store=store) as ops:
        for _ in range(2):
            got = C.copy()
            resilient_pdgemm("N", "N", 24, 20, 16, 1.5, A, 0, 0, B, 0, 0, 0.5, got, 0, 0, store=ops)
            assert np.array_equal(got.local, ref.local)
            assert _files(tmp_path) == ["operands/a.0.ftk", "operands/b.0.ftk"]
    assert _files(tmp_path) == []
