"""Issue 13: resilient_pdgemm under SIGKILLs from outside at random moments (the short, in-suite campaign),
and defect 1 (a 2x3 grid, transa="T", operands protected once, rank 4 killed in the first steps).

Every trial must end with the exact product on the survivors or the same ProcessFailure on all of them:
never a wrong product, never a hang. The long campaign is ``benchmarks/kill_campaign.py --trials 200``.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

_PATH = Path(__file__).parents[2] / "benchmarks" / "kill_campaign.py"
_spec = importlib.util.spec_from_file_location("kill_campaign", _PATH)
campaign = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("kill_campaign", campaign)
_spec.loader.exec_module(campaign)  # type: ignore[union-attr]

TRIAL_TIMEOUT = 90  # s: a trial still running then is a hang
#: Kill delays (s after the job is about to set up its failure detector): on the grids where a kill during
#: the set-up hung or crashed (3x2, 2x3), within its first 50 ms; elsewhere anywhere in the call.
SETUP_WINDOW, CALL_WINDOW = 0.05, 0.8


@pytest.mark.parametrize("grid", campaign.GRIDS)
def test_random_kill_on_every_grid_ends_exact_or_in_one_process_failure(tmp_path, grid):
    window = SETUP_WINDOW if grid in ("3x2", "2x3") else CALL_WINDOW
    trial = campaign.draw_trial(random.Random(f"ftkit-{grid}"), grid, max_delay=window)
    res = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert res.outcome in ("exact", "failure", "late"), f"{trial}: {res.outcome}: {res.detail}"


def test_kill_while_the_others_set_up_the_failure_detector_gives_one_process_failure(tmp_path):
    # 3x2: rank 4 stops just before the failure detector's set-up and is SIGKILLed from outside while the
    # others are in it (they need its messages, so none can have finished). The set-up once used plain
    # collectives: a raw MPI error on some ranks and a hang on others (or Open MPI crashing in Comm_dup).
    # Now every survivor raises the same ProcessFailure naming rank 4.
    trial = campaign.Trial("3x2", "NN", 0.0, "protect", 4, 0.0, hold="setup")
    res = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert res.outcome == "failure", f"{trial}: {res.outcome}: {res.detail}"
    assert res.detail.startswith("ProcessFailure [4] on [0, 1, 2, 3, 5]"), res.detail
    assert res.phase == "setup"


@pytest.mark.parametrize("beta,expected", [(0.0, "exact"), (0.5, "failure")])
def test_defect1_nonsquare_grid_kill_as_the_multiply_starts(tmp_path, beta, expected):
    # 2x3, transa = "T" (A had to be redistributed), operands protected once; rank 4 stops as the multiply
    # starts and is SIGKILLed from outside while the others begin. Before the fix the multiply redistributed
    # A again (a plain collective): the survivors crashed in its Alltoallv or hung there. Now: beta = 0, the
    # exact product; beta != 0, the multiply must save C first and rank 4 died before it did, so every
    # survivor raises the same ProcessFailure naming it.
    trial = campaign.Trial("2x3", "TN", beta, "protect", 4, 0.0, n=96, nb=8, step_pause=0.0, hold="multiply")
    res = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert res.outcome == expected, f"{trial}: {res.outcome}: {res.detail}"
    assert "[4]" in res.detail, res.detail


@pytest.mark.parametrize("repeat", range(3))
def test_defect1_nonsquare_grid_kill_in_the_first_steps_gives_the_exact_product(tmp_path, repeat):
    # the same with the kill at a random moment of the first few of twelve steps
    delay = random.Random(repeat).uniform(0.0, 0.06)
    trial = campaign.Trial("2x3", "TN", 0.0, "protect", 4, delay, n=96, nb=8, step_pause=0.02,
                           start_at_step=True)  # fmt: skip
    res = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert res.outcome == "exact", f"{trial}: {res.outcome}: {res.detail}"
    assert "failed=[4]" in res.detail, res.detail


@pytest.mark.parametrize("grid,victim", [("2x3", 0), ("3x2", 4)])
def test_kill_in_the_call_s_detector_set_up_is_survived(tmp_path, grid, victim):
    # Issue 33: the grid's first resilient_pdgemm call sets up the failure detector (store mode, nothing
    # built beforehand); the victim stops in the call as it reaches the set-up and is SIGKILLed from outside
    # while the others are in it. The set-up came before the inputs were saved and did not survive a death:
    # every survivor raised "ProcessFailure: ... nothing was computed". Now the victim saved its inputs
    # first, the set-up survives its death (rank 0 too, whose token the others used to take), and the
    # survivors return the exact product, beta != 0 included.
    trial = campaign.Trial(grid, "NN", 0.5, "store", victim, 0.0, hold="setup", setup="in-call")
    res = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert res.outcome == "exact", f"{trial}: {res.outcome}: {res.detail}"
    assert f"failed=[{victim}]" in res.detail, res.detail
    assert res.phase in ("entry", "setup")  # as rank 0 saw it: the victim may reach the set-up before it


@pytest.mark.parametrize("grid", ["2x3", "3x1"])
def test_random_early_kill_in_the_call_ends_exact_or_in_one_process_failure(tmp_path, grid):
    # Issue 33: kills at random moments of the first 0.4 s of the grid's first call (detector set-up
    # included). A kill before the victim saved its inputs ends in the same ProcessFailure everywhere (nothing
    # holds its data); any other ends with the exact product. Never a wrong product, never a hang.
    trial = campaign.draw_trial(random.Random(f"ftkit-early-{grid}"), grid, max_delay=0.4, setup="in-call",
                                modes=("store",))  # fmt: skip
    res = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert res.outcome in ("exact", "failure", "late"), f"{trial}: {res.outcome}: {res.detail}"


def test_kill_phase_is_read_from_rank_0s_marks():
    # the phase table of the campaign report: marks as the trial program writes them (no MPI)
    marks = [("setup", 10.0), ("protect", 10.2), ("step", 10.5), ("step", 10.6), ("step", 10.7),
             ("returned", 11.0)]  # fmt: skip
    phase = campaign.kill_phase
    assert phase(marks, None) == "none"
    assert [phase(marks, t) for t in (9.9, 10.1, 10.3, 10.55, 10.75, 10.9, 11.5)] == \
        ["setup", "setup", "protect", "multiply", "multiply", "settle", "after"]  # fmt: skip
    assert phase(marks[:4], 10.58) == "multiply"  # rank 0 itself was killed in its second step
    # --setup in-call: the call's start, then the detector's set-up inside it
    in_call = [("protect", 10.0), ("call", 10.2), ("setup", 10.3), ("step", 10.5), ("step", 10.6)]
    assert [phase(in_call, t) for t in (10.25, 10.4, 10.55)] == ["entry", "setup", "multiply"]
