"""Issue 17: three seeded trials of the random online kill campaign (``benchmarks/online_campaign.py``).

Each trial kills from outside by PID (a random rank at a random moment, a whole node, a rank and then its
partner during the recovery...) and must end bit for bit with the failure-free run, or with the same
OnlineRecoveryError on every process whose promise about a relaunch holds (the campaign runs the relaunch).
Never a wrong field, never a hang.
"""

from __future__ import annotations

import importlib.util
import random
import sys

import pytest

from ..conftest import REPO

pytestmark = pytest.mark.mpi

_spec = importlib.util.spec_from_file_location("ftkit_online_campaign",
                                               REPO / "benchmarks" / "online_campaign.py")
campaign = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = campaign  # its dataclasses look their module up
_spec.loader.exec_module(campaign)


@pytest.mark.parametrize("i,kinds", [(0, ("node",)), (1, ("partner",)), (2, ("rank0pair",))])
def test_seeded_online_kill_trial(i, kinds, tmp_path):
    rng = random.Random(2026 + i)
    trial = campaign.draw(rng, 0, kinds)
    outcome = campaign.run_trial(trial, timeout=150.0, workdir=tmp_path)
    assert outcome.outcome in ("exact", "error"), (trial, outcome)
