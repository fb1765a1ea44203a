"""One message per error (ftkit.uncaught): uncaught ftkit errors of real MPI jobs, printed once with their
ranks; different errors each once; no hang when only one rank raises; Python's behaviour otherwise."""

from __future__ import annotations

import re

from ftkit.uncaught import format_ranks

from .checkpoint._util import write_config
from .conftest import REPO, run_python

PROGRAM = REPO / "tests" / "programs" / "uncaught_errors.py"
TIMEOUT = 120.0


def _run(d, nranks: int, mode: str, **keys: object):
    write_config(d, failure_timeout=60, **keys)
    r = run_python(nranks, PROGRAM, "--config", "ftkit.ini", "--mode", mode, cwd=d, timeout=TIMEOUT,
                   node_size=2 if keys.get("head") else None)
    assert not r.timed_out, "the job hung:\n" + r.stdout + r.stderr
    return r


def test_format_ranks():
    assert format_ranks([3]) == "rank 3"
    assert format_ranks([0, 1, 2, 3, 4, 5, 6, 7]) == "ranks 0-7"
    assert format_ranks([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"


def test_the_same_error_on_every_rank_is_printed_once_by_rank_0(tmp_path):
    r = _run(tmp_path, 4, "same")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.count("raising") == 4, r.stdout
    assert r.stderr.count("Traceback") == 1, r.stderr
    assert r.stderr.count("CheckpointError: the same error on every rank that raises it") == 1, r.stderr
    assert "(same on ranks 0-3)\n" in r.stderr, r.stderr


def test_with_head_ranks_the_application_ranks_compare_their_errors(tmp_path):
    # 4 processes on 2 emulated nodes, the first of each a head: application ranks 0-1
    r = _run(tmp_path, 4, "same", head=1, group_size=2)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("Traceback") == 1 and "(same on ranks 0-1)\n" in r.stderr, r.stderr


def test_different_errors_are_each_printed_once_with_their_ranks(tmp_path):
    r = _run(tmp_path, 4, "differ")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("Traceback") == 2, r.stderr
    for which, ranks in (("even", "0, 2"), ("odd", "1, 3")):
        found = re.findall(rf"CheckpointError: the {which} ranks' error\n\((.*)\)\n", r.stderr)
        assert found == [f"same on ranks {ranks}"], r.stderr


def test_an_error_on_one_rank_only_is_printed_after_a_bounded_wait_and_never_hangs(tmp_path):
    r = _run(tmp_path, 4, "one")
    assert r.stderr.count("CheckpointError: the same error on every rank that raises it") == 1, r.stderr
    assert "(on rank 1; no error from ranks 0, 2-3 within 2 s)\n" in r.stderr, r.stderr
    # rank 1 ended its process: the others' barrier failed instead of waiting for it
    assert sorted(re.findall(r"^R(\d) saw the failure$", r.stdout, re.M)) == ["0", "2", "3"], r.stdout


def test_other_errors_keep_pythons_behaviour(tmp_path):
    r = _run(tmp_path, 4, "app")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("ValueError: an application error") == 4, r.stderr
    assert "(same on" not in r.stderr


def test_a_single_rank_job_prints_as_python_does(tmp_path):
    r = _run(tmp_path, 1, "same")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("Traceback") == 1, r.stderr
    assert "(same on" not in r.stderr and "(on rank" not in r.stderr, r.stderr
