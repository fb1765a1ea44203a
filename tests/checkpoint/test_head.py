"""Head mode (``head = 1``): heads never reach the application, act for several groups, exit cleanly."""

from __future__ import annotations

import re

import pytest

from ftkit.inject import delete_node_dir

from ..conftest import run_python
from .test_async_ckpt import APP, TIMEOUT, assert_bit_identical, ranks, recovered, write_config

pytestmark = pytest.mark.mpi


def test_head_acts_for_three_groups_and_heads_exit_cleanly(tmp_path):
    """2 nodes of 4 processes (1 head + 3 application ranks): 3 L3 groups, each head encodes for all 3."""
    write_config(tmp_path, "head")
    args = ("--steps", "12", "--ckpt", "4:3", "--ckpt", "8:3")
    r = run_python(8, APP, *args, "--crash-at", "10", node_size=4, cwd=tmp_path, timeout=TIMEOUT)
    seen = ranks(r.stdout)
    # The application sees 6 ranks; world ranks 0 and 4 (the heads) never return from the constructor.
    assert sorted(seen) == list(range(6)), r.stdout + r.stderr
    assert all(v["size"] == 6 for v in seen.values())
    assert sorted(v["world"] for v in seen.values()) == [1, 2, 3, 5, 6, 7]
    assert [seen[k]["node"] for k in range(6)] == [0, 0, 0, 1, 1, 1]
    # Every rank's parity file of checkpoint 2 exists: the heads encoded all three groups.
    assert len(list((tmp_path / "run" / "local").glob("node*/*/l3/ckpt2/rank*"))) == 6
    delete_node_dir(tmp_path / "run" / "local" / "node0")
    r = run_python(8, APP, *args, node_size=4, cwd=tmp_path, timeout=TIMEOUT)
    # Exit status 0: the heads left their service loop and exited cleanly after the application finalized.
    r.check()
    assert recovered(r.stdout) == (2, 3, 8)
    assert_bit_identical(r.stdout)
    assert len(re.findall(r"^R\d+ ", r.stdout, re.M)) == 6
