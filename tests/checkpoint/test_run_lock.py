"""One owner per run (issue 13, defect 4): the ``meta_dir`` lock, with real jobs, real kills, real files."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from ftkit._jobproc import proc_stat
from ftkit.checkpoint import runlock
from ftkit.checkpoint.runlock import LOCK_NAME, STALE_AFTER_S, acquire_run_lock
from ftkit.errors import RunLockedError

from ..conftest import REPO, run_python
from ._util import TIMEOUT, l1_file, rank_lines, run_app, write_config

CASES = REPO / "tests" / "programs" / "ckpt_cases.py"
KILLED_JOB_LIMIT = 120.0  # s: hard limit for the job whose rank 0 is killed (it takes ~10 s)


def _plant(meta, host, pid, age_s, token="t0"):
    """A lock file as another job would have left it, its heartbeat ``age_s`` seconds old."""
    p = meta / LOCK_NAME
    p.write_text(json.dumps({"host": host, "pid": pid, "started": time.time() - 3600, "token": token}))
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = mp.get_context("fork").Process(target=lambda: None)
    proc.start()
    proc.join(30)
    return proc.pid


def test_live_owner_on_another_host_is_named(tmp_path):
    _plant(tmp_path, "node-17.example", 4242, age_s=5)
    with pytest.raises(RunLockedError) as err:
        acquire_run_lock(tmp_path, time.time())
    msg = str(err.value)
    assert "node-17.example" in msg and "pid 4242" in msg and "started at" in msg and "meta_dir" in msg
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == 4242, "a live owner's lock was touched"


def test_silent_owner_on_another_host_is_taken_over(tmp_path):
    _plant(tmp_path, "node-17.example", 4242, age_s=STALE_AFTER_S + 60)
    lock = acquire_run_lock(tmp_path, time.time())
    d = json.loads((tmp_path / LOCK_NAME).read_text())
    assert d["host"] == socket.gethostname() and d["pid"] == os.getpid() and d["token"] == lock.token
    assert (tmp_path / LOCK_NAME).stat().st_mode & 0o777 == 0o600
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_dead_owner_on_this_host_is_taken_over(tmp_path):
    _plant(tmp_path, socket.gethostname(), _dead_pid(), age_s=1)
    lock = acquire_run_lock(tmp_path, time.time())
    assert json.loads((tmp_path / LOCK_NAME).read_text())["token"] == lock.token
    lock.release()


def test_killed_owner_not_yet_reaped_is_taken_over(tmp_path):
    # A job's rank 0 SIGKILLed at the end of the job stays a zombie until its new parent reaps it; a relaunch
    # at that moment was refused ("in use by another job ... last heartbeat 2 s ago"), seen once in the suite.
    child = subprocess.Popen(["sleep", "60"])
    try:
        child.kill()
        _wait_for_state(child.pid, "Z")
        _plant(tmp_path, socket.gethostname(), child.pid, age_s=1)
        lock = acquire_run_lock(tmp_path, time.time())
        assert json.loads((tmp_path / LOCK_NAME).read_text())["token"] == lock.token
        lock.release()
    finally:
        child.wait(30)


def _wait_for_state(pid: int, state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (proc_stat(pid) or ["gone"])[0] != state:
        assert time.monotonic() < deadline, f"process {pid} not in state {state} within {timeout} s"
        time.sleep(0.01)


def test_live_owner_on_this_host_blocks(tmp_path):
    _plant(tmp_path, socket.gethostname(), os.getppid(), age_s=1)
    with pytest.raises(RunLockedError, match=f"pid {os.getppid()}"):
        acquire_run_lock(tmp_path, time.time())


def test_unreadable_lock_is_held_until_stale(tmp_path):
    p = tmp_path / LOCK_NAME
    p.write_bytes(b'{"host": "x", "pid"')          # an owner that died while writing it, or still writing
    with pytest.raises(RunLockedError, match="still writing it.*damaged|damaged.*still writing it"):
        acquire_run_lock(tmp_path, time.time())
    t = time.time() - STALE_AFTER_S - 60
    os.utime(p, (t, t))
    acquire_run_lock(tmp_path, time.time()).release()


def test_heartbeat_refreshes_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "HEARTBEAT_S", 0.05)
    lock = acquire_run_lock(tmp_path, time.time())
    t = time.time() - 1000
    os.utime(tmp_path / LOCK_NAME, (t, t))
    deadline = time.monotonic() + 30
    while (tmp_path / LOCK_NAME).stat().st_mtime < t + 500 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (tmp_path / LOCK_NAME).stat().st_mtime > t + 500, "the heartbeat did not refresh the lock"
    lock.release()


def _contender(meta: str, barrier, results) -> None:
    try:
        acquire_run_lock(meta, time.time())
        results.put("won")
    except RunLockedError:
        results.put("locked")
    barrier.wait(60)  # hold the lock until every contender has tried


def test_concurrent_takeover_has_one_winner(tmp_path):
    """Eight processes race to take over the same stale lock: exactly one owns the run."""
    for _ in range(3):
        _plant(tmp_path, socket.gethostname(), _dead_pid(), age_s=1)
        ctx = mp.get_context("fork")
        barrier, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_contender, args=(str(tmp_path), barrier, results)) for _ in range(8)]
        for p in procs:
            p.start()
        got = sorted(results.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(60)
        assert got.count("won") == 1, got
        (tmp_path / LOCK_NAME).unlink(missing_ok=True)


@pytest.mark.mpi
def test_second_job_on_one_meta_dir_is_refused_and_first_is_intact(tmp_path):
    d = tmp_path / "run1"
    write_config(d)
    release = d / "release"
    holder: dict[str, object] = {}

    def first() -> None:
        holder["r"] = run_python(2, CASES, "hold", "--release", str(release), node_size=1, cwd=d,
                                 timeout=TIMEOUT)

    t = threading.Thread(target=first)
    t.start()
    try:
        marker = d / "release.holding"
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the first job never took its checkpoint"
        pid = marker.read_text()
        r2 = run_python(2, CASES, "args", node_size=1, cwd=d, timeout=TIMEOUT)
    finally:
        release.write_text("go")
        t.join(TIMEOUT + 30)
    assert not r2.timed_out
    starts = {int(m.group(1)): m.group(2) for m in re.finditer(r"^R(\d+) start (.*)$", r2.stdout, re.M)}
    assert sorted(starts) == [0, 1], r2.stdout + r2.stderr
    for line in starts.values():
        assert line.startswith("RunLockedError") and f"pid {pid}" in line, line
        assert socket.gethostname() in line, line
        assert "own meta_dir" in line
    r1 = holder["r"]
    assert "R0 RELEASED" in r1.stdout and "R1 RELEASED" in r1.stdout, r1.stdout + r1.stderr
    # The first job's checkpoint survived the second job's attempt, bit for bit.
    r3 = run_python(2, CASES, "recover", node_size=1, cwd=d, timeout=TIMEOUT).check()
    assert r3.stdout.count("recovered id=1 data=ok") == 2, r3.stdout + r3.stderr
    assert not (d / "run" / "meta" / LOCK_NAME).exists(), "finalize() did not release the lock"


@pytest.mark.mpi
def test_lock_of_a_killed_job_is_taken_over(tmp_path):
    d = tmp_path / "run"
    write_config(d)
    # Rank 0 SIGKILLs itself; the others must leave without waiting for it in MPI_Finalize (ompi#11404: once
    # seen still running after 3 minutes): the job ends well within a hard limit.
    r = run_app(d, 4, "--mode", "write", "--levels", "1,1", "--kill-rank", "0",
                "--kill-stage", "after_commit", "--kill-index", "1", timeout=KILLED_JOB_LIMIT)
    assert not r.timed_out, f"the job did not end within {KILLED_JOB_LIMIT} s\n{r.stdout}\n{r.stderr}"
    assert "R0 wrote id=1" in r.stdout and "R0 wrote id=2" not in r.stdout, r.stdout + r.stderr
    assert l1_file(d, 2, 0).exists()
    lock = json.loads((d / "run" / "meta" / LOCK_NAME).read_text())
    assert lock["host"] == socket.gethostname()
    with pytest.raises(ProcessLookupError):
        os.kill(int(lock["pid"]), 0)
    r = run_app(d, 4, "--mode", "recover").check()
    assert r.stdout.count("recovered id=2") == 4 and "data=ok" in r.stdout, r.stdout + r.stderr


def test_files_of_another_run_are_never_this_runs(tmp_path, monkeypatch):
    """Separate meta_dirs, shared ckpt_dir/glbl_dir (issue 30, S1): another run's files neither stop a new run
    nor become its own; only this meta_dir's own run (its marker, or the configured exec_id) found without
    its manifest is a problem, and the advice names only that run's directories, never the shared roots."""
    from ftkit.checkpoint.runstate import RUN_MARKER, inspect_run
    from ftkit.config import load_config

    monkeypatch.chdir(tmp_path)             # the config's directories are relative to the job's directory
    cfg_path = write_config(tmp_path)
    for p in (tmp_path / "run" / "local" / "node0" / "other-run" / "l1" / "ckpt3",
              tmp_path / "run" / "global" / "other-run" / "l4" / "ckpt3", tmp_path / "run" / "meta"):
        p.mkdir(parents=True)
    cfg = load_config(cfg_path)
    state = inspect_run(cfg, 2, [cfg.ckpt_dir / "node0"])
    assert not state.restarted and not state.problem and state.from_scratch, state
    assert state.exec_id != "other-run"
    # FTI reads exec_id only on a restart (failure = 1..3): on a fresh start the named run is not this one's
    state = inspect_run(load_config(cfg_path).replace(exec_id="other-run"), 2, [cfg.ckpt_dir / "node0"])
    assert not state.restarted and not state.problem and state.exec_id != "other-run", state
    for how in ("exec_id", "marker"):          # the run this job names as its own: a problem, named
        if how == "exec_id":
            cfg = load_config(cfg_path).replace(exec_id="other-run", failure=1)
        else:
            cfg = load_config(cfg_path)
            (cfg.meta_dir / RUN_MARKER).write_text("other-run\n")
        state = inspect_run(cfg, 2, [cfg.ckpt_dir / "node0"])
        assert state.restarted and "'other-run'" in state.problem and "missing" in state.problem, how
        assert f"{cfg.glbl_dir / 'other-run'}" in state.problem, state.problem
        assert not re.search(rf"remove {re.escape(str(cfg.ckpt_dir))}( |$|,)", state.problem), state.problem
        assert f"and {cfg.glbl_dir} to start fresh" not in state.problem, state.problem


def _exec_id(meta) -> str:
    return json.loads((meta / "manifest.json").read_text())["exec_id"]


@pytest.mark.mpi
def test_jobs_with_their_own_meta_dir_share_ckpt_dir_and_glbl_dir(tmp_path):
    """Issue 30, S1: job B starts beside job A's files (README: separate meta_dirs may share ckpt_dir and
    glbl_dir); B is not refused, never adopts A's run, and each relaunch recovers its own newest checkpoint;
    B's manifest lost, B's own files are a clear problem while A's run is untouched."""
    shared = tmp_path / "shared"
    jobs = {name: tmp_path / name for name in ("a", "b")}
    for d in jobs.values():
        write_config(d, ckpt_dir=shared / "local", glbl_dir=shared / "global", meta_dir=d / "meta")
    r = run_app(jobs["a"], 4, "--mode", "write", "--levels", "1,4").check()
    assert r.stdout.count("wrote id=2") == 4, r.stdout + r.stderr
    r = run_app(jobs["b"], 4, "--mode", "write", "--levels", "4").check()
    assert r.stdout.count("wrote id=1") == 4 and "error" not in r.stdout, r.stdout + r.stderr
    ids = {name: _exec_id(d / "meta") for name, d in jobs.items()}
    assert ids["a"] != ids["b"], ids
    assert sorted(p.name for p in (shared / "global").iterdir()) == sorted(ids.values())
    for name, newest in (("a", 2), ("b", 1)):
        r = run_app(jobs[name], 4, "--mode", "recover").check()
        assert r.stdout.count(f"recovered id={newest} ") == 4 and "data=BAD" not in r.stdout, r.stdout
        assert _exec_id(jobs[name] / "meta") == ids[name]
    (jobs["b"] / "meta" / "manifest.json").unlink()   # B's own files without its manifest: a problem
    r = run_app(jobs["b"], 4, "--mode", "recover")
    assert not r.timed_out
    lines = rank_lines(r.stdout, 4)
    assert all(f"run {ids['b']!r}" in v and "missing" in v for v in lines.values()), r.stdout
    r = run_app(jobs["a"], 4, "--mode", "recover").check()
    assert r.stdout.count("recovered id=2 ") == 4 and "data=BAD" not in r.stdout, r.stdout


# -- issue 30 (L1-L3): a planted FIFO, a full disk, fields out of range ------------------------------------

def _try_lock(meta: str, results) -> None:
    try:
        acquire_run_lock(meta, time.time()).release()
        results.put("taken")
    except RunLockedError as exc:
        results.put(f"RunLockedError: {exc}")
    except Exception as exc:  # noqa: BLE001 - the test names any other outcome
        results.put(f"{type(exc).__name__}: {exc}")


def _lock_attempt(meta) -> str:
    """One acquire_run_lock in a child process, bounded: a hang is a failure, and the child is ended."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    proc = ctx.Process(target=_try_lock, args=(str(meta), results))
    proc.start()
    try:
        proc.join(60)
        assert not proc.is_alive(), "acquire_run_lock blocked (opening the lock file waited)"
        return results.get(timeout=30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(30)


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def test_planted_fifo_never_blocks_and_is_damaged_until_stale(tmp_path):
    p = tmp_path / LOCK_NAME
    os.mkfifo(p)
    got = _lock_attempt(tmp_path)
    assert got.startswith("RunLockedError") and str(p) in got and "damaged" in got, got
    assert "remove it" in got, got
    _age(p, STALE_AFTER_S + 60)
    assert _lock_attempt(tmp_path) == "taken"
    assert not p.exists(), "the lock taken over was not released"


def test_lock_created_on_a_full_disk_is_removed(tmp_path, small_disk):
    disk = small_disk(64 * 1024)
    filler = disk / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
    try:
        with pytest.raises(OSError):
            for _ in range(1000):
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as err:
        acquire_run_lock(disk, time.time())
    assert err.value.errno == 28, err.value   # ENOSPC
    assert not (disk / LOCK_NAME).exists(), "an empty lock was left behind: the next job would be refused"
    filler.unlink()
    lock = acquire_run_lock(disk, time.time())   # the next job is not refused
    assert json.loads((disk / LOCK_NAME).read_text())["token"] == lock.token
    lock.release()


@pytest.mark.parametrize("fields", [
    {"pid": 99999999999999999}, {"pid": 2**31}, {"pid": True}, {"pid": "123"},
    {"started": 1e300}, {"started": float("nan")}, {"started": float("inf")}, {"started": -5.0},
    {"started": 10**400},
])
@pytest.mark.parametrize("same_host", [True, False])
def test_fields_out_of_range_are_a_damaged_lock(tmp_path, fields, same_host):
    d = {"host": socket.gethostname() if same_host else "node-17.example", "pid": os.getpid(),
         "started": time.time(), "token": "t0", **fields}
    p = tmp_path / LOCK_NAME
    p.write_text(json.dumps(d))
    got = _lock_attempt(tmp_path)
    assert got.startswith("RunLockedError") and "damaged" in got and str(p) in got, got
    _age(p, STALE_AFTER_S + 60)   # a damaged lock becomes stale like any other
    assert _lock_attempt(tmp_path) == "taken"


def test_heartbeat_far_in_the_future_is_silent(tmp_path):
    p = _plant(tmp_path, "node-17.example", 4242, age_s=-(STALE_AFTER_S + 3600))
    assert p.stat().st_mtime > time.time() + STALE_AFTER_S
    assert _lock_attempt(tmp_path) == "taken"
