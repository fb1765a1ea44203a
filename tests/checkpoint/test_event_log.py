"""The event log in real MPI jobs: a checkpoint, a recovery and a failure each produce their line once, on
rank 0, with the sizes of the files written; nothing at WARNING in a normal run; DEBUG lines per rank;
the application's own logging configuration is followed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ftkit.models.units import format_size

from ..conftest import REPO, run_python
from ._util import write_config
from .test_online import Job

PROGRAM = REPO / "tests" / "programs" / "event_log.py"
TIMEOUT = 180.0
LINE = re.compile(r"^\[ftkit \d\d:\d\d:\d\d rank (\d+)\] (.*)$", re.M)


def _run(d: Path, *args: str, env: dict[str, str] | None = None, nranks: int = 4):
    r = run_python(nranks, PROGRAM, "--config", "ftkit.ini", *args, cwd=d, node_size=2, timeout=TIMEOUT,
                   env=env)
    assert not r.timed_out and r.returncode == 0, r.stdout + r.stderr
    return r


def _lines(stderr: str) -> list[tuple[int, str]]:
    return [(int(rank), text) for rank, text in LINE.findall(stderr)]


def _total_bytes(d: Path) -> int:
    """Bytes of the checkpoint kept in the run's manifest (every rank's file)."""
    manifest = json.loads(next((d / "run" / "meta").rglob("manifest.json")).read_text())
    (entry,) = manifest["checkpoints"]
    return sum(f["size"] for f in entry["files"])


def test_checkpoint_and_recovery_lines_once_on_rank_0(tmp_path):
    write_config(tmp_path, group_size=2, keep_last_ckpt=1)
    r = _run(tmp_path, "--levels", "1,2,4")
    lines = _lines(r.stderr)
    assert {rank for rank, _ in lines} == {0}, r.stderr
    size = format_size(_total_bytes(tmp_path))   # the last one is kept; every checkpoint has the same size
    for ckpt_id, level in ((1, 1), (2, 2), (3, 4)):
        found = [t for _, t in lines if t.startswith(f"checkpoint {ckpt_id} at L{level}: ")]
        assert len(found) == 1, r.stderr
        assert re.fullmatch(rf"checkpoint {ckpt_id} at L{level}: {re.escape(size)} in \d+\.\d{{3}} s "
                            r"\(.*/s\), 4 ranks", found[0]), found
    assert [t for _, t in lines if t.startswith("finalize")] == [
        "finalize: checkpoint 3 kept at L4; node-local files removed"], r.stderr
    assert "WARNING" not in r.stderr and "Warning" not in r.stderr, r.stderr
    # Writing the lines loads nothing heavy: ftkit.models cost rank 0's first checkpoint call 20-80 ms.
    assert r.stdout.count("models_imported=False") == 4, r.stdout

    r = _run(tmp_path, "--levels", "")
    assert r.stdout.count("recovered 3") == 4, r.stdout
    found = [(rank, t) for rank, t in _lines(r.stderr) if t.startswith("recovered checkpoint")]
    assert len(found) == 1 and found[0][0] == 0, r.stderr
    assert re.fullmatch(rf"recovered checkpoint 3 from L4: {re.escape(size)} in \d+\.\d{{3}} s \(.*/s\)",
                        found[0][1]), found
    assert "WARNING" not in r.stderr, r.stderr


def test_debug_lines_come_from_every_rank_and_off_silences(tmp_path):
    write_config(tmp_path / "a", group_size=2)
    r = _run(tmp_path / "a", "--levels", "1", env={"FTKIT_LOG": "debug"})
    wrote = sorted(rank for rank, t in _lines(r.stderr) if re.fullmatch(rf"checkpoint 1: rank {rank} wrote "
                                                                         r"\d+ bytes at L1 on node \d", t))
    assert wrote == [0, 1, 2, 3], r.stderr
    r = _run(tmp_path / "a", "--levels", "1", env={"FTKIT_LOG": "off"})
    assert "[ftkit " not in r.stderr, r.stderr


def test_verbosity_3_shows_no_info_and_config_notes_come_once(tmp_path):
    p = write_config(tmp_path, group_size=2)
    p.write_text(p.read_text().replace("[basic]\n", "[basic]\nverbosity = 3\nckpt_io = 2\n"))
    r = _run(tmp_path, "--levels", "1")
    assert "[ftkit " not in r.stderr, r.stderr
    assert r.stderr.count("configuration notes") == 1, r.stderr   # once per job, not once per rank


def test_the_applications_logging_configuration_is_followed(tmp_path):
    write_config(tmp_path, group_size=2)
    r = _run(tmp_path, "--levels", "1,2", "--app-logging")
    assert "[ftkit " not in r.stderr, r.stderr
    found = re.findall(r"^APP ftkit\.checkpoint INFO checkpoint (\d) at L(\d): ", r.stderr, re.M)
    assert found == [("1", "1"), ("2", "2")], r.stderr


def test_a_failure_and_its_online_recovery_each_log_one_line(tmp_path):
    # 4 ranks on 2 emulated nodes + 1 spare, L2 every 5 steps; rank 1 is SIGKILLed at step 12.
    write_config(tmp_path, group_size=2, ckpt_l2=5)
    job = Job(tmp_path, 4, 1, "--steps", "30", "--pause", "0.02")
    job.kill_at(12, [1])
    r = job.done()
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _lines(r.stderr)
    for pattern in (r"process failure: rank\(s\) 1 dead", r"spare promoted to rank 1",
                    r"online recovery 1: checkpoint \d+ restored from L2, .* in \d+\.\d{3} s \(repair .*\)"):
        found = [(rank, t) for rank, t in lines if re.fullmatch(pattern, t)]
        assert len(found) == 1 and found[0][0] == 0, (pattern, r.stderr)
    assert "WARNING" not in r.stderr, r.stderr


def test_a_shrink_logs_the_failure_and_the_smaller_job_once(tmp_path):
    # 4 ranks on 2 emulated nodes, no spare, L1 every 5 steps, steps(on_shrink=): rank 3 dies at step 12.
    write_config(tmp_path, group_size=2, ckpt_l1=5)
    job = Job(tmp_path, 4, 0, "--steps", "30", "--pause", "0.02",
              program=REPO / "tests" / "programs" / "online_shrink.py")
    job.kill_at(12, [3])
    r = job.done()
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _lines(r.stderr)
    for pattern in (r"process failure: rank\(s\) 3 dead", r"shrink: continuing on 3 ranks instead of 4 .*",
                    r"online recovery 1: checkpoint \d+ restored from L1, .*"):
        found = [(rank, t) for rank, t in lines if re.fullmatch(pattern, t)]
        assert len(found) == 1 and found[0][0] == 0, (pattern, r.stderr)
    assert not any(t.startswith(("spare promoted", "no spare left for")) for _, t in lines), r.stderr
