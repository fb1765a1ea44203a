"""How a rank's end reaches ``ftkit launch``: the ``fault`` note of a crashed process (real crash, real
signal) and the launcher's verdict on it (no MPI)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ftkit import jobstatus
from ftkit._jobwatch import RankWatch

_CRASH = textwrap.dedent("""
    import ctypes, threading, time
    from ftkit import jobstatus
    jobstatus.register()
    jobstatus.watch_faults()
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # another thread's frames too

    def exchange_halos():
        ctypes.string_at(0)

    exchange_halos()
""")


def _crash(tmp_path):
    env = {**os.environ, jobstatus.STATUS_ENV: str(tmp_path), "OMPI_COMM_WORLD_RANK": "3"}
    return subprocess.run([sys.executable, "-c", _CRASH], env=env, capture_output=True, timeout=120)


def test_a_crash_writes_a_fault_note_naming_the_crashing_frame(tmp_path):
    proc = _crash(tmp_path)
    assert proc.returncode == -11, proc.stderr  # SIGSEGV: the crash still ends the process as before
    notes = {n.kind: n for n in jobstatus.read_notes(tmp_path)}
    assert set(notes) == {"start", "fault"}, notes  # no exit note: the process did not end normally
    assert notes["fault"].rank == 3
    summary = jobstatus.crash_summary(notes["fault"].text)
    assert summary.startswith("Fatal Python error: Segmentation fault in string_at ("), summary


def test_no_fault_note_is_read_for_a_process_that_did_not_crash(tmp_path):
    env = {**os.environ, jobstatus.STATUS_ENV: str(tmp_path), "OMPI_COMM_WORLD_RANK": "1"}
    code = "from ftkit import jobstatus; jobstatus.register(); jobstatus.watch_faults()"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert any(p.name.startswith("fault.1.") for p in tmp_path.iterdir())  # created, empty
    assert sorted(n.kind for n in jobstatus.read_notes(tmp_path)) == ["exit", "start"]


def test_the_launcher_names_the_crashed_rank_and_fails_the_job(tmp_path):
    _crash(tmp_path)
    watch = RankWatch(sid=-1, status_dir=str(tmp_path))
    watch.notes = jobstatus.read_notes(tmp_path)
    failed, line = watch.verdict(0)
    assert failed
    assert line.startswith("ftkit launch: the job failed: rank 3 crashed (Fatal Python error: Segmentation "
                           "fault in string_at ("), line


def test_a_crashed_rank_is_not_counted_among_the_ranks_whose_nodes_may_be_lost(tmp_path, monkeypatch):
    # Seed 11 trial 3 of the campaign: node 2 lost, rank 7 crashed (SIGSEGV) on intact node 3; the exit hook
    # counted rank 7 among the dead whose nodes may be lost and announced "starts from the beginning", while
    # the relaunch recovered checkpoint 7 from L2. A crashed rank, like one the hook ended, is left out.
    _crash(tmp_path)
    monkeypatch.setenv(jobstatus.STATUS_ENV, str(tmp_path))
    assert jobstatus.ended_by_hook() == {3}
