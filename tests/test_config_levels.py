"""A value that only matters for a feature the file does not use is not an error: FTI's H1POSIX.fti sets
``group_size = 1`` with L2/L3 off. Under MPI it starts, L1 and L4 work, and L2/L3 are refused when asked."""

from __future__ import annotations

import pytest

from .conftest import REPO, run_python

PROGRAM = REPO / "tests" / "programs" / "config_levels.py"

pytestmark = pytest.mark.mpi


def test_group_size_1_runs_l1_l4_and_refuses_l2_l3(tmp_path):
    (tmp_path / "c.fti").write_text(
        "[basic]\nhead = 0\nnode_size = 1\nckpt_dir = Local\nglbl_dir = Global\nmeta_dir = Meta\n"
        "ckpt_l1 = 1\nckpt_l2 = 0\nckpt_l3 = 0\nckpt_l4 = 7\ngroup_size = 1\nckpt_io = 1\n"
        "[ftkit]\nfailure_timeout = 120\n")
    res = run_python(2, PROGRAM, "--config", "c.fti", "--levels", "1,2,3,4", node_size=1, cwd=tmp_path,
                     timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "L1 ok id=1" in out and "L4 ok id=2" in out, out
    for lv in (2, 3):
        assert f"L{lv} refused CheckpointError" in out and f"an L{lv} checkpoint needs groups" in out, out
    assert "group_size = 1: no L2/L3 groups" in res.stderr      # the load-time warning
