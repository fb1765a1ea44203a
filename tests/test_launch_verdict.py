"""``ftkit launch``'s verdict on a rank that vanished: the job went on without it only if another rank is
known to have gone on after it was gone; a rank killed once the others had ended fails the job, with its
signal's exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftkit._jobproc import RankExits
from ftkit._jobverdict import endings, failure_code, verdict
from ftkit.jobstatus import read_notes

PROGRAM = Path(__file__).parent / "programs" / "late_death.py"
BOUND = 150.0  # s, for one job of three ranks on a loaded machine


def _launch(tmp_path: Path, order: str, how: str) -> tuple[int, str, str]:
    """Run ``late_death.py`` on 3 ranks under ``ftkit launch``, SIGKILL its last rank once that rank has
    written its pid (``how == "kill"``); return the launcher's exit code, stdout and stderr."""
    pidfile, out, err = tmp_path / "pid", tmp_path / "out", tmp_path / "err"
    cmd = [sys.executable, "-m", "ftkit", "launch", "-n", "3", "--timeout", str(BOUND), "--",
           sys.executable, str(PROGRAM), str(pidfile), order, how]
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr)
    try:
        deadline = time.monotonic() + BOUND
        while how == "kill" and proc.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
                break
            except (OSError, ValueError):  # not written yet
                time.sleep(0.05)
        code = proc.wait(timeout=BOUND + 60)
    finally:
        if proc.poll() is None:
            proc.kill()  # its watchdog ends the job
            proc.wait()
    return code, out.read_text(), err.read_text()


@pytest.mark.parametrize("order,how", [("after", "kill"), ("after", "abort"), ("after-notes", "kill")])
def test_a_rank_killed_after_the_others_had_ended_fails_the_job(tmp_path, order, how):
    # Ranks 0 and 1 end normally (their processes gone, or their exit notes written while they wait in
    # MPI_Finalize); then rank 2 is SIGKILLed from outside or aborts. mpirun exits 0 under ULFM, and the
    # launcher took rank 2 for a rank the others had gone on without: the job exited 0.
    code, out, err = _launch(tmp_path, order, how)
    sig = signal.SIGKILL if how == "kill" else signal.SIGABRT
    assert code == 128 + sig, (code, out, err)
    verdicts = [line for line in err.splitlines() if line.startswith("ftkit launch:")]
    assert verdicts == [f"ftkit launch: the job failed: rank 2 killed by {sig.name}, and no rank went on "
                        "without it"], err
    assert err.rstrip().endswith(verdicts[0]), err


def test_a_rank_the_others_went_on_without_does_not_fail_the_job(tmp_path):
    # Rank 2 is SIGKILLed first; ranks 0 and 1 learn of it from MPI, declare it dead, repair and end normally.
    code, out, err = _launch(tmp_path, "before", "kill")
    assert code == 0, (code, out, err)
    assert sorted(out.split("\n"))[1:] == ["rank 0 went on without [2]", "rank 1 went on without [2]"], out
    assert err.rstrip().splitlines()[-1] == ("ftkit launch: rank 2 killed by SIGKILL; the other ranks went "
                                             "on without them and ended normally"), err


def _notes(directory: Path, names: dict[str, float], dead: str = "") -> None:
    """Note files as ranks write them, each with its modification time (``names``: name -> epoch time)."""
    directory.mkdir(exist_ok=True)
    for name, when in names.items():
        (directory / name).write_text(dead if name.startswith("dead.") else "")
        os.utime(directory / name, (when, when))


def test_what_counts_as_going_on_after_a_rank_was_gone(tmp_path):
    # Ranks 0 and 1 wrote their exit notes at t=1000; rank 2 (pid 102) vanished by SIGKILL; rank 3 (pid
    # 103) left by os._exit(0), without a note (its code 0 came from the runtime), last seen running at 1003.
    base = {"start.0.100": 900, "exit.0.100": 1000, "start.1.101": 900, "exit.1.101": 1000,
            "start.2.102": 900, "start.3.103": 900}
    _notes(tmp_path / "a", base)
    notes = read_notes(tmp_path / "a")
    status, running = {102: signal.SIGKILL, 103: 0}, {103: 1003.0}

    def judged(gone: float | None) -> tuple[tuple[bool, str], int]:
        ended = {} if gone is None else {102: gone}
        ends = endings(notes, {}, status, {}, ended, running)
        return verdict(ends, 0), failure_code(ends, status, {}, ended)

    went_on = (False, "ftkit launch: rank 2 killed by SIGKILL; the other ranks went on without them and "
                      "ended normally")
    failed = (True, "ftkit launch: the job failed: rank 2 killed by SIGKILL, and no rank went on without it")
    assert judged(999.0)[0] == went_on            # ranks 0 and 1 wrote their exit notes after it was gone
    assert judged(1002.0)[0] == went_on           # rank 3 was seen running after it was gone
    assert judged(1004.0) == (failed, 128 + signal.SIGKILL)  # everybody else had ended before
    assert judged(None) == (failed, 128 + signal.SIGKILL)    # no time known: no evidence
    # A rank that ended normally and declared it dead went on without it, whatever the times say.
    _notes(tmp_path / "b", {**base, "dead.1.101": 1000}, dead="2")
    ends = endings(read_notes(tmp_path / "b"), {}, status, {}, {102: 1004.0}, running)
    assert verdict(ends, 0) == went_on


def test_job_status_needs_a_dead_note_to_count_a_vanished_rank_as_gone_on_without(tmp_path):
    # Notes alone do not tell when a rank's process ended: only a rank that ended normally and declared it
    # dead (ftkit's repair and exit hook do) shows that the job went on without it.
    base = {"start.0.100": 900, "exit.0.100": 1000, "start.1.101": 900}
    _notes(tmp_path / "alone", base)
    _notes(tmp_path / "declared", {**base, "dead.0.100": 950}, dead="1")
    runs = {name: subprocess.run([sys.executable, "-m", "ftkit", "job-status", str(tmp_path / name)],
                                 capture_output=True, text=True, timeout=120)
            for name in ("alone", "declared")}
    assert runs["alone"].returncode == 1, runs["alone"]
    assert runs["alone"].stderr.strip() == ("ftkit job-status: the job failed: rank 1 killed (no exit seen: "
                                            "a signal, or os._exit), and no rank went on without it")
    assert runs["declared"].returncode == 0, runs["declared"]
    assert runs["declared"].stdout.strip() == ("ftkit job-status: rank 1 killed (no exit seen: a signal, or "
                                               "os._exit); the other ranks went on without them and ended "
                                               "normally")


def test_the_runtime_lines_tell_the_signal_and_when_a_rank_was_reaped():
    # PRRTE 3.0 at odls_base_verbose 5, for a rank ended by a signal (its strsignal text) and one by exit 0.
    job, rank = "[vm:01571] [prterun-vm-1571@0,0] odls:", "[prterun-vm-1571@1,"
    exits = RankExits()
    before = time.time()
    for line in (f"{job}wait_local_proc child process {rank}2] pid 4711 terminated",
                 f"{job}waitpid_fired child process {rank}2] terminated with signal Aborted",
                 f"{job}wait_local_proc child process {rank}0] pid 4709 terminated",
                 f"{job}waitpid_fired child {rank}0] exit code 0"):
        assert exits.claim(line + "\n")
    status: dict[int, int] = {}
    ended = {4709: before - 5}  # seen gone earlier by the watch: the earlier time stays
    exits.seen({4709: 0, 4711: 2}, status, ended)
    assert status == {4711: signal.SIGABRT, 4709: 0}
    assert before <= ended[4711] <= time.time() and ended[4709] == before - 5
    assert exits.first is None  # a signal is no non-zero exit code
