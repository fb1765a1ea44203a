"""Application state under online recovery (issue 35): a spare that replaces a killed rank gets that rank's
resizable array (its size, not the size the spare protected), generator state and dict, and the job ends
with every rank's state equal to the failure-free run's."""

from __future__ import annotations

import pytest

from ._util import write_config
from .test_online import Job, _bit_identical_recoveries

pytestmark = pytest.mark.mpi


def test_replacement_rank_gets_the_dead_ranks_resized_array_and_states(tmp_path):
    # 4 ranks on 2 emulated nodes + 1 spare, L2 every 5 steps; rank 1 is SIGKILLed at step 12.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = Job(tmp_path, 4, 1, "--steps", "30", "--pause", "0.02", "--appstate")
    job.kill_at(12, [1])
    r = job.done()
    rec = _bit_identical_recoveries(r)
    assert [d for d, _, _ in rec] == ["1"], r.stdout
    assert "appstate ok" in r.stdout.splitlines(), r.stdout + r.stderr
