"""Issue 17, hostile cases for online recovery: a full disk during the online run, a second job on the same
directories. Real tmpfs, real kills from outside, every wait bounded."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ._util import write_config
from .test_online import Job, _bit_identical_recoveries, _digests, _progress, _wait_for

pytestmark = pytest.mark.mpi


def _files(d: Path, prefix: str) -> dict[str, str]:
    return {p.name.split(".", 1)[1]: p.read_text() for p in d.glob(f"{prefix}.*")}


def test_full_local_disk_every_rank_raises_the_same_error_and_the_previous_checkpoint_stays(tmp_path,
                                                                                             small_disk):
    # The node-local directory is a 4 MiB tmpfs; each L2 checkpoint of the 384x384 field takes ~2.4 MB:
    # the checkpoint of step 5 fits, that of step 10 cannot (the disk fills while it is written). Every
    # rank raises the same CheckpointError, no hang (the idle spare ends too), the checkpoint of step 5
    # stays intact: with the disk made larger, a relaunch recovers from it bit for bit.
    local = small_disk(4 << 20)
    write_config(tmp_path, group_size=2, ckpt_l2=5, ckpt_dir=str(local))
    args = ("--steps", "20", "--size", "384")
    r = Job(tmp_path, 4, 1, *args).done()
    errors = _files(tmp_path, "error")
    assert sorted(errors) == ["rank0", "rank1", "rank2", "rank3"], (errors, r.stdout, r.stderr)
    assert len(set(errors.values())) == 1, errors
    msg = next(iter(errors.values()))
    assert msg.startswith("CheckpointError") and "space" in msg.lower(), msg
    assert "digest" not in r.stdout and not _files(tmp_path, "online-error.rank"), r.stdout
    subprocess.run(["mount", "-o", "remount,size=64m", str(local)], check=True, timeout=30)
    again = Job(tmp_path, 4, 0, *args).done()
    assert again.returncode == 0, again.stdout + again.stderr
    got, ref = _digests(again.stdout)
    assert got == ref, again.stdout


def test_second_job_on_the_same_directories_is_refused_also_after_rank_0_was_replaced(tmp_path):
    # Job A (4 ranks + 1 spare) runs; rank 0, which holds the run lock, is SIGKILLed in step 8 and replaced
    # online (the replacement takes the lock over). In step 20 job A waits for the test: a second job
    # started on the same directories then gets RunLockedError on its ranks, and job A, let go, finishes
    # bit for bit.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    go = tmp_path / "go"
    a = Job(tmp_path, 4, 1, "--steps", "30", "--pause", "0.02", "--wait-at", "20", "--wait-for", str(go))
    a.kill_at(8, [0])
    _wait_for(lambda: _progress(tmp_path) >= 19 or not a.thread.is_alive(), "job A past its recovery")
    assert a.thread.is_alive(), a.done().stdout
    b = Job(tmp_path, 4, 0, "--steps", "5").done()
    go.write_text("")
    assert b.returncode != 0, b.stdout
    errors = {p.read_text() for p in tmp_path.glob("error.rank*")}
    assert "RunLockedError" in b.stderr or any(e.startswith("RunLockedError") for e in errors), (
        b.stdout + b.stderr)
    rec = _bit_identical_recoveries(a.done())
    assert [d for d, _, _ in rec] == ["0"], rec
