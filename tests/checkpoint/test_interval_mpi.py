"""snapshot(auto=True) under MPI: every rank checkpoints at the same iterations, at Daly's interval."""

from __future__ import annotations

import re

import pytest

from ..conftest import REPO, run_python

pytestmark = pytest.mark.mpi


def test_auto_snapshot_decisions_agree_across_ranks(tmp_path):
    r = run_python(4, REPO / "tests" / "programs" / "async_snapshot.py", node_size=2, cwd=tmp_path,
                   timeout=180).check()
    levels = dict(re.findall(r"^R(\d+) levels=(\S*)$", r.stdout, re.M))
    assert sorted(levels) == ["0", "1", "2", "3"], r.stdout
    assert len(set(levels.values())) == 1, levels        # the same decisions on every rank
    taken = levels["0"].split(",")
    assert taken[0] == "1:4"                              # calibration checkpoint at the auto level (L4)
    assert len(taken) >= 2, taken                          # then at Daly's interval (< 1 s here)
