"""``ftkit.inject.kill_together``: several real processes SIGKILLed as one event."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from ftkit._jobproc import proc_stat
from ftkit._wait import deadline_after, poll_until
from ftkit.inject import kill_together


def _sleepers(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["sleep", "300"]) for _ in range(n)]


def _states(procs: list[subprocess.Popen[bytes]]) -> list[str]:
    return [(proc_stat(p.pid) or ["gone"])[0] for p in procs]


def _end(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def test_every_process_is_stopped_before_the_first_is_killed_and_all_end_killed():
    procs = _sleepers(2)
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it: ignored
    try:
        seen: list[str] = []

        def look() -> None:  # a stop takes effect when the process is next scheduled: wait for it
            poll_until(lambda: _states(procs) == ["T", "T"], deadline_after(60), "the stops", max_sleep=0.01)
            seen.extend(_states(procs))

        kill_together([p.pid for p in procs] + [gone], look)
        assert seen == ["T", "T"], seen  # all stopped, none killed yet, while the callback ran
        assert [p.wait(timeout=30) for p in procs] == [-signal.SIGKILL] * 2
    finally:
        _end(procs)


def test_the_kills_are_sent_when_the_callback_raises_and_a_bad_pid_signals_nothing():
    procs = _sleepers(2)
    try:
        with pytest.raises(ValueError, match="not a process id"):
            kill_together([procs[0].pid, 0])
        states = _states(procs)
        assert not {"T", "Z", "gone"} & set(states), states  # untouched: neither stopped nor killed

        def fail() -> None:
            raise OSError("the disk could not be deleted")

        with pytest.raises(OSError, match="could not be deleted"):
            kill_together([p.pid for p in procs], fail)
        assert [p.wait(timeout=30) for p in procs] == [-signal.SIGKILL] * 2  # none left stopped
    finally:
        _end(procs)
