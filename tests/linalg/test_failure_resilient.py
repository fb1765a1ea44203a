"""resilient_pdgemm under real process failures (mpirun --with-ft ulfm): kills from inside and from outside at
the first, a middle and the last SUMMA step on 2x2 and 3x3 grids, two kills, lost inputs, a slow process."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from ftkit import inject

from ..conftest import run_python, wait_for_int

PROGRAM = Path(__file__).parents[1] / "programs" / "linalg_failure_summa.py"
JOB_TIMEOUT = 150  # s, hard limit per job (9 ranks on 2 shared cores are slow)
# grid -> (ranks, program args, number of SUMMA steps); tiny matrices, one block per step
GRIDS = {
    "2x2": (4, ["--grid", "2x2", "--n", "48", "--nb", "8"], 6),
    "3x3": (9, ["--grid", "3x3", "--n", "36", "--nb", "4"], 9),
    "2x3": (6, ["--grid", "2x3", "--n", "48", "--nb", "8"], 6),
}

pytestmark = pytest.mark.mpi


def _run(tmp_path: Path, grid: str, *args: str, killer: threading.Thread | None = None):
    nprocs, gargs, _ = GRIDS[grid]
    if killer is not None:
        killer.start()
    r = run_python(nprocs, PROGRAM, *gargs, "--dir", str(tmp_path), *args, timeout=JOB_TIMEOUT)
    if killer is not None:
        killer.join(10)
    assert not r.timed_out, f"job hung\n{r.stdout}\n{r.stderr}"
    return r


def _check_survived(r, nprocs: int, dead: list[int]) -> None:
    out = r.stdout + r.stderr
    assert re.search(rf"CHECK maxerr=\S+ ok=True survivors={nprocs - len(dead)}", r.stdout), out
    states = dict(re.findall(r"STATE rank=(\d+) (.*)", r.stdout))
    survivors = [q for q in range(nprocs) if q not in dead]
    assert sorted(int(k) for k in states) == survivors, out
    table = [0 if q in dead else 1 for q in range(nprocs)]
    for line in states.values():  # every survivor's state table marks exactly the dead ranks
        assert f"failed={dead} table={table}" in line, line
    # the dead rank's blocks were recomputed by several survivors, not one
    reassigned = re.search(r"reassigned=(\{.*\})", next(iter(states.values()))).group(1)
    for d in dead:
        assert re.search(rf"{d}: \{{(\d+: \d+, )+\d+: \d+\}}", reassigned), reassigned


def _left_in(store: Path) -> list[str]:
    """The files left in ``store``."""
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())


def _killer(tmp_path: Path) -> threading.Thread:
    def run() -> None:
        victim = wait_for_int(tmp_path / "ready", JOB_TIMEOUT)
        if victim is not None:
            inject.kill_pid(int((tmp_path / f"pid.{victim}").read_text()))

    return threading.Thread(target=run, daemon=True)


def _step(grid: str, when: str) -> int:
    steps = GRIDS[grid][2]
    return {"first": 0, "middle": steps // 2, "last": steps - 1}[when]


@pytest.mark.parametrize("grid,victim", [("2x2", 1), ("3x3", 4)])
@pytest.mark.parametrize("when", ["first", "middle", "last"])
def test_kill_from_inside(tmp_path, grid, victim, when):
    r = _run(tmp_path, grid, "--kill-rank", str(victim), "--kill-step", str(_step(grid, when)))
    _check_survived(r, GRIDS[grid][0], [victim])


@pytest.mark.parametrize("grid,victim", [("2x2", 2), ("3x3", 7)])
@pytest.mark.parametrize("when", ["first", "middle", "last"])
def test_kill_from_outside_by_pid(tmp_path, grid, victim, when):
    r = _run(
        tmp_path,
        grid,
        "--wait-rank",
        str(victim),
        "--wait-step",
        str(_step(grid, when)),
        killer=_killer(tmp_path),
    )
    _check_survived(r, GRIDS[grid][0], [victim])


@pytest.mark.parametrize("grid,kills", [("2x2", [(0, 1), (3, 4)]), ("3x3", [(2, 2), (6, 6)])])
def test_two_ranks_killed_in_different_steps(tmp_path, grid, kills):
    args = [x for rank, step in kills for x in ("--kill-rank", str(rank), "--kill-step", str(step))]
    r = _run(tmp_path, grid, *args)
    _check_survived(r, GRIDS[grid][0], sorted(rank for rank, _ in kills))


def test_lost_inputs_give_the_same_clear_process_failure_everywhere(tmp_path):
    r = _run(
        tmp_path,
        "2x2",
        "--kill-rank",
        "1",
        "--kill-step",
        "0",
        "--kill-rank",
        "2",
        "--kill-step",
        "3",
        "--lose-inputs",
    )
    lines = re.findall(r"PROCESSFAILURE rank=(\d+) failed_ranks=\[1, 2\] msg=(.*)", r.stdout)
    assert sorted(int(rank) for rank, _ in lines) == [0, 3], r.stdout + r.stderr
    assert all("cannot be read back" in msg for _, msg in lines)
    assert "CHECK" not in r.stdout
    assert _left_in(tmp_path / "store") == [], "a call that failed everywhere left its files"


def test_slow_process_is_fenced_off_and_the_product_is_still_right(tmp_path):
    r = _run(
        tmp_path,
        "2x2",
        "--trans",
        "TN",
        "--slow-rank",
        "2",
        "--slow-step",
        "3",
        "--sleep",
        "6",
        "--timeout",
        "1.5",
    )
    assert "FENCED rank=2 failed_ranks=[2]" in r.stdout, r.stdout + r.stderr
    _check_survived(r, 4, [2])


def test_without_failures_the_result_is_pdgemm_bit_for_bit(tmp_path):
    r = _run(tmp_path, "2x2", "--trans", "NT", "--compare-pdgemm")
    assert sorted(re.findall(r"BITWISE rank=(\d+) same=True", r.stdout)) == ["0", "1", "2", "3"], r.stdout
    _check_survived(r, 4, [])
    assert not list((tmp_path / "store").glob("*/*")), "the call's stored inputs were not cleaned up"


def test_survivors_continue_on_the_new_grid_and_the_state_table_persists(tmp_path):
    r = _run(tmp_path, "2x2", "--kill-rank", "3", "--kill-step", "2", "--continue-after")
    _check_survived(r, 4, [3])
    out = r.stdout + r.stderr
    # every survivor's persisted table (written atomically by one rank) marks exactly rank 3
    assert sorted(re.findall(r"STATEFILE rank=(\d+) alive=\[1, 1, 1, 0\]", r.stdout)) == ["0", "1", "2"], out
    # a call on the old grid fails at once from the state table, without waiting for any timeout
    second = re.findall(r"SECOND rank=(\d+) ProcessFailure failed_ranks=\[3\] after=([\d.]+)s", r.stdout)
    assert sorted(rank for rank, _ in second) == ["0", "1", "2"], out
    assert all(float(t) < 5 for _, t in second), out
    # the survivors' grid (1x3 on the repaired communicator) computes the next product correctly
    assert "CONTINUE ok=True failed=[] grid=1x3" in r.stdout, out


@pytest.mark.parametrize("when", ["first", "middle", "last"])
def test_cannon_kill_from_inside_3x3(tmp_path, when):
    step = {"first": 0, "middle": 1, "last": 2}[when]  # Cannon on 3x3 has 3 steps
    r = _run(tmp_path, "3x3", "--algorithm", "cannon", "--kill-rank", "5", "--kill-step", str(step))
    _check_survived(r, 9, [5])


def test_cannon_kill_from_outside_2x2(tmp_path):
    r = _run(tmp_path, "2x2", "--algorithm", "cannon", "--wait-rank", "3", "--wait-step", "1",
             killer=_killer(tmp_path))
    _check_survived(r, 4, [3])


def test_cannon_two_ranks_killed_in_different_steps(tmp_path):
    r = _run(tmp_path, "3x3", "--algorithm", "cannon", "--kill-rank", "2", "--kill-step", "0", "--kill-rank",
             "7", "--kill-step", "2")
    _check_survived(r, 9, [2, 7])


def test_ft_pdgemm_with_protect_inputs_takes_the_failure_tolerant_path(tmp_path):
    r = _run(tmp_path, "2x2", "--via-ft", "--compare-pdgemm")
    assert sorted(re.findall(r"FTREPORT rank=(\d+) failed=\[\] result=ResilientResult", r.stdout)) == [
        "0", "1", "2", "3"], r.stdout + r.stderr
    assert sorted(re.findall(r"BITWISE rank=(\d+) same=True", r.stdout)) == ["0", "1", "2", "3"], r.stdout
    _check_survived(r, 4, [])


def test_protected_operands_reused_without_failures_match_pdgemm_bit_for_bit(tmp_path):
    r = _run(tmp_path, "2x2", "--protect-first", "--calls", "2", "--compare-pdgemm")
    assert sorted(re.findall(r"BITWISE rank=(\d+) same=True", r.stdout)) == ["0", "1", "2", "3"], r.stdout
    _check_survived(r, 4, [])
    # before the second call the store holds just the protected operands and the first call's C copy, kept
    # under the handle for the second call to rewrite in place (no call's directory is left)
    protected = sorted([f"'{w}.{q}.ftk'" for w in "ab" for q in range(4)]
                       + [f"'spare-c.{q}.ftk'" for q in range(4)])
    files = re.findall(r"STOREFILES rank=\d+ before_last_call=\[(.*)\]", r.stdout)
    assert files and all(sorted(f.split(", ")) == protected for f in files), r.stdout
    assert not list((tmp_path / "store").glob("*/*")), "the protected operands were not released"


@pytest.mark.parametrize("grid,victim,beta", [("2x2", 1, "0"), ("3x3", 4, "0.5")])
def test_protected_operands_kill_mid_multiply(tmp_path, grid, victim, beta):
    r = _run(tmp_path, grid, "--protect-first", "--beta", beta, "--kill-rank", str(victim), "--kill-step",
             str(_step(grid, "middle")))
    _check_survived(r, GRIDS[grid][0], [victim])
    names = sorted(p.name.split(".")[0] for p in (tmp_path / "store").rglob("*.ftk"))
    if beta == "0":  # C was not needed: the multiply itself wrote nothing
        assert set(names) == {"a", "b"}, names


@pytest.mark.parametrize("stage", ["repair", "redistribute", "settle_agree"])
def test_a_kill_in_the_end_game_gives_the_same_process_failure_everywhere(tmp_path, stage):
    # Rank 1 dies in the first step; rank 2 is then killed from outside at a named stage of the end game:
    # between the agreement on the dead and Shrink (the repaired communicator was one rank short and the
    # product came back without rank 2's blocks), before the result moves, before the final agreement.
    r = _run(tmp_path, "2x2", "--kill-rank", "1", "--kill-step", "0", "--hook-rank", "2", "--hook-stage",
             stage, killer=_killer(tmp_path))
    out = r.stdout + r.stderr
    lines = re.findall(r"PROCESSFAILURE rank=(\d+) failed_ranks=(\[.*?\])", r.stdout)
    assert sorted(int(rank) for rank, _ in lines) == [0, 3], out
    assert {names for _, names in lines} == {"[1, 2]"}, out
    assert "STATE" not in r.stdout and "CHECK" not in r.stdout, out
    assert _left_in(tmp_path / "store") == [], "a call that failed everywhere left its files"


@pytest.mark.parametrize("grid,rank", [("2x2", 2), ("3x3", 4)])
def test_an_error_of_a_rank_s_own_mid_multiply_leaves_nobody_waiting(tmp_path, grid, rank):
    # The rank raises (not a failure) and its application keeps running: the others must not wait for it
    # (in an agreement it never joins). They finish with the exact product while it is still alive, and it
    # gets its own error back.
    step = _step(grid, "middle")
    r = _run(tmp_path, grid, "--error-rank", str(rank), "--error-step", str(step))
    _check_survived(r, GRIDS[grid][0], [rank])
    own = re.findall(rf"OWNERROR rank={rank} RuntimeError: (.*); survivors_done_meanwhile=(\w+)", r.stdout)
    assert own == [(f"an error of rank {rank}'s own at step {step}", "True")], r.stdout + r.stderr


@pytest.mark.parametrize("mode", [[], ["--protect-first"]])
def test_a_full_store_gives_the_same_storage_error_everywhere(tmp_path, small_disk, mode):
    # A real tmpfs that holds a few pieces: some ranks save, the others get ENOSPC. Every rank must raise
    # the same StorageError naming the cause (none may wait for the ranks that failed, none may go on).
    store = small_disk(48 * 1024)
    r = _run(tmp_path, "2x2", "--store", str(store), *mode)
    out = r.stdout + r.stderr
    lines = re.findall(r"STORAGEERROR rank=(\d+) errno=\S+ msg=(.*)", r.stdout)
    assert sorted(int(rank) for rank, _ in lines) == [0, 1, 2, 3], out
    assert len({msg for _, msg in lines}) == 1, out
    assert all("[Errno 28] No space left on device" in msg for _, msg in lines), out
    assert "STATE" not in r.stdout, out
    assert _left_in(store) == [], "a call (or protection) that failed everywhere left its files"


def test_an_error_of_a_survivor_s_own_while_recomputing_leaves_nobody_waiting(tmp_path):
    # Rank 1 dies; survivor 2 raises while recomputing its tiles of rank 1's C. It raises its error, the
    # others the same ABFTError (its blocks were not verified), and nobody waits in the final agreement.
    r = _run(tmp_path, "2x2", "--kill-rank", "1", "--kill-step", "0", "--hook-rank", "2", "--hook-stage",
             "recompute", "--hook-error")
    out = r.stdout + r.stderr
    assert "OWNERROR rank=2 RuntimeError: an error of rank 2's own at stage recompute" in r.stdout, out
    lines = re.findall(r"ABFTERROR rank=(\d+) msg=(.*)", r.stdout)
    assert sorted(int(rank) for rank, _ in lines) == [0, 3] and len({m for _, m in lines}) == 1, out
    assert "STATE" not in r.stdout, out


@pytest.mark.parametrize("side,uplo,victim,when", [("L", "U", 4, "middle"), ("R", "L", 0, "first")])
def test_resilient_pdsymm_survives_a_kill_on_a_nonsquare_grid(tmp_path, side, uplo, victim, when):
    # Issue 33: resilient_pdsymm runs the same scheme through resilient_call (its ProductForm builds the
    # symmetric matrix from the uplo triangle first). The other triangle of A is random, not symmetric: a
    # result that read it would not match.
    r = _run(tmp_path, "2x3", "--routine", "symm", "--side", side, "--uplo", uplo, "--kill-rank", str(victim),
             "--kill-step", str(_step("2x3", when)))
    _check_survived(r, 6, [victim])


def test_resilient_pdsymm_without_failures_is_the_symmetric_product(tmp_path):
    r = _run(tmp_path, "2x3", "--routine", "symm", "--side", "R", "--uplo", "U")
    _check_survived(r, 6, [])
