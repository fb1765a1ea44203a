"""resilient_pdtrsm, resilient_pdtrmm, resilient_pdsyrk, resilient_pdsyr2k, resilient_pdgeadd,
resilient_pdtradd and resilient_pdtran (issue 33) with a rank SIGKILLed from outside at a random moment of the
multiply on non-square grids: the survivors return numpy's result (the additions bit for bit: rounded as
pdgeadd rounds), and the part of C a routine does not touch is bit for bit the input; the multiplying ones
also with their operands protected before the call (protect_pdtrsm, protect_pdtrmm, protect_pdsyrk,
protect_pdsyr2k, protect_pdsymm). Without failures, resilient_pdsyrk and resilient_pdsyr2k pass the plain
routines' conformance cases (every flag, float64 and float32, offsets, alpha or k zero, the hard families) on
every grid of the issue, and resilient_pdsyrk's result is pdsyrk's bit for bit (the same tiles of the
triangle, multiplied the same way)."""

from __future__ import annotations

import random
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from ftkit import inject

from ..conftest import run_python

PROGRAM = Path(__file__).parents[1] / "programs" / "linalg_kill_trial.py"
CONFORMANCE = Path(__file__).parent / "programs" / "resilient_rank_conformance.py"
JOB_TIMEOUT = 150  # s, hard limit per job
N, NB, STEP_PAUSE = 48, 6, 0.05  # 8 SUMMA steps of 0.05 s each: a window of ~0.4 s for the kill

pytestmark = pytest.mark.mpi


def _killer(tmp_path: Path, victim: int, delay: float, over: threading.Event) -> threading.Thread:
    """SIGKILL ``victim`` ``delay`` s after the job's first step began (``started``), unless the job ended."""

    def run() -> None:
        while not over.is_set() and not (tmp_path / "started").exists():
            over.wait(0.01)
        if not over.wait(delay):
            inject.kill_pid(int((tmp_path / f"pid.{victim}").read_text()))

    return threading.Thread(target=run, daemon=True)


def _run(tmp_path: Path, grid: str, routine: str, flags: str, victim: int | None, delay: float = 0.0,
         hold: str | None = None, mode: str = "store", calls_before: int = 0):
    p, q = (int(x) for x in grid.split("x"))
    over = threading.Event()
    killer = _killer(tmp_path, victim, delay, over) if victim is not None else None
    if killer is not None:
        killer.start()
    try:
        r = run_python(p * q, PROGRAM, "--grid", grid, "--n", str(N), "--nb", str(NB), "--routine", routine,
                       "--trans", flags, "--beta", "0.5", "--mode", mode, "--step-pause", str(STEP_PAUSE),
                       "--dir", str(tmp_path), "--calls-before", str(calls_before),
                       *(["--hold-rank", str(victim), "--hold-at", hold] if hold else ["--start-at-step"]),
                       timeout=JOB_TIMEOUT)  # fmt: skip
    finally:
        over.set()
        if killer is not None:
            killer.join(10)
    assert not r.timed_out, f"job hung\n{r.stdout}\n{r.stderr}"
    return r, p * q


def _check(tmp_path: Path, r, nprocs: int, dead: list[int]) -> None:
    """Every survivor returned with ``dead`` failed; their pieces cover C once and equal numpy's result; the
    call left none of its files in the store (only the survivors' pieces of the protected operands, whose
    handle the program keeps: the dead's pieces are removed with the call's files)."""
    out = r.stdout + r.stderr
    left = [p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store").glob("*")]
    assert all(name.startswith("operands-") for name in left), f"the call left {left} in the store\n{out}"
    pieces = [p.name for p in (tmp_path / "store").glob("operands-*/*")]
    dead_pieces = [name for name in pieces if int(name.split(".")[1]) in dead]
    assert not dead_pieces, f"the dead ranks' protected pieces {dead_pieces} stayed in the store\n{out}"
    done = dict(re.findall(r"DONE rank=(\d+) failed=(\[.*?\])", r.stdout))
    assert sorted(int(k) for k in done) == [x for x in range(nprocs) if x not in dead], out
    assert set(done.values()) == {str(dead)}, out
    with np.load(tmp_path / "ref.npz", allow_pickle=False) as f:
        ref, fixed, exact = f["ref"], f["fixed"], bool(f["exact"])
    with np.load(tmp_path / "inputs.npz", allow_pickle=False) as f:
        c_in = f["c"]
    got, count = np.zeros_like(ref), np.zeros(ref.shape, dtype=np.int64)
    for rank in done:
        with np.load(tmp_path / f"out.{rank}.npz", allow_pickle=False) as f:
            ix = np.ix_(f["rows"], f["cols"])
            got[ix] = f["c"]
            count[ix] += 1
    assert (count == 1).all(), out
    assert np.abs(got - ref).max() <= 1e-12 * N * max(1.0, float(np.abs(ref).max())), out
    if exact:
        assert np.array_equal(got, ref), f"{np.count_nonzero(got != ref)} entries not bit for bit\n{out}"
    assert np.array_equal(got[fixed], c_in[fixed]), "the triangle not updated changed"


# (routine, flags, grid); the victim and the moment of the kill are drawn per case from a fixed seed
CASES = [
    ("trmm", "LUNN", "2x3"), ("trmm", "RLTU", "3x2"), ("trmm", "LLTU", "1x4"),
    ("syrk", "LN", "2x3"), ("syrk", "UT", "3x2"),
    ("syr2k", "UN", "2x3"), ("syr2k", "LT", "3x2"),
    ("trsm", "LUNN", "2x3"), ("trsm", "RLTU", "3x2"), ("trsm", "LLTN", "1x4"), ("trsm", "RUNU", "4x1"),
    ("geadd", "N", "2x3"), ("geadd", "T", "3x2"),
    ("tradd", "UT", "2x3"), ("tradd", "LN", "3x2"),
    ("tran", "-", "2x3"), ("tran", "-", "1x4"),
]


@pytest.mark.parametrize("routine,flags,grid", CASES)
def test_a_rank_killed_at_a_random_moment_of_the_multiply_is_survived(tmp_path, routine, flags, grid):
    p, q = (int(x) for x in grid.split("x"))
    rng = random.Random(f"{routine}{flags}{grid}")
    victim, delay = rng.randrange(p * q), rng.uniform(0.0, 6 * STEP_PAUSE)
    r, nprocs = _run(tmp_path, grid, routine, flags, victim, delay)
    _check(tmp_path, r, nprocs, [victim])


# (routine, flags, grid) with the operands protected before the call (protect_pdtrsm, ...)
PROTECTED = [
    ("trsm", "LUNN", "2x3"), ("trsm", "RLTU", "3x2"), ("trmm", "RUTN", "2x3"), ("trmm", "LLNU", "3x2"),
    ("syrk", "LT", "2x3"), ("syrk", "UN", "3x2"), ("syr2k", "UT", "3x2"), ("syr2k", "LN", "2x3"),
    ("symm", "LU", "2x3"), ("symm", "RL", "3x2"),
]


@pytest.mark.parametrize("routine,flags,grid", PROTECTED)
def test_with_protected_operands_a_rank_killed_mid_call_is_survived(tmp_path, routine, flags, grid):
    # the kill comes 0-0.15 s after the first step began: the steps take 8 x 0.05 s at least (16 for SYR2K),
    # so it lands inside the call, after the protection
    p, q = (int(x) for x in grid.split("x"))
    rng = random.Random(f"protected{routine}{flags}{grid}")
    victim, delay = rng.randrange(p * q), rng.uniform(0.0, 3 * STEP_PAUSE)
    r, nprocs = _run(tmp_path, grid, routine, flags, victim, delay, mode="protect")
    _check(tmp_path, r, nprocs, [victim])


@pytest.mark.parametrize("routine,flags,grid", [("trmm", "LUNN", "2x3"), ("trmm", "RLTN", "3x2"),
                                                ("syrk", "LN", "2x3")])
def test_a_rank_killed_in_a_call_rewriting_the_kept_inputs_is_survived(tmp_path, routine, flags, grid):
    # two error-free calls on the handle first: the killed call (and the victim) rewrites in place the input
    # files the previous call kept (B for TRMM, C for SYRK with beta != 0), and the survivors read them back
    p, q = (int(x) for x in grid.split("x"))
    rng = random.Random(f"kept{routine}{flags}{grid}")
    victim, delay = rng.randrange(p * q), rng.uniform(0.0, 3 * STEP_PAUSE)
    r, nprocs = _run(tmp_path, grid, routine, flags, victim, delay, mode="protect", calls_before=2)
    _check(tmp_path, r, nprocs, [victim])


def test_a_dead_rank_s_blocks_outside_the_triangle_are_not_recomputed(tmp_path):
    # rank 2 is process (0, 2) of the 2x3 grid: row blocks 0, 2, 4, 6 and column blocks 2, 5 of the 48 x 48 C
    # (6 x 6 blocks). Its piece is dealt to the 5 survivors in bands of one block row; 4 of its 8 blocks hold
    # entries of the lower triangle, and the bands' boxes of blocks holding them are exactly those 4: the
    # survivors recompute and verify them, not the 4 blocks wholly above the diagonal (kept as stored)
    r, nprocs = _run(tmp_path, "2x3", "syrk", "LN", 2, 2 * STEP_PAUSE)
    _check(tmp_path, r, nprocs, [2])
    verified = [int(v) for v in re.findall(r"DONE rank=\d+ failed=\[2\] verified=(\d+)", r.stdout)]
    assert len(verified) == 5 and sum(verified) == 4, r.stdout


@pytest.mark.parametrize("routine,flags", [
    ("trmm", "RUNN"), ("syrk", "UN"), ("syr2k", "LN"), ("trsm", "LLNN"), ("geadd", "T"), ("tradd", "LT"),
    ("tran", "-"),
])
def test_without_failures_the_result_is_numpy_s(tmp_path, routine, flags):
    r, nprocs = _run(tmp_path, "2x3", routine, flags, None)
    _check(tmp_path, r, nprocs, [])



@pytest.mark.parametrize("grid,victim", [("2x3", 3), ("3x2", 1)])
def test_a_rank_killed_in_trsm_s_prepare_fails_the_call_alike_and_nobody_hangs(tmp_path, grid, victim):
    # resilient_pdtrsm's prepare (the triangle's inverse) broadcasts on the grid's row and column
    # communicators: a survivor blocked in a row broadcast whose root left with the error hung (a kill
    # campaign found it) until the rank that saw the failure revoked those communicators too
    r, nprocs = _run(tmp_path, grid, "trsm", "RUNU", victim, hold="prepare")
    failures = dict(re.findall(r"PROCESSFAILURE rank=(\d+) failed_ranks=(\[.*?\])", r.stdout))
    assert sorted(int(k) for k in failures) == [x for x in range(nprocs) if x != victim], r.stdout + r.stderr
    assert set(failures.values()) == {str([victim])}, r.stdout


RANK_GRIDS = [(1, 1, 41), (2, 2, 42), (2, 3, 43), (3, 2, 44), (1, 4, 45), (4, 1, 46)]


@pytest.mark.parametrize("nprow,npcol,seed", RANK_GRIDS, ids=[f"{g[0]}x{g[1]}" for g in RANK_GRIDS])
def test_rank_k_updates_conform_and_syrk_is_pdsyrk_bit_for_bit(tmp_path, nprow, npcol, seed):
    repeat = 2
    r = run_python(nprow * npcol, CONFORMANCE, str(nprow), str(npcol), "--seed", str(seed), "--repeat",
                   str(repeat), "--dir", str(tmp_path), timeout=JOB_TIMEOUT * 2).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    # 2 dtypes x 2 routines x 2 UPLO x 3 TRANS per repeat, every other case with protected operands
    assert f"DONE cases={repeat * 24} failures=0 protected={repeat * 12}" in r.stdout, r.stdout + r.stderr
