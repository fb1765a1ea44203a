"""FT_PDTRSM, FT_PDTRMM, FT_PDSYRK, FT_PDSYR2K: bit flips at every injection point found and corrected, no
false positives on the hard families (``programs/ft_pblas3_campaign.py`` under mpirun), detect mode and the
argument positions in process."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import linalg
from ftkit.errors import PBLASArgumentError
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg import checksums
from ftkit.linalg.abft._blocks import BlockSegmentation
from ftkit.linalg.abft._solve_sums import SolveChecksums
from ftkit.linalg.abft._tri_product import segmentation, triangle_with_checksums
from ftkit.linalg.checksums._kernels import encode_rows_into
from ftkit.linalg.pblas._panel_buffers import pooled_buffer, release_buffers, release_pool
from ftkit.linalg.pblas._redistribute import same_layout
from ftkit.linalg.pblas._tri_sweep import tri_cols, triangle_operand

from ..conftest import run_python

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.mark.mpi
@pytest.mark.parametrize("nprow,npcol,seed", [(2, 3, 31), (4, 1, 32), (1, 1, 33)],
                         ids=["2x3", "4x1", "1x1"])
def test_flips_corrected_and_no_false_positives(nprow, npcol, seed):
    trials = 96
    r = run_python(nprow * npcol, PROGRAMS / "ft_pblas3_campaign.py", str(nprow), str(npcol), "--seed",
                   str(seed), "--trials", str(trials), timeout=600).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    m = re.search(r"DONE trials=(\d+) failures=0 false_positives=0 flips=(\d+) detected=(\d+) "
                  r"corrected=(\d+)", r.stdout)
    assert m, r.stdout[-2000:]
    flips, detected, corrected = int(m.group(2)), int(m.group(3)), int(m.group(4))
    assert flips >= trials // 4  # flips were made (alpha == 0 cases make none)
    assert detected > 0 and corrected == detected


@pytest.mark.mpi
def test_trsm_on_non_square_grids():
    """2x3 and 3x2, every flag combination, offsets and block sizes that do not divide the sizes (the solve's
    checksums are multiplied where the solution's rows are): error-free PDTRSM's result bit for bit; a flip
    in the solution located at its element and fixed; one in the triangle and one in alpha B solved again,
    PDTRSM's result bit for bit. Also at offset 0 with B blocked as A, where T is copied out of A's own
    piece and summed in one pass."""
    res = run_python(6, PROGRAMS / "ft_trsm_grids.py", timeout=300).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 2 * (16 + 4) * 4 and "FAIL" not in res.stdout, res.stdout
    assert res.stdout.count(" aligned ") == 2 * 4 * 4, res.stdout


@pytest.mark.mpi
def test_rank_update_with_one_column_tiles_is_plain_s_bit_for_bit():
    """Campaign seed 103 on 1 x 4, trial 390: a process holding one column of C multiplies a 3 x 1 tile,
    through numpy's matrix-vector product, whose rounding followed the A panel's row stride (checksum rows
    under the tile's rows in ft_pdsyrk): every flag combination of ft_pdsyrk and ft_pdsyr2k, error-free,
    equals the plain routine's result bit for bit."""
    res = run_python(4, PROGRAMS / "ft_rank_one_column.py", timeout=300).check()
    assert "DONE cases=36 failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 36 and "FAIL" not in res.stdout, res.stdout


@pytest.fixture(scope="module")
def grid():
    g = linalg.ProcessGrid(MPI.COMM_SELF, 1, 1)
    yield g
    g.free()


def _solve_case(grid):
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (30, 30)) + 30 * np.eye(30)
    b = rng.uniform(-1, 1, (30, 20))
    A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    B = linalg.DistributedMatrix.from_global(grid, b, mb=8, nb=8)
    return A, B


@pytest.mark.parametrize("target,step", [("A", 0), ("B", 0), ("C", 0), ("C", 1)])
def test_trsm_flip_at_each_point_is_corrected(grid, target, step):
    A, B = _solve_case(grid)
    ref = B.copy()
    linalg.pdtrsm("L", "U", "T", "N", 30, 20, 2.0, A, 0, 0, ref, 0, 0)
    plan = InjectionPlan([BitFlip(target=target, step=step, index=(12, 7), bit=58)])
    rep = linalg.ft_pdtrsm("L", "U", "T", "N", 30, 20, 2.0, A, 0, 0, B, 0, 0, bs=4, inject=plan)
    assert len(plan.records) == 1
    assert rep.detected >= 1 and rep.corrected == rep.detected and rep.uncorrected == 0
    if (target, step) == ("C", 1):
        # a wrong element of the solution: located from the checksums and fixed in O(1), to rounding
        rec = plan.records[0]
        assert {e.action for e in rep.events} == {"located"}
        assert {e.element for e in rep.events} == {rec.local_index}  # 1 x 1 grid: local == global
        np.testing.assert_allclose(B.to_global(), ref.to_global(), rtol=0, atol=1e-15)
    else:  # the solve itself went wrong (wrong triangle or right-hand side): its columns are solved again
        assert {e.action for e in rep.events} == {"recomputed"}
        assert np.array_equal(B.to_global(), ref.to_global())


@pytest.mark.parametrize("target,step", [("A", 0), ("B", 0), ("C", 0), ("C", 1)])
def test_trmm_flip_at_each_point_is_corrected(grid, target, step):
    # ft_pdtrmm multiplies by the triangle only (the plain sweep) and checks the product's blocks
    A, B = _solve_case(grid)
    ref = B.copy()
    linalg.pdtrmm("L", "U", "T", "N", 30, 20, 2.0, A, 0, 0, ref, 0, 0)
    plan = InjectionPlan([BitFlip(target=target, step=step, index=(12, 7), bit=58)])
    rep = linalg.ft_pdtrmm("L", "U", "T", "N", 30, 20, 2.0, A, 0, 0, B, 0, 0, bs=4, inject=plan)
    assert len(plan.records) == 1
    assert rep.detected >= 1 and rep.corrected == rep.detected and rep.uncorrected == 0
    if (target, step) == ("C", 1):  # one wrong element of the product: located in its block, fixed in O(1)
        rec = plan.records[0]
        assert {e.action for e in rep.events} == {"located"}
        assert {e.element for e in rep.events} == {rec.local_index}
    else:  # a wrong triangle or right-hand side: the flagged column segments are computed again
        assert {e.action for e in rep.events} == {"recomputed"}
    np.testing.assert_allclose(B.to_global(), ref.to_global(), rtol=0, atol=1e-12)


def test_trmm_side_r_located_event_is_in_b_coordinates(grid):
    A, B = _solve_case(grid)
    ref = B.copy()
    linalg.pdtrmm("R", "L", "N", "U", 30, 20, 1.0, A, 5, 3, ref, 0, 0)
    plan = InjectionPlan([BitFlip(target="C", step=1, index=(3, 9), bit=60)])
    rep = linalg.ft_pdtrmm("R", "L", "N", "U", 30, 20, 1.0, A, 5, 3, B, 0, 0, bs=4, inject=plan)
    assert [e.action for e in rep.events] == ["located"]
    assert rep.events[0].element == (9, 3)  # the flip hit B.T's (3, 9)
    np.testing.assert_allclose(B.to_global(), ref.to_global(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("offsets", [(3, 4, 2), (0, 0, 0)], ids=["moved", "own-piece"])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_trmm_triangle_and_checksums_in_one_pass_are_triangle_operand_s(grid, transpose, lower, unit,
                                                                        offsets):
    # ft_pdtrmm makes T in place in the redistributed piece, or (T's piece A's own local piece) copies it out
    # of A, and sums it in that pass: the very T the plain routine multiplies by (NaN in the excluded
    # triangle and on a unit diagonal never read), A untouched, never A's memory
    ia, ja, ib = offsets
    rng = np.random.default_rng(9)
    a = rng.uniform(-1, 1, (29, 31))
    a[rng.random(a.shape) < 0.2] = np.nan
    A = linalg.DistributedMatrix.from_global(grid, a, mb=5, nb=5)
    B = linalg.DistributedMatrix.zeros(grid, 23, 4, mb=5, nb=5)
    rows = B.row_map(ib, 21)
    cols = tri_cols(rows, grid.npcol)
    # the path taken: A's own piece untransposed (on one process any offset), moved when transposed
    assert same_layout(A, ia, ja, transpose, rows, cols) == (not transpose)
    seg = BlockSegmentation.of(B, ib, 0, 21, 4, 3)
    ref = triangle_operand(A, ia, ja, transpose, lower, unit, rows, cols)
    t, achk = triangle_with_checksums(A, ia, ja, transpose, lower, unit, rows, cols, seg, 3)
    assert np.array_equal(t, ref, equal_nan=True) and t.flags.f_contiguous
    assert not np.shares_memory(t, A.local)
    assert np.array_equal(A.to_global(), a, equal_nan=True)
    want = np.zeros((3 * seg.nr, 21), order="F")
    encode_rows_into(ref, seg.rb, checksums.segment_weights(seg.rb), want, False, 3)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(achk))  # a NaN the triangle keeps reaches its segment's sums
    np.testing.assert_allclose(achk[finite], want[finite], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_trsm_triangle_and_its_sums_in_one_pass_are_triangle_operand_s(grid, transpose, lower, unit):
    # ft_pdtrsm makes T and takes its column sums per row segment in one pass: the very T the plain routine
    # solves with (NaN in the excluded triangle and on a unit diagonal never read), A untouched, and the
    # sums a separate pass over that T gives (NaN kept where the triangle keeps one)
    rng = np.random.default_rng(10)
    a = rng.uniform(-1, 1, (29, 31))
    a[rng.random(a.shape) < 0.2] = np.nan
    A = linalg.DistributedMatrix.from_global(grid, a, mb=5, nb=5)
    B = linalg.DistributedMatrix.zeros(grid, 23, 4, mb=5, nb=5)
    rows, wcols = B.row_map(2, 21), B.col_map(0, 4)
    cols = tri_cols(rows, grid.npcol)
    ref = triangle_operand(A, 3, 4, transpose, lower, unit, rows, cols)
    chk = SolveChecksums(grid, rows, cols, wcols, 3, lower)
    t = chk.make_triangle(A, 3, 4, transpose, unit)
    assert np.array_equal(t, ref, equal_nan=True) and t.flags.f_contiguous
    assert np.array_equal(A.to_global(), a, equal_nan=True)
    want = np.zeros((3 * (len(chk.rl) - 1), 21), order="F")
    encode_rows_into(ref, chk.rl, np.ascontiguousarray(chk.rw[:, 0]), want, False, 3)
    ((rid, pos, got),) = chk.t_blocks()  # 1 x 1: every sum comes from this process
    assert np.array_equal(rid, np.arange(len(chk.rl) - 1)) and np.array_equal(pos, np.arange(21))
    got = np.concatenate(list(got), axis=0)  # kind-major rows, as the kernels lay them out
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_trsm_triangle_copied_out_of_a_and_summed_in_one_pass(grid, lower, unit):
    # where T's piece is A's own local piece (the layout ft_pdtrsm meets at offset 0 with B's blocking), T is
    # copied out of A, made a triangle and summed in one pass reading only the kept rows: the very T the
    # plain routine solves with (NaN in the excluded triangle and on a unit diagonal never read), in a
    # buffer of the pool that is not A's memory, A untouched, and the sums a separate pass over that T gives
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (21, 21))
    a[rng.random(a.shape) < 0.2] = np.nan
    A = linalg.DistributedMatrix.from_global(grid, a, mb=5, nb=5)
    B = linalg.DistributedMatrix.zeros(grid, 21, 4, mb=5, nb=5)
    rows, wcols = B.row_map(0, 21), B.col_map(0, 4)
    cols = tri_cols(rows, grid.npcol)
    assert same_layout(A, 0, 0, False, rows, cols) and A.local.flags.f_contiguous  # the one-pass path
    ref = triangle_operand(A, 0, 0, False, lower, unit, rows, cols)
    chk = SolveChecksums(grid, rows, cols, wcols, 3, lower)
    _poison_buffer_cache()
    pool: dict[object, np.ndarray] = {}
    t = chk.make_triangle(A, 0, 0, False, unit, pool)
    assert any(np.shares_memory(t, buf) for buf in pool.values()) and not np.shares_memory(t, A.local)
    assert np.array_equal(t, ref, equal_nan=True) and t.flags.f_contiguous
    assert np.array_equal(A.to_global(), a, equal_nan=True)
    want = np.zeros((3 * (len(chk.rl) - 1), 21), order="F")
    encode_rows_into(ref, chk.rl, np.ascontiguousarray(chk.rw[:, 0]), want, False, 3)
    ((_, _, got),) = chk.t_blocks()
    got = np.concatenate(list(got), axis=0)
    assert np.array_equal(np.isfinite(want), np.isfinite(got))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-13, atol=1e-14)
    release_pool(pool)


def _poison_buffer_cache() -> None:
    """Leave only NaN-filled buffers in the process-wide cache, so the next pooled pieces start as NaN."""
    release_buffers()
    pool: dict[object, np.ndarray] = {}
    for size in (400, 900, 2000, 5000):
        pooled_buffer(pool, size, (size,))[...] = np.nan
    release_pool(pool)


@pytest.mark.parametrize("side,transa", [("L", "N"), ("L", "T"), ("R", "N"), ("R", "T")])
def test_triangle_in_a_reused_buffer_is_plain_s_bit_for_bit(grid, side, transa):
    # ft_pdtrmm / ft_pdtrsm make T in a buffer kept between calls (whatever an earlier call left there):
    # the piece is that buffer, every element of it written, so their error-free results stay the plain
    # routines' bit for bit
    A, B = _solve_case(grid)
    rows = B.row_map(0, 30) if side == "L" else B.col_map(0, 20)
    cols = tri_cols(rows, grid.npcol)
    seg = BlockSegmentation.of(B, 0, 0, 30, 20, 4)
    _poison_buffer_cache()
    pool: dict[object, np.ndarray] = {}
    t, _ = triangle_with_checksums(A, 0, 0, transa == "T", True, False, rows, cols, seg, 3, pool)
    assert any(np.shares_memory(t, buf) for buf in pool.values())
    assert np.array_equal(t, triangle_operand(A, 0, 0, transa == "T", True, False, rows, cols))
    release_pool(pool)
    m, n = (30, 20) if side == "L" else (20, 30)
    A, _ = _solve_case(grid)
    B = linalg.DistributedMatrix.from_global(grid, np.random.default_rng(5).uniform(-1, 1, (m, n)), mb=8,
                                             nb=8)
    for plain, ft in ((linalg.pdtrmm, linalg.ft_pdtrmm), (linalg.pdtrsm, linalg.ft_pdtrsm)):
        ref, got = B.copy(), B.copy()
        plain(side, "L", transa, "N", m, n, 2.0, A, 0, 0, ref, 0, 0)
        _poison_buffer_cache()
        rep = ft(side, "L", transa, "N", m, n, 2.0, A, 0, 0, got, 0, 0, bs=4)
        assert rep.detected == 0 and rep.unchecked == 0 and rep.blocks_checked > 0
        assert np.array_equal(got.to_global(), ref.to_global())


@pytest.mark.parametrize("side,uplo,transa,diag", [("L", "L", "N", "N"), ("L", "U", "T", "U"),
                                                   ("R", "U", "N", "N"), ("R", "L", "T", "U")])
def test_plain_triangle_in_a_reused_buffer_gives_the_fresh_result(grid, side, uplo, transa, diag):
    # pdtrmm / pdtrsm also make T in a buffer of the cache (given back after the sweep): whatever an earlier
    # call left there (NaN here) never reaches the result
    a = np.random.default_rng(6).uniform(-1, 1, (30, 30)) + 30 * np.eye(30)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    m, n = (30, 20) if side == "L" else (20, 30)
    b = np.random.default_rng(7).uniform(-1, 1, (m, n))
    B = linalg.DistributedMatrix.from_global(grid, b, mb=8, nb=8)
    for plain in (linalg.pdtrmm, linalg.pdtrsm):
        release_buffers()
        fresh, reused = B.copy(), B.copy()
        plain(side, uplo, transa, diag, m, n, 2.0, A, 0, 0, fresh, 0, 0)
        assert release_buffers() > 0  # T's buffer went back to the cache
        _poison_buffer_cache()
        plain(side, uplo, transa, diag, m, n, 2.0, A, 0, 0, reused, 0, 0)
        assert np.isfinite(reused.to_global()).all()
        assert np.array_equal(reused.to_global(), fresh.to_global())


def test_trmm_segmentation_is_kept_per_layout(grid):
    # ft_pdtrmm cuts its blocks once per layout: the kept cut is BlockSegmentation.of's, read-only (shared by
    # every call of the shape), and another submatrix, blocking or bs gets its own
    A, B = _solve_case(grid)
    seg = segmentation(B, 2, 1, 25, 17, 4)
    ref = BlockSegmentation.of(B, 2, 1, 25, 17, 4)
    for name in ("rows_here", "cols_here", "rb", "cb"):
        assert np.array_equal(getattr(seg, name), getattr(ref, name))
        assert not getattr(seg, name).flags.writeable
    assert segmentation(B.copy(), 2, 1, 25, 17, 4) is seg  # the layout, not the matrix, is the key
    assert segmentation(B, 2, 1, 25, 17, 3) is not seg and segmentation(B, 0, 1, 25, 17, 4) is not seg
    C = linalg.DistributedMatrix.from_global(grid, B.to_global(), mb=5, nb=8)
    assert not np.array_equal(segmentation(C, 2, 1, 25, 17, 4).rb, seg.rb)


def test_trsm_detect_mode_reports_and_leaves_the_result(grid):
    A, B = _solve_case(grid)
    ref = B.copy()
    linalg.pdtrsm("R", "L", "N", "U", 30, 20, 1.0, A, 5, 3, ref, 0, 0)
    plan = InjectionPlan([BitFlip(target="C", step=1, index=(3, 9), bit=60)])
    rep = linalg.ft_pdtrsm("R", "L", "N", "U", 30, 20, 1.0, A, 5, 3, B, 0, 0, bs=4, mode="detect",
                           inject=plan)
    assert rep.detected >= 1 and rep.corrected == 0 and rep.uncorrected == rep.detected
    assert not np.array_equal(B.to_global(), ref.to_global())


@pytest.mark.parametrize("routine,args,pos", [
    ("ft_pdtrsm", ("L", "U", "N", "N", 4, 4, 1.0, "A", 0, 0, "B", 0, 0), 16),
    ("ft_pdtrmm", ("R", "L", "T", "U", 4, 4, 1.0, "A", 0, 0, "B", 0, 0), 16),
    ("ft_pdsyrk", ("U", "N", 4, 4, 1.0, "A", 0, 0, 0.0, "B", 0, 0), 15),
    ("ft_pdsyr2k", ("L", "T", 4, 4, 1.0, "A", 0, 0, "A", 0, 0, 0.0, "B", 0, 0), 19),
])
def test_ft_argument_positions(grid, routine, args, pos):
    A, B = _solve_case(grid)
    call = [A if x == "A" else B if x == "B" else x for x in args]
    fn = getattr(linalg, routine)
    for offset, kw in enumerate(({"bs": 0}, {"tol": "loose"}, {"mode": "fix"}, {"inject": "flip"})):
        with pytest.raises(PBLASArgumentError) as e:
            fn(*call, **kw)
        assert e.value.position == pos + offset and e.value.routine == routine.upper()
