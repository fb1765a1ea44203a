"""ftkit's small exchanges (``checkpoint._mpi.allgather`` and ``bcast``) deliver every value whole, in one
round when it fits the first round's slot and in two when some rank's does not (issue 37)."""

from __future__ import annotations

import pytest

from ..conftest import REPO, run_python

pytestmark = pytest.mark.mpi


def test_values_of_every_length_arrive_whole_on_every_rank():
    r = run_python(3, REPO / "tests" / "programs" / "json_exchange.py", timeout=240)
    assert not r.timed_out, r.stdout + r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("R"))
    assert lines == ["R0 ok", "R1 ok", "R2 ok"], r.stdout + r.stderr
