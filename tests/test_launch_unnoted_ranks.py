"""Issue 30, J6 (``ftkit launch`` exits non-zero whenever a rank ended by a signal) for ranks that never
import ftkit: found by the campaign's ``start`` kind (seed 53 trial 13), where every rank crashed (SIGSEGV)
inside ``MPI_Init`` after one was killed, and ``ftkit launch`` exited 0 without a word. Those ranks had
written only the ``begin`` note of the launcher's ``sitecustomize``; the verdict looked for the ``start``
note ``import ftkit`` writes, and mpirun exits 0 under ULFM. Real jobs, real signals.
"""

from __future__ import annotations

import sys

import pytest

from .test_jobexit import PROGRAMS, _copy, _end, _launch, _nothing_left

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("how", ["sigkill", "sigkill_before_init", "return"])
def test_ranks_without_ftkit_that_die_by_a_signal_fail_the_job(how, tmp_path):
    program = _copy(PROGRAMS / "ranks_end_unnoted.py", tmp_path)
    proc = _launch("-n", "4", "--", sys.executable, str(program), how, cwd=tmp_path)
    rc, out, err = _end(proc, program.name)
    assert _nothing_left(program.name)
    ended = [f"rank {r} ends by {how}" for r in range(4)] if how != "sigkill_before_init" else \
        [f"a rank ends by {how}"] * 4
    assert sorted(out.splitlines()) == ended, (out, err[-2000:])
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if how == "return":
        assert rc == 0 and "ftkit launch" not in err, (rc, err[-2000:])
    elif how == "sigkill":
        assert rc == 1, (rc, err[-2000:])  # was 0
        assert last.startswith("ftkit launch: the job failed: ranks 0,1,2,3 killed"), last
        assert "before its MPI_Init had completed" not in last  # their up notes were written
    else:
        assert rc != 0, (rc, err[-2000:])  # was 0
        assert last.startswith("ftkit launch: the job failed: "), last
        assert "before MPI_Init had completed on any rank" in last, last
