"""The Checkpointer API on a live job: argument checks, snapshot intervals, ids, context manager."""

from __future__ import annotations

import re

import pytest

from ..conftest import REPO, run_python

pytestmark = pytest.mark.mpi

CHECKS = ["node_size", "failure1_restarted", "failure1_recover", "fresh", "local_dir", "recover_fresh",
          "nothing_protected", "noncontiguous", "object_dtype", "not_array", "bad_level",
          "snapshot_iterations", "status", "explicit_id", "id_not_increasing", "id_differs", "after_finalize",
          "with_exception_keeps", "with_recovered", "with_clean_exit_cleans"]


def test_checkpointer_api(tmp_path):
    r = run_python(2, REPO / "tests" / "programs" / "ckpt_api.py", str(tmp_path), node_size=1, timeout=240)
    out = r.stdout
    assert not r.timed_out, out + r.stderr
    failed = re.findall(r"^FAIL .*$", out, re.M)
    assert not failed, "\n".join(failed)
    passed = re.findall(r"^OK (\S+)$", out, re.M)
    assert passed == CHECKS, out + r.stderr[-3000:]
