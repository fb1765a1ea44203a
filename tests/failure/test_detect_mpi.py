"""Failure detection, agreement and repair under mpirun with ULFM: real SIGKILLs and a real stall."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from ftkit import inject

from ..conftest import run_python, wait_for_int

PROGRAM = Path(__file__).parents[1] / "programs" / "failure_exchange.py"
TIMEOUT = 150  # s, hard limit per job

pytestmark = pytest.mark.mpi


def _results(stdout: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"RESULT rank=(\d+) .*", stdout)}


def _check(r, n: int, dead: list[int], grid: tuple[int, int] | None = None) -> None:
    res = _results(r.stdout)
    assert not r.timed_out, r.stdout + r.stderr
    survivors = [q for q in range(n) if q not in dead]
    assert sorted(res) == survivors, r.stdout + r.stderr
    table = [0 if q in dead else 1 for q in range(n)]
    for q in survivors:
        line = res[q]
        assert f"dead={dead}" in line and f"table={table}" in line, line
        assert f"sum={sum(survivors)}" in line and f"newsize={len(survivors)}" in line, line


@pytest.mark.parametrize("step", [0, 2])
def test_sigkill_from_inside_is_agreed_on_and_repaired(tmp_path, step):
    r = run_python(
        4,
        PROGRAM,
        "--steps",
        "3",
        "--kill-rank",
        "2",
        "--kill-step",
        str(step),
        "--dir",
        str(tmp_path),
        "--grid",
        "2x2",
        timeout=TIMEOUT,
    )
    _check(r, 4, [2])
    # the default timeout is 10 x the measured round trip, at least 10 s
    timeout, rtt = (float(x) for x in re.search(r"TIMEOUT ([\d.]+) RTT ([\d.]+)", r.stdout).groups())
    assert timeout == pytest.approx(max(10 * rtt, 10.0), abs=1e-3)
    # ULFM's detector, not the 10 s timeout, found the death.
    assert all(float(x) < 8 for x in re.findall(r"elapsed=([\d.]+)", r.stdout)), r.stdout


def test_sigkill_from_outside_by_pid(tmp_path):
    def killer() -> None:
        victim = wait_for_int(tmp_path / "ready", TIMEOUT)
        if victim is not None:
            inject.kill_pid(int((tmp_path / f"pid.{victim}").read_text()))

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    r = run_python(
        4,
        PROGRAM,
        "--steps",
        "3",
        "--wait-rank",
        "1",
        "--wait-step",
        "1",
        "--dir",
        str(tmp_path),
        timeout=TIMEOUT,
    )
    t.join(5)
    _check(r, 4, [1])
    assert re.search(r"PID rank=1 pid=\d+", r.stdout)


def test_two_ranks_killed_in_different_steps(tmp_path):
    r = run_python(
        4,
        PROGRAM,
        "--steps",
        "4",
        "--kill-rank",
        "1",
        "--kill-step",
        "0",
        "--kill-rank",
        "3",
        "--kill-step",
        "2",
        "--dir",
        str(tmp_path),
        timeout=TIMEOUT,
    )
    _check(r, 4, [1, 3])


def test_slow_process_is_declared_dead_and_fenced_off(tmp_path):
    r = run_python(
        4,
        PROGRAM,
        "--steps",
        "4",
        "--slow-rank",
        "1",
        "--slow-step",
        "2",
        "--sleep",
        "6",
        "--timeout",
        "1.5",
        "--dir",
        str(tmp_path),
        timeout=TIMEOUT,
    )
    _check(r, 4, [1])
    # The slow rank is alive: it learnt it was fenced, raised Fenced naming itself, and left the repaired
    # comm.
    assert "FENCED rank=1 failed_ranks=[1]" in r.stdout, r.stdout + r.stderr
    assert "OUT rank=1 dead=[1]" in r.stdout


def test_strict_exchange_raises_timeout_or_process_failure_within_bounded_time(tmp_path):
    slow = run_python(
        4,
        PROGRAM,
        "--steps",
        "3",
        "--slow-rank",
        "2",
        "--slow-step",
        "1",
        "--sleep",
        "5",
        "--timeout",
        "1",
        "--strict",
        "--dir",
        str(tmp_path),
        timeout=TIMEOUT,
    )
    raised = re.findall(r"RAISED rank=(\d+) (\w+) failed_ranks=\[2\] after=([\d.]+)s", slow.stdout)
    assert sorted(int(r) for r, _, _ in raised) == [0, 1, 3], slow.stdout + slow.stderr
    assert all(kind == "TimeoutFailure" and float(t) < 4.5 for _, kind, t in raised), raised
    killed = run_python(
        4,
        PROGRAM,
        "--steps",
        "3",
        "--kill-rank",
        "3",
        "--kill-step",
        "1",
        "--strict",
        "--dir",
        str(tmp_path),
        timeout=TIMEOUT,
    )
    raised = re.findall(r"RAISED rank=(\d+) (\w+) failed_ranks=\[3\] after=([\d.]+)s", killed.stdout)
    assert sorted(int(r) for r, _, _ in raised) == [0, 1, 2], killed.stdout + killed.stderr
    # a crash is reported by ULFM well before the (10 s) timeout
    assert all(kind == "ProcessFailure" and float(t) < 8 for _, kind, t in raised), raised
