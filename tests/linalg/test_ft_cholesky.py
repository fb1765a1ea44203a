"""FT_PDPOTRF: bit flips in the updates corrected (in process and in the example under mpirun), and a rank
SIGKILLed mid-factorization: the relaunch resumes at the checkpointed panel and ends with the failure-free
factor's solution bit for bit (``examples/cholesky_solver.py``)."""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from ftkit import inject, linalg
from ftkit.errors import PBLASArgumentError
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg.cholesky._factored import FactoredColumns
from ftkit.linalg.cholesky.potrf import CholeskyWork

from ..conftest import run_python, wait_for_int

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cholesky_solver.py"
PROGRAMS = Path(__file__).resolve().parent / "programs"


def _digest(out: str) -> str | None:
    m = re.search(r"solution digest (\w+)", out)
    return m.group(1) if m else None


@pytest.mark.mpi
def test_flip_corrected_and_killed_rank_resumes_bit_for_bit(tmp_path):
    args = ("--n", "160", "--nb", "12", "--ckpt-every", "3")
    clean = run_python(4, EXAMPLE, "--dir", str(tmp_path / "clean"), *args, timeout=300).check()
    assert "resumed at panel 0" in clean.stdout and _digest(clean.stdout), clean.stdout
    x_clean = np.load(tmp_path / "clean" / "x.npy")

    flip = run_python(4, EXAMPLE, "--dir", str(tmp_path / "flip"), "--flip", *args, timeout=300).check()
    m = re.search(r"detected (\d+), corrected (\d+), flip", flip.stdout)
    assert m and int(m.group(1)) >= 1 and m.group(1) == m.group(2), flip.stdout
    x_flip = np.load(tmp_path / "flip" / "x.npy")
    assert np.max(np.abs(x_flip - x_clean)) <= 1e-12 * np.max(np.abs(x_clean))

    killed = run_python(4, EXAMPLE, "--dir", str(tmp_path / "kill"), "--kill-rank", "1", "--kill-panel", "7",
                        *args, timeout=300)
    assert "rank 1 killing itself after panel 7" in killed.stdout, killed.stdout + killed.stderr
    assert _digest(killed.stdout) is None, "the killed run must not finish"
    again = run_python(4, EXAMPLE, "--dir", str(tmp_path / "kill"), *args, timeout=300).check()
    # checkpoints after panels 2 and 5 (every 3): the relaunch resumes at panel 6, not at 0
    assert "resumed at panel 6" in again.stdout, again.stdout
    assert _digest(again.stdout) == _digest(clean.stdout)
    assert np.array_equal(np.load(tmp_path / "kill" / "x.npy"), x_clean)


@pytest.mark.mpi
def test_killed_rank_resumes_from_factored_columns_only(tmp_path):
    """U and a redistributed work matrix: the checkpoint holds the factored columns only, on and below their
    diagonal blocks (no trailing matrix, no rows above), the relaunch rebuilds the trailing matrix and ends
    with pdpotrf's factor bit for bit."""
    prog, d = PROGRAMS / "ft_potrf_resume.py", str(tmp_path / "run")
    killed = run_python(4, prog, "--dir", d, "--kill-rank", "2", "--kill-panel", "7", timeout=300)
    assert "rank 2 killing itself after panel 7" in killed.stdout, killed.stdout + killed.stderr
    assert "bitwise" not in killed.stdout, "the killed run must not finish"
    _assert_survivors_told(killed, {0, 1, 3}, 2)
    again = run_python(4, prog, "--dir", d, timeout=300).check()
    # checkpoints after panels 2 and 5 (every 3): the relaunch resumes at panel 6 with columns < 48 read back,
    # rows >= 8 j of block column j: sum_{j<6} (90 - 8 j) 8 = 3360 values (the whole columns: 4320)
    assert "resumed at panel 6" in again.stdout, again.stdout
    assert "stored L 3360\n" in again.stdout and "factored 3360\n" in again.stdout, again.stdout
    assert "bitwise True" in again.stdout, again.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("seed", [1, 2])
def test_rank_killed_from_outside_at_a_random_moment_on_2x3_resumes_bit_for_bit(tmp_path, seed):
    """2x3 (the panel's direct sends): a random rank SIGKILLed from outside at a random moment of the
    factorization (12 panels paced 0.15 s apart; the kill within the first 0.9 s, so always inside it). The
    job ends, non-zero, without finishing; the relaunch resumes at a checkpointed panel (every 3) and ends
    with pdpotrf's factor bit for bit."""
    prog, d, ready = PROGRAMS / "ft_potrf_resume.py", str(tmp_path / "run"), tmp_path / "ready"
    rng = random.Random(seed)
    victim, delay = rng.randrange(6), rng.uniform(0.0, 0.9)

    def kill() -> None:
        if wait_for_int(ready, 300) is not None:
            time.sleep(delay)  # the random moment, counted from the factorization's start
            inject.kill_pid(int((tmp_path / f"ready.{victim}").read_text()))

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    killed = run_python(6, prog, "--dir", d, "--grid", "2x3", "--ready", str(ready), "--pace", "0.15",
                        timeout=300)
    killer.join(60)
    assert not killer.is_alive() and ready.exists(), killed.stdout + killed.stderr
    assert not killed.timed_out and killed.returncode != 0, killed.stdout + killed.stderr
    assert "bitwise" not in killed.stdout, "the killed run must not finish"
    _assert_survivors_told(killed, set(range(6)) - {victim}, victim)
    again = run_python(6, prog, "--dir", d, "--grid", "2x3", timeout=300).check()
    m = re.search(r"resumed at panel (\d+)", again.stdout)
    assert m and int(m.group(1)) % 3 == 0, again.stdout
    assert "bitwise True" in again.stdout, again.stdout


def _assert_survivors_told(killed, survivors: set[int], victim: int) -> None:
    """Every survivor of the kill left with a ProcessFailure (ftkit's, not a raw MPI error) naming the dead
    rank: the factorization's says in which panel and how to go on, a checkpoint's what it was writing."""
    out = killed.stdout + killed.stderr
    told = {int(m.group(1)): m.group(2) for m in re.finditer(r"^rank (\d+) left: (.*)$", killed.stdout, re.M)}
    assert set(told) == survivors, out
    assert "mpi4py.MPI.Exception" not in out, out
    for line in told.values():
        assert re.match(r"(ProcessFailure|TimeoutFailure): ", line), line
        assert (re.search(r"FT_PDPOTRF: a process of the grid failed in panel \d+ of 12; its progress is "
                          r"checkpointed up to panel \d+: relaunch the program, it resumes there", line)
                or re.search(r"no checkpoint of this factorization yet", line)
                or re.search(r"checkpoint \d+: .*a peer process failed", line)), line
    # the first to learn of the death learns it from MPI (the others may be told by the revocation first)
    assert any(f"failed ranks: [{victim}]" in line for line in told.values()), out


def test_a_relaunch_on_another_grid_is_refused_by_every_rank(tmp_path):
    """The checkpoint of a 2x2 factorization, resumed on 1x4 (same ranks, same matrix and blocking): the
    protected arrays do not fit; every rank raises a RecoveryError saying what to do, and the job ends (it
    started again from panel 0 before, and the first checkpoint raised a CheckpointError about recover())."""
    prog, d = PROGRAMS / "ft_potrf_resume.py", str(tmp_path / "run")
    killed = run_python(4, prog, "--dir", d, "--kill-rank", "2", "--kill-panel", "7", timeout=300)
    assert "rank 2 killing itself after panel 7" in killed.stdout, killed.stdout + killed.stderr
    again = run_python(4, prog, "--dir", d, "--grid", "1x4", timeout=300)
    assert not again.timed_out and again.returncode != 0, again.stdout + again.stderr
    assert "ft_pdpotrf: cannot resume from the checkpoint" in again.stderr, again.stderr
    assert "resume on the same grid and layout" in again.stderr, again.stderr
    assert "bitwise" not in again.stdout, again.stdout


@pytest.fixture(scope="module")
def grid():
    g = linalg.ProcessGrid(MPI.COMM_SELF, 1, 1)
    yield g
    g.free()


def _spd(n: int, seed: int = 1) -> np.ndarray:
    r = np.random.default_rng(seed).standard_normal((n, n))
    return r @ r.T / n + np.eye(n)


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("target", ["A", "B", "C"])
def test_update_flip_corrected(grid, uplo, target):
    a = _spd(50)
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=6, nb=6)
    linalg.pdpotrf(uplo, 47, ref, 2, 2)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=6, nb=6)
    plan = InjectionPlan([BitFlip(target=target, index=(3, 2), bit=60, persistent=False)], seed=5)
    rep = linalg.ft_pdpotrf(uplo, 47, A, 2, 2, bs=3, inject=plan, inject_panel=1)
    assert len(plan.records) == 1
    assert rep.detected >= 1 and rep.corrected == rep.detected
    got, want = A.to_global(), ref.to_global()
    assert np.max(np.abs(got - want)) <= 1e-13 * np.max(np.abs(want))


def test_clean_run_no_false_positive_and_float32(grid):
    i = np.arange(40)
    hilbert = 1.0 / (i[:, None] + i[None, :] + 1.0) + 1e-6 * np.eye(40)
    for a, dtype in ((hilbert, np.float64), (_spd(40) * 1e8, np.float64), (_spd(40), np.float32)):
        A = linalg.DistributedMatrix.from_global(grid, a.astype(dtype), mb=5, nb=5)
        rep = linalg.ft_pdpotrf("L", 40, A, 0, 0, bs=5, tol="statistical")
        assert rep.detected == 0 and rep.blocks_checked > 0
        low = np.tril(A.to_global().astype(np.float64))
        assert A.dtype == dtype
        eps = np.finfo(dtype).eps
        assert np.max(np.abs(low @ low.T - a.astype(dtype))) <= 100 * 40 * eps * np.max(np.abs(a))


def test_not_positive_definite_and_argument_positions(grid):
    a = _spd(20)
    a[9, 9] = -1.0
    A = linalg.DistributedMatrix.from_global(grid, a, mb=4, nb=4)
    with pytest.raises(linalg.FactorizationError) as e:
        linalg.ft_pdpotrf("L", 20, A, 0, 0)
    assert e.value.minor == 10
    for kw, pos in (({"ckpt": object()}, 7), ({"bs": -1}, 8), ({"tol": "x"}, 9), ({"inject": 3}, 11)):
        with pytest.raises(PBLASArgumentError) as e:
            linalg.ft_pdpotrf("L", 20, A, 0, 0, **kw)
        assert e.value.position == pos


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_error_free_factor_is_pdpotrf_bit_for_bit(grid, uplo):
    a = _spd(61, seed=3)
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=7, nb=7)
    linalg.pdpotrf(uplo, 58, ref, 3, 3)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=7, nb=7)
    rep = linalg.ft_pdpotrf(uplo, 58, A, 3, 3)
    assert rep.detected == 0 and rep.blocks_checked > 0
    assert np.array_equal(A.to_global(), ref.to_global())


@pytest.mark.parametrize("bs", [None, 3])
def test_checksums_pass_saves_exactly_the_lower_part(grid, bs):
    """ft_pdpotrf's saved copy of A, taken in the initial checksums' pass (``UpdateChecks.init(save=...)``),
    holds what ``CholeskyWork``'s own copy holds (the lower block trapezoid, diagonal blocks whole), leaves
    the rest of the buffer as it was, and the checksums agree with those of the separate pass; ``original()``
    refuses to answer before the copy is made."""
    from ftkit.linalg.cholesky._abft import UpdateChecks

    n, nb, off = 23, 5, 2
    a = _spd(n + off, seed=4)
    ref = CholeskyWork("L", n, linalg.DistributedMatrix.from_global(grid, a, mb=nb, nb=nb), off, off,
                       in_place=True, saved=lambda shape: np.zeros(shape, order="F"))
    want = ref.original()
    A = linalg.DistributedMatrix.from_global(grid, a, mb=nb, nb=nb)
    work = CholeskyWork("L", n, A, off, off, in_place=True,
                        saved=lambda shape: np.full(shape, np.nan, order="F"), copy_saved=False)
    with pytest.raises(RuntimeError):
        work.original()
    checks = UpdateChecks(work.steps, None, bs)
    assert checks.init(0, save=work.unsaved())
    work.save(copied=True)
    assert work.unsaved() is None
    got = work.original()
    lower = want != 0.0  # A's lower block trapezoid (no zero in it); the rest left as the buffer held it
    assert lower.sum() > n * n // 2 and np.array_equal(got[lower], want[lower])
    assert np.isnan(got[~lower]).all()
    separate = UpdateChecks(work.steps, None, bs)
    assert not separate.init(0)
    np.testing.assert_allclose(checks.chk_t, separate.chk_t, rtol=1e-13, atol=1e-13)
    assert np.count_nonzero(checks.chk_t) == np.count_nonzero(separate.chk_t) > 0


def test_checkpointed_columns_are_the_lower_part_packed_and_only_grow(grid):
    """What a checkpoint of ft_pdpotrf holds: each factored block column from its diagonal block down (not
    the scratch rows above), the packing of the block columns < k a prefix of that of those < k' > k (a
    checkpoint copies in only the new ones), and unpacking puts exactly those values back."""
    n, nb, off = 23, 5, 2  # an offset: a first panel 3 wide, w a view into the local array
    A = linalg.DistributedMatrix.from_global(grid, _spd(n + off, seed=6), mb=nb, nb=nb)
    work = CholeskyWork("L", n, A, off, off)
    w, panels = work.steps.w, work.steps.panels
    assert panels[:2] == [(0, 3), (3, 8)]
    w[...] = np.random.default_rng(7).standard_normal(w.shape)
    done = FactoredColumns(work.steps)
    first = done.pack(3).copy()
    w[0, panels[3][0]] = w[panels[4][0] - 1, panels[4][0]] = np.nan  # above diagonal blocks 3, 4: not packed
    got = done.pack(5)
    assert got.size == done.size(5) == sum((n - s) * (e - s) for s, e in panels[:5])
    assert np.array_equal(got[:first.size], first)
    want = np.concatenate([w[s:, s:e].ravel(order="F") for s, e in panels[:5]])
    assert np.array_equal(got, want)
    saved = w.copy()
    e5 = panels[4][1]
    w[:, :e5] = 0.0
    done.unpack(got.copy(), 5)
    lower = np.zeros(w.shape, bool)
    for s, e in panels[:5]:
        lower[s:, s:e] = True
    assert np.array_equal(w[lower], saved[lower]) and not w[:, :e5][~lower[:, :e5]].any()


def test_next_factorization_packs_into_the_checkpointed_buffer(grid, tmp_path):
    """A second ft_pdpotrf with the same checkpointer packs its factored columns into the buffer the first
    protected (no fresh pages per call), and what it protects is its own factored columns, packed."""
    import ftkit
    from ftkit.linalg.cholesky.ft_potrf import CKPT_L

    cfg = ftkit.Config(ckpt_dir=tmp_path / "local", glbl_dir=tmp_path / "global", meta_dir=tmp_path / "meta")
    ckpt = ftkit.Checkpointer(config=cfg, comm=MPI.COMM_SELF)
    try:
        held = []
        for seed in (1, 2):
            a = _spd(40, seed)
            ref = linalg.DistributedMatrix.from_global(grid, a, mb=5, nb=5)
            linalg.pdpotrf("L", 40, ref, 0, 0)
            A = linalg.DistributedMatrix.from_global(grid, a, mb=5, nb=5)
            linalg.ft_pdpotrf("L", 40, A, 0, 0, ckpt=ckpt, ckpt_every=2)
            assert np.array_equal(A.to_global(), ref.to_global())
            held.append(ckpt.protected[CKPT_L])
        assert np.shares_memory(held[0], held[1])
        # checkpoints after panels 1, 3, 5 of 8: block columns < 6 (30 columns) held, each from its diagonal
        # block down (whose strict upper triangle is scratch)
        low, at = ref.to_global(), 0
        assert held[1].size == sum((40 - s) * 5 for s in range(0, 30, 5))
        for s in range(0, 30, 5):
            got = held[1][at:at + (40 - s) * 5].reshape((40 - s, 5), order="F")
            assert np.array_equal(np.tril(got), np.tril(low[s:, s:s + 5]))
            at += got.size
    finally:
        ckpt.finalize()


def test_wrong_row_corrected_and_two_in_one_column_recomputed(grid):
    a = _spd(48, seed=4)
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    linalg.pdpotrf("L", 48, ref, 0, 0)
    # after panel 1 the local trailing piece starts at (16, 16): a wrong row in block (3, 3) = rows 24..31
    row = [BitFlip(target="C", step=1, index=(10, c), bit=61) for c in (8, 9, 12)]
    A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    plan = InjectionPlan(row, seed=1)
    rep = linalg.ft_pdpotrf("L", 48, A, 0, 0, inject=plan, inject_panel=1)
    assert len(plan.records) == 3 and rep.detected == rep.corrected == 1
    assert rep.events[0].action == "located" and rep.events[0].row_block == 3
    assert np.max(np.abs(A.to_global() - ref.to_global())) <= 1e-13 * np.max(np.abs(a))
    # two wrong elements in one column of diagonal block (3, 3) cannot be located: the block column is
    # recomputed (the plain updates again, so the factor is pdpotrf's bit for bit)
    col = [BitFlip(target="C", step=1, index=(i, 8), bit=61) for i in (9, 12)]
    A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    plan = InjectionPlan(col, seed=1)
    rep = linalg.ft_pdpotrf("L", 48, A, 0, 0, inject=plan, inject_panel=1)
    assert len(plan.records) == 2 and rep.detected == rep.corrected == 1 and rep.uncorrected == 0
    ev = rep.events[0]
    assert ev.action == "recomputed" and (ev.row_block, ev.col_block) == (3, 3)
    assert np.array_equal(A.to_global(), ref.to_global())


def test_uncorrectable_error_raises_and_leaves_a_unchanged(grid, monkeypatch):
    """Two wrong elements in one column (recomputed) whose recomputation reads a wrong value of A as well:
    the block column still disagrees, ft_pdpotrf raises ABFTError and A is bit for bit what it was, both
    triangles (aligned lower layout: factored in A itself and put back from its saved lower part; upper: a
    copy)."""
    from ftkit.errors import ABFTError

    real = CholeskyWork.original

    def wrong_a(self):  # the recomputation's A with two values of one column changed (not A's own)
        got = np.array(real(self))
        got[[27, 30], 24] += 1e-3
        return got

    monkeypatch.setattr(CholeskyWork, "original", wrong_a)
    a = _spd(48, seed=4)
    for uplo in ("L", "U"):
        A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
        before = A.to_global()
        col = [BitFlip(target="C", step=1, index=(i, 8), bit=61) for i in (9, 12)]
        with pytest.raises(ABFTError) as e:
            linalg.ft_pdpotrf(uplo, 48, A, 0, 0, inject=InjectionPlan(col, seed=1), inject_panel=1)
        assert e.value.report.uncorrected >= 1
        assert np.array_equal(A.to_global(), before)


@pytest.mark.parametrize("row, action", [(16, "located"), (11, "recomputed")])
def test_huge_wrong_value_whose_solution_overflows_is_corrected(grid, row, action):
    """A flip that makes a value of a block column ~1e307 where ``L_kk`` is ~0.1: the panel's solution
    overflows, so the solve check's bound is not finite there; the segment is then verified in the panel's
    values (finite), where the value is located or, when the huge residual hides its row, the block column
    recomputed. Either way the factor is pdpotrf's (bit for bit for the recomputation)."""
    n = 32
    r = np.random.default_rng(4).standard_normal((n, n))
    d = np.where(np.arange(n) // 8 == 1, 0.1, 30.0)  # block row 1 small: L_11 ~ 0.1
    a = d[:, None] * (r @ r.T / n + np.eye(n)) * d[None, :]
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    linalg.pdpotrf("L", n, ref, 0, 0)
    # after panel 0 the trailing piece starts at (8, 8): (row, 1) is global (8 + row, 9), a value in
    # [0.25, 1) of block column 1 that bit 62 makes ~4.5e307 or more
    A = linalg.DistributedMatrix.from_global(grid, a, mb=8, nb=8)
    plan = InjectionPlan([BitFlip(target="C", step=1, index=(row, 1), bit=62)], seed=1)
    rep = linalg.ft_pdpotrf("L", n, A, 0, 0, inject=plan, inject_panel=0)
    assert len(plan.records) == 1 and abs(plan.records[0].after) > 1e307
    assert [(ev.col_block, ev.action) for ev in rep.events] == [(1, action)]
    assert rep.detected == rep.corrected == 1 and rep.uncorrected == 0
    diff = np.max(np.abs(A.to_global() - ref.to_global()))
    assert diff == 0.0 if action == "recomputed" else diff <= 1e-13 * np.max(np.abs(a))


@pytest.mark.parametrize("where", ["element", "row"])
def test_wrong_panel_solve_found_and_solved_again(grid, monkeypatch, where):
    """A silent error in a panel's triangular solve (its result changed after BLAS returned) is found by the
    panel's checksums, the panel is solved again from its unchanged values: the factor is pdpotrf's bit for
    bit."""
    from ftkit.linalg.cholesky import _steps

    a = _spd(45, seed=6)
    ref = linalg.DistributedMatrix.from_global(grid, a, mb=6, nb=6)
    linalg.pdpotrf("L", 43, ref, 1, 1)
    real, calls = _steps.trsm_right_lower_t, []

    def faulty(t, w):
        real(t, w)
        calls.append(w.shape)
        if len(calls) == 3:  # panel 2: P is (rows below, 6); corrupt its row 4
            if where == "element":
                w[4, 2] = -w[4, 2] * 1e3 if w[4, 2] else 1.0
            else:
                w[4, :] *= 1.5

    monkeypatch.setattr(_steps, "trsm_right_lower_t", faulty)
    A = linalg.DistributedMatrix.from_global(grid, a, mb=6, nb=6)
    rep = linalg.ft_pdpotrf("L", 43, A, 1, 1, bs=4)
    assert len(calls) >= 3
    ev = [e for e in rep.events if (e.row_block, e.col_block) == (-1, -1)]
    assert [e.action for e in ev] == ["recomputed"], rep.events
    assert rep.detected == rep.corrected == 1 and rep.uncorrected == 0
    assert np.array_equal(A.to_global(), ref.to_global())


@pytest.mark.mpi
def test_two_flips_in_one_block_column_recomputed_on_2x2():
    """Aligned and redistributed work matrices, L and U, one and two processes recomputing at once."""
    res = run_python(4, PROGRAMS / "ft_potrf_recompute.py", timeout=300).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 8 and "FAIL" not in res.stdout, res.stdout


@pytest.mark.mpi
def test_non_square_grids_checked_and_recomputed():
    """2x3 and 3x2: error-free bit for bit, a flip located, flips in the rows of P a process's columns
    multiply (one sent straight from another process row, one of its own rows) restored and one in its own
    received rows located, two flips in one column recomputed on a process that owns the diagonal block and
    on one that does not (its flag travels with the panel's parts)."""
    res = run_python(6, PROGRAMS / "ft_potrf_grids.py", timeout=300).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 30 and "FAIL" not in res.stdout, res.stdout


@pytest.mark.mpi
def test_square_grid_rows_sent_down_by_diagonal_processes_checked():
    """2x2: only the diagonal processes send rows of P down their process columns (with their sums and the
    flags' maximum beside): error-free bit for bit, flips in what they send (restored before any product on
    both processes of the column, the sender's own left operand included: no block event) and in what the
    others receive or hold, two flips in one column recomputed."""
    res = run_python(4, PROGRAMS / "ft_potrf_grids.py", timeout=300).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 18 and "FAIL" not in res.stdout, res.stdout


@pytest.mark.mpi
def test_hard_families_no_false_positive_on_2x2():
    """Tiny, huge, graded, Hilbert and cancelling SPD matrices: nothing flagged, pdpotrf's factor bit for
    bit (rigorous and statistical thresholds, offsets, aligned and redistributed layouts)."""
    res = run_python(4, PROGRAMS / "ft_potrf_families.py", timeout=300).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 18 and "FAIL" not in res.stdout, res.stdout


@pytest.mark.parametrize("m, w, bs", [(0, 4, 4), (7, 5, 4), (37, 16, 5), (300, 24, 64), (256, 32, 128),
                                      (130, 7, 3)])
def test_panel_pass_sums_match_the_receivers_order(m, w, bs):
    """The sender's one-pass kernel: the rows copied, row and column sums equal bit for bit to the receivers'
    :func:`row_sums` / :func:`col_sums` of those rows (a transit check compares them for equality), sums of
    squares and segment sums as numpy's (up to rounding), with and without the copy (the copy's fused pass:
    tiles of eight rows in one segment, segments ending inside a tile, a tail of fewer than eight rows)."""
    from ftkit.linalg.cholesky._kernels import col_sums, panel_pass, row_sums

    rng = np.random.default_rng(m + w)
    pt = np.asfortranarray(rng.standard_normal((w, m)) * 10.0 ** rng.integers(-8, 8, (w, m)))
    bounds = np.unique(np.r_[np.arange(0, m, bs), m]).astype(np.int64)
    spans = list(zip(bounds[:-1], bounds[1:], strict=True))
    wts = np.concatenate([np.arange(1.0, b - a + 1) for a, b in spans] or [[]])
    for copy in (True, False):
        rows = np.empty((m, w), order="F") if copy else np.array(pt.T, order="F")
        segs = np.empty((2 * (len(bounds) - 1), w), order="F")
        rs, sq, cs, want_rs, want_cs = np.empty(m), np.empty(m), np.empty(w), np.empty(m), np.empty(w)
        panel_pass(pt if copy else rows.T, bounds, wts, rows, segs, rs, sq, cs)
        row_sums(rows, want_rs)
        col_sums(rows, want_cs)
        assert np.array_equal(rows, pt.T) and np.array_equal(rs, want_rs) and np.array_equal(cs, want_cs)
        scale = np.abs(pt).sum() if m else 0.0
        np.testing.assert_allclose(sq, (pt.T ** 2).sum(axis=1), rtol=1e-12)
        for s, (a, b) in enumerate(spans):
            np.testing.assert_allclose(segs[2 * s], pt.T[a:b].sum(axis=0), rtol=0, atol=1e-12 * scale)
            np.testing.assert_allclose(segs[2 * s + 1], wts[a:b] @ pt.T[a:b], rtol=0, atol=1e-10 * scale)


@pytest.mark.parametrize("whole", [False, True])
def test_trailing_rows_read_where_they_arrived_carried_and_repaired(whole):
    """The carry over rows left where they arrived (two pieces, block columns interleaved between them): the
    same checksums as one product with the rows stacked; a value changed in transit stops the carry at its
    block column, before anything is carried for it, and is restored from its row sum in the piece itself
    (its column located by the piece's sent column sums); with ``whole`` (the piece is this process's own
    rows, every product's left operand) a change outside the block column's rows is restored too."""
    from ftkit.linalg import _blas
    from ftkit.linalg.cholesky._kernels import carry_blocks, col_sums, row_sums
    from ftkit.linalg.cholesky._trailing import TrailingRows

    if _blas._dgemm is None:
        pytest.skip("no CBLAS: the numpy carry is tested by test_without_cblas.py")
    rng = np.random.default_rng(3)
    w, nb = 6, 4
    pieces = [np.asfortranarray(rng.standard_normal((3 * nb, w))) for _ in range(2)]
    sums = [np.empty(3 * nb) for _ in pieces]
    cols = [np.empty(w) for _ in pieces]
    for pc, rs, cs in zip(pieces, sums, cols, strict=True):
        row_sums(pc, rs)
        col_sums(pc, cs)
    # block columns 0..3: piece 1's rows 4:8, piece 0's 0:4, piece 1's 8:12, piece 0's 8:12
    table = np.array([[1, 4, nb], [0, 0, nb], [1, 8, nb], [0, 8, nb]], np.int64)
    firsts, nseg = np.array([0, 1, 1, 2], np.int64), 3
    seg_sums = np.asfortranarray(rng.standard_normal((2 * nseg, w)))
    idx = (np.arange(3 * nb) * 2, np.arange(3 * nb) * 2 + 1)
    rows = TrailingRows(tuple(pieces), tuple(sums), tuple(cols), idx, table, [1, 3, 5, 7],
                        whole=0 if whole else -1)
    stacked = rows.stacked()
    want = np.zeros((4 * nb, 2 * nseg), order="F")
    for j in range(4):
        want[j * nb:(j + 1) * nb, 2 * firsts[j]:] -= stacked[j * nb:(j + 1) * nb] @ seg_sums[2 * firsts[j]:].T
    flat = tuple(pc.reshape(-1, order="F") for pc in pieces)
    lds = np.array([pc.shape[0] for pc in pieces], np.int64)

    def carry(chk: np.ndarray, j0: int = 0, trusted: int = -1) -> int:
        return carry_blocks(_blas._dgemm, flat, lds, tuple(sums), table, seg_sums, chk, 0, firsts, 0, j0,
                            trusted)

    chk = np.zeros_like(want, order="F")
    assert carry(chk) == -1
    np.testing.assert_allclose(chk, want, rtol=1e-14, atol=1e-14)
    assert {j: b.shape for j, b in rows.operand().items()} == {p: (nb, w) for p in (1, 3, 5, 7)}

    clean = [pc.copy() for pc in pieces]
    pieces[0][1, 2] += 50.0  # block column 1's rows (piece 0, rows 0:4)
    pieces[0][5, 2] += 100.0  # piece 0's rows that no block column multiplies (a left operand only)
    pieces[1][9, 4] -= 70.0  # block column 2's rows (piece 1, rows 8:12)
    chk = np.zeros_like(want, order="F")
    assert carry(chk) == 1 and not chk[nb:].any()  # stopped before anything is carried from it on
    assert [(r, t) for r, t, ok in rows.repair(1) if ok] == ([(2, 2), (10, 2)] if whole else [(2, 2)])
    assert carry(chk, 1, 1) == 2
    assert [(r, t) for r, t, ok in rows.repair(2) if ok] == [(19, 4)]
    assert carry(chk, 2, 2) == -1
    np.testing.assert_allclose(chk, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pieces[1], clean[1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.delete(pieces[0], 5, axis=0), np.delete(clean[0], 5, axis=0), atol=1e-12)
    assert (abs(pieces[0][5, 2] - clean[0][5, 2]) < 1e-12) == whole


@pytest.mark.mpi
def test_fused_update_is_the_unfused_one_bit_for_bit():
    """2x2 and 2x3: the fused update (per block column its rows checked, its GEMM, its carry) taken, its
    factor and carried checksums bit for bit the unfused path's (error-free: PDPOTRF's factor); a flip in
    received rows and one in a process's own rows restored before any product reads them, as unfused."""
    res = run_python(6, PROGRAMS / "ft_potrf_fused.py", timeout=300).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 6 and "FAIL" not in res.stdout, res.stdout
