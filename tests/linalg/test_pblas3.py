"""PDTRSM, PDTRMM, PDSYRK, PDSYR2K, PDGEADD, PDTRADD, PDTRAN, PDPOTRF, PDPOTRS: conformance against numpy
under mpirun (every flag combination, float64 and float32, hard matrix families, untouched entries bit for
bit; see ``programs/pblas3_conformance.py``) and PXERBLA's argument positions (in process, on a 1 x 1 grid).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import PBLASArgumentError

from ..conftest import run_python

PROGRAMS = Path(__file__).resolve().parent / "programs"

GRIDS = [(1, 1, 21), (2, 2, 22), (2, 3, 23), (3, 2, 24), (1, 4, 25), (4, 1, 26)]


@pytest.mark.mpi
@pytest.mark.parametrize("nprow,npcol,seed", GRIDS, ids=[f"{g[0]}x{g[1]}" for g in GRIDS])
def test_conformance_against_numpy(nprow, npcol, seed):
    repeat = 2
    r = run_python(nprow * npcol, PROGRAMS / "pblas3_conformance.py", str(nprow), str(npcol),
                   "--seed", str(seed), "--repeat", str(repeat), timeout=300).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    # 2 dtypes x (24 TRSM + 24 TRMM + 6 SYRK + 6 SYR2K + 3 GEADD + 6 TRADD + 1 TRAN + 8 POTRF) per repeat
    assert f"DONE cases={repeat * 156} failures=0" in r.stdout


@pytest.fixture(scope="module")
def grid():
    g = linalg.ProcessGrid(MPI.COMM_SELF, 1, 1)
    yield g
    g.free()


def _mats(grid, dtype=np.float64):
    a = linalg.DistributedMatrix.from_global(grid, np.eye(6, dtype=dtype), mb=2, nb=2)
    b = linalg.DistributedMatrix.from_global(grid, np.ones((6, 6), dtype=dtype), mb=2, nb=2)
    return a, b


def _other_grid_matrix():
    g2 = linalg.ProcessGrid(MPI.COMM_SELF, 1, 1)
    return linalg.DistributedMatrix.zeros(g2, 6, 6, mb=2, nb=2)


TRI = ("L", "U", "N", "N", 3, 3, 1.0, "A", 0, 0, "B", 0, 0)
TRI_BAD = {  # argument index in TRI -> (bad value, PBLAS position)
    0: ("X", 1), 1: ("Q", 2), 2: ("Z", 3), 3: ("V", 4), 4: (-1, 5), 5: (2.5, 6), 6: ("a", 7),
    7: ("notmatrix", 8), 8: (4, 9), 9: (-1, 10), 10: ("notmatrix", 12), 11: (5, 13), 12: (4, 14),
}


@pytest.mark.parametrize("routine", ["pdtrsm", "pdtrmm"])
@pytest.mark.parametrize("index", sorted(TRI_BAD))
def test_triangular_argument_positions(grid, routine, index):
    A, B = _mats(grid)
    args = [A if x == "A" else B if x == "B" else x for x in TRI]
    args[index] = TRI_BAD[index][0]
    with pytest.raises(PBLASArgumentError) as e:
        getattr(linalg, routine)(*args)
    assert e.value.position == TRI_BAD[index][1]
    assert e.value.routine == routine.upper()


def test_triangular_descriptor_positions(grid):
    A, B = _mats(grid)
    with pytest.raises(PBLASArgumentError) as e:
        linalg.pdtrsm("L", "U", "N", "N", 3, 3, 1.0, _other_grid_matrix(), 0, 0, B, 0, 0)
    assert e.value.position == 11
    A32, _ = _mats(grid, np.float32)
    with pytest.raises(PBLASArgumentError) as e:
        linalg.pdtrmm("R", "L", "T", "U", 3, 3, 1.0, A32, 0, 0, B, 0, 0)
    assert e.value.position == 11 and "float32" in str(e.value)


RANK = ("U", "N", 3, 3, 1.0, "A", 0, 0, "B", 0, 0, 0.0, "C", 0, 0)
RANK_BAD = {0: ("X", 1), 1: ("D", 2), 2: (-3, 3), 3: (None, 4), 4: ("x", 5), 5: (3, 6), 6: (4, 7),
            7: (-2, 8), 8: ("B", 10), 9: (5, 11), 10: (5, 12), 11: ("b", 14), 12: ([], 15), 13: (4, 16),
            14: (9, 17)}


@pytest.mark.parametrize("index", sorted(RANK_BAD))
def test_syr2k_and_syrk_argument_positions(grid, index):
    A, B = _mats(grid)
    C = linalg.DistributedMatrix.zeros(grid, 6, 6, mb=2, nb=2)
    args = [A if x == "A" else B if x == "B" else C if x == "C" else x for x in RANK]
    bad, pos = RANK_BAD[index]
    args[index] = bad
    with pytest.raises(PBLASArgumentError) as e:
        linalg.pdsyr2k(*args)
    assert e.value.position == pos
    if index in (8, 9, 10):
        return  # B's arguments: PDSYRK has none
    syrk_args = args[:8] + args[11:]
    with pytest.raises(PBLASArgumentError) as e:
        linalg.pdsyrk(*syrk_args)
    assert e.value.position == (pos if pos < 10 else pos - 4)


ADD_BAD = {  # PDTRADD argument index -> (bad value, PBLAS position)
    0: ("N", 1), 1: ("X", 2), 2: (-1, 3), 3: (1.5, 4), 4: (object(), 5), 5: ("A", 6), 6: (-1, 7), 7: (6, 8),
    8: ("1", 10), 9: ("C", 11), 10: (6, 12), 11: (-3, 13),
}


@pytest.mark.parametrize("index", sorted(ADD_BAD))
def test_additions_argument_positions(grid, index):
    A, C = _mats(grid)
    args = ["L", "T", 4, 4, 1.0, A, 0, 0, 1.0, C, 0, 0]
    bad, pos = ADD_BAD[index]
    args[index] = bad
    with pytest.raises(PBLASArgumentError) as e:
        linalg.pdtradd(*args)
    assert e.value.position == pos
    if index >= 1:  # PDGEADD: no UPLO, one position less
        with pytest.raises(PBLASArgumentError) as e:
            linalg.pdgeadd(*args[1:])
        assert e.value.position == pos - 1
    if index >= 2:  # PDTRAN: neither UPLO nor TRANS
        with pytest.raises(PBLASArgumentError) as e:
            linalg.pdtran(*args[2:])
        assert e.value.position == pos - 2


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("source", ["in_place", "moved", "alias"])
def test_additions_match_numpy_bit_for_bit(grid, dtype, source):
    """PDGEADD, PDTRADD and PDTRAN give every written entry as numpy's ``beta * c + alpha * op(a)`` bit for
    bit and leave C's other entries as they were: op(A) laid out as C (read in place), moved (other blocks),
    or A the very matrix C at an overlapping offset (read before C is written); scalars whose products round
    (a fused multiply-add would change the last bit of many entries)."""
    rng = np.random.default_rng(11)
    m, n, ia, ja, ic, jc = 290, 300, 2, 4, 3, 5
    c_g = rng.standard_normal((310, 310)).astype(dtype)
    a_g = c_g if source == "alias" else rng.standard_normal((310, 310)).astype(dtype)
    dt = np.dtype(dtype).type
    scalars = [(1.0, 1.0), (-2.5, 0.5), (0.3, -1.7), (0.5, 0.0), (0.0, 0.5), (0.0, 0.0), (1.0, -1.0)]
    for alpha, beta in scalars:
        for uplo, trans in [(None, "N"), (None, "T"), ("L", "N"), ("U", "N"), ("L", "T"), ("U", "T")]:
            C = linalg.DistributedMatrix.from_global(grid, c_g, mb=8, nb=8)
            A = C if source == "alias" else linalg.DistributedMatrix.from_global(
                grid, a_g, mb=5 if source == "moved" else 8, nb=5 if source == "moved" else 8)
            if uplo is not None:
                linalg.pdtradd(uplo, trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
            elif trans == "T":
                linalg.pdtran(m, n, alpha, A, ia, ja, beta, C, ic, jc)
            else:
                linalg.pdgeadd(trans, m, n, alpha, A, ia, ja, beta, C, ic, jc)
            sub = c_g[ic:ic + m, jc:jc + n]
            opa = a_g[ia:ia + m, ja:ja + n] if trans == "N" else a_g[ia:ia + n, ja:ja + m].T
            if alpha == 0.0:
                new = np.zeros_like(sub) if beta == 0.0 else dt(beta) * sub
            else:
                new = dt(alpha) * opa if beta == 0.0 else dt(beta) * sub + dt(alpha) * opa
            i, j = np.arange(m)[:, None], np.arange(n)[None, :]
            part = np.ones((m, n), bool) if uplo is None else (i >= j) if uplo == "L" else (i <= j)
            want = c_g.copy()
            want[ic:ic + m, jc:jc + n] = np.where(part, new, sub)
            got = C.to_global()
            assert got.dtype == dtype
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (alpha, beta, uplo, trans)


def test_float32_stays_float32(grid):
    rng = np.random.default_rng(5)
    a = (rng.random((7, 7)) + 7 * np.eye(7)).astype(np.float32)
    b = rng.random((7, 3)).astype(np.float32)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=3, nb=2)
    B = linalg.DistributedMatrix.from_global(grid, b, mb=3, nb=2)
    assert A.dtype == np.float32 and A.local.dtype == np.float32
    linalg.pdtrsm("L", "L", "N", "N", 7, 3, 1.0, A, 0, 0, B, 0, 0)
    x = B.to_global()
    assert x.dtype == np.float32
    np.testing.assert_allclose(np.tril(a).astype(np.float64) @ x, b, rtol=0,
                               atol=50 * np.finfo(np.float32).eps)


POTRS_BAD = {0: ("X", 1), 1: (-1, 2), 2: (-2, 3), 3: ("A", 4), 4: (5, 5), 5: (-1, 6), 6: ("B", 8),
             7: (4, 9), 8: (5, 10)}


@pytest.mark.parametrize("index", sorted(POTRS_BAD))
def test_cholesky_argument_positions(grid, index):
    A, B = _mats(grid)
    args = ["L", 3, 2, A, 0, 0, B, 0, 0]
    bad, pos = POTRS_BAD[index]
    args[index] = bad
    with pytest.raises(PBLASArgumentError) as e:
        linalg.pdpotrs(*args)
    assert e.value.position == pos
    if index in (0, 1, 3, 4, 5):  # PDPOTRF: UPLO 1, N 2, A 3, IA 4, JA 5
        potrf_args = [args[0], args[1], *args[3:6]]
        with pytest.raises(PBLASArgumentError) as e:
            linalg.pdpotrf(*potrf_args)
        assert e.value.position == (pos if pos < 3 else pos - 1)


def test_factorization_error_names_the_minor(grid):
    a = np.diag([4.0, 1.0, -1.0, 2.0])
    A = linalg.DistributedMatrix.from_global(grid, a, mb=2, nb=2)
    with pytest.raises(linalg.FactorizationError) as e:
        linalg.pdpotrf("U", 4, A, 0, 0)
    assert e.value.minor == 3 and "minor of order 3" in str(e.value)


@pytest.mark.mpi
@pytest.mark.parametrize("nprow,npcol", [g[:2] for g in GRIDS], ids=[f"{g[0]}x{g[1]}" for g in GRIDS])
def test_cholesky_lookahead_is_the_sequential_schedule(nprow, npcol):
    """PDPOTRF's look-ahead against the sequential schedule (``programs/potrf_lookahead.py``): the factor and
    ft_pdpotrf's bit for bit, a bad minor in the panel the look-ahead factors early reported with the same
    minor on every rank (A left as the sequential schedule leaves it), a resume after panel k bit for bit;
    n not a multiple of nb, offsets, aligned and redistributed work matrices, L and U."""
    r = run_python(nprow * npcol, PROGRAMS / "potrf_lookahead.py", str(nprow), str(npcol),
                   timeout=300).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    # 3 layouts x 2 uplo x (1 SPD + 4 bad minors + 3 resumes)
    assert "DONE cases=48 failures=0" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_panel_solve_kernel_matches_numpy(dtype):
    """The Cholesky panel's solve ``P = W L^{-T}`` in place on a column-major view (a block column's rows,
    leading dimension larger than the view) and on a row-major array (the fallback), against numpy; the
    strict upper triangle of L is not read."""
    from ftkit.linalg._blas import trsm_right_lower_t

    rng = np.random.default_rng(5)
    low = np.tril(rng.standard_normal((7, 7))) + 8.0 * np.eye(7)
    junk = low + np.triu(np.full((7, 7), np.nan), 1)  # only the lower triangle may be read
    big = np.asfortranarray(rng.standard_normal((30, 12))).astype(dtype)
    want = np.linalg.solve(low, big[5:25, 2:9].T.astype(np.float64)).T
    view = big[5:25, 2:9]
    trsm_right_lower_t(junk.astype(dtype), view)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    assert np.allclose(view, want, rtol=tol, atol=tol)
    c_order = np.ascontiguousarray(rng.standard_normal((20, 7)).astype(dtype))
    want = np.linalg.solve(low, c_order.T.astype(np.float64)).T
    trsm_right_lower_t(low.astype(dtype), c_order)
    assert np.allclose(c_order, want, rtol=tol, atol=tol)


def test_buffer_cache_keeps_what_one_call_had_in_use():
    """Buffers in use at once, more than BUFFER_CACHE_BYTES together (PDSYR2K's moved operands, messages
    and panels at n = 4096 on 2 x 2), are all kept when given back: the next call gets the same memory
    instead of faulting fresh pages."""
    from ftkit.linalg.pblas import _panel_buffers as pb

    cache = pb._BufferCache()
    size = pb.BUFFER_CACHE_BYTES // 8 // 2  # float64 elements: three buffers are 1.5x the fixed cap
    taken = [cache.take(size) for _ in range(3)]  # never written: no page is touched
    for buf in taken:
        cache.give(buf)
    again = [cache.take(size) for _ in range(3)]
    assert {id(b) for b in again} == {id(b) for b in taken}
    assert id(cache.take(size)) not in {id(b) for b in taken}  # one more, beside them in use, is new


def test_release_buffers_frees_what_the_routines_kept_and_they_work_after_it(grid):
    """The buffers kept between calls are freed on request (and the high-water mark with them), except one
    a running call still holds; a routine after it allocates again and computes the same result."""
    from ftkit.linalg.pblas import _panel_buffers as pb

    rng = np.random.default_rng(4)
    a, c = rng.standard_normal((40, 30)), rng.standard_normal((40, 40))
    A = linalg.DistributedMatrix.from_global(grid, a, mb=4, nb=4)

    def call() -> np.ndarray:
        C = linalg.DistributedMatrix.from_global(grid, c, mb=4, nb=4)
        linalg.pdsyr2k("L", "N", 40, 30, 1.0, A, 0, 0, A, 0, 0, 0.5, C, 0, 0)
        return C.to_global()

    first = call()
    kept: dict[object, np.ndarray] = {}
    held: dict[object, np.ndarray] = {}
    pb.pooled_buffer(kept, 0, (1000, 300))
    pb.pooled_buffer(held, 0, (100, 30))   # a running call's, not given back
    pb.release_pool(kept)
    assert linalg.release_buffers() >= 1000 * 300 * 8
    assert pb._buffers._free == [] and pb._buffers._peak == pb._buffers._in_use > 0
    assert linalg.release_buffers() == 0
    pb.release_pool(held)
    assert np.array_equal(call(), first)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pooled_redistribution_writes_every_element(grid, dtype):
    """Moves into buffers of a pool (PDSYRK's and PDSYR2K's transposed operands) overwrite every element of
    reused, dirty memory: the pieces equal freshly allocated ones bit for bit, and live in the pool."""
    from ftkit.linalg.pblas._panel_buffers import pooled_buffer, release_pool
    from ftkit.linalg.pblas._redistribute import Move, redistribute_many

    rng = np.random.default_rng(9)
    A = linalg.DistributedMatrix.from_global(grid, rng.standard_normal((23, 17)).astype(dtype), mb=4, nb=3)
    C = linalg.DistributedMatrix.zeros(grid, 19, 19, mb=5, nb=5, dtype=dtype)
    moves = [Move(A, 2, 1, True, C.row_map(0, 15), C.col_map(3, 11)),  # messages: transposed
             Move(A, 1, 2, False, A.row_map(1, 9), A.col_map(2, 7))]  # no message: a copy
    want = redistribute_many(moves)
    dirty: dict[object, np.ndarray] = {}
    for key in range(4):  # leave NaN-filled buffers in the cache for the pool to take
        pooled_buffer(dirty, key, (40, 40))[...] = np.nan
    release_pool(dirty)
    pool: dict[object, np.ndarray] = {}
    got = redistribute_many(moves, pool)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w)
        assert any(np.shares_memory(g, buf) for buf in pool.values())
    np.testing.assert_array_equal(want[0], A.to_global()[2:13, 1:16].T)
    release_pool(pool)
