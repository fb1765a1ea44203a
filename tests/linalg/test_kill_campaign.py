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


@pytest.mark.parametrize("grid", campaign.GRIDS)
def test_random_kill_on_every_grid_ends_exact_or_in_one_process_failure(tmp_path, grid):
    trial = campaign.draw_trial(random.Random(f"ftkit-{grid}"), grid, max_delay=0.8)
    outcome, detail, _ = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert outcome in ("exact", "failure", "late"), f"{trial}: {outcome}: {detail}"


@pytest.mark.parametrize("beta,expected", [(0.0, "exact"), (0.5, "failure")])
def test_defect1_nonsquare_grid_kill_as_the_multiply_starts(tmp_path, beta, expected):
    # 2x3, transa = "T" (A had to be redistributed), operands protected once; rank 4 stops as the multiply
    # starts and is SIGKILLed from outside while the others begin. Before the fix the multiply redistributed
    # A again (a plain collective): the survivors crashed in its Alltoallv or hung there. Now: beta = 0, the
    # exact product; beta != 0, the multiply must save C first and rank 4 died before it did, so every
    # survivor raises the same ProcessFailure naming it.
    trial = campaign.Trial("2x3", "TN", beta, "protect", 4, 0.0, n=96, nb=8, step_pause=0.0, hold=True)
    outcome, detail, _ = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert outcome == expected, f"{trial}: {outcome}: {detail}"
    assert "[4]" in detail, detail


@pytest.mark.parametrize("repeat", range(3))
def test_defect1_nonsquare_grid_kill_in_the_first_steps_gives_the_exact_product(tmp_path, repeat):
    # the same with the kill at a random moment of the first few of twelve steps
    delay = random.Random(repeat).uniform(0.0, 0.06)
    trial = campaign.Trial("2x3", "TN", 0.0, "protect", 4, delay, n=96, nb=8, step_pause=0.02,
                           start_at_step=True)  # fmt: skip
    outcome, detail, _ = campaign.run_trial(trial, tmp_path, TRIAL_TIMEOUT)
    assert outcome == "exact", f"{trial}: {outcome}: {detail}"
    assert "failed=[4]" in detail, detail
