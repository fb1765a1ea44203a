"""Scripts can read ``ftkit ls/verify/rebuild/export``: ``--json``, exit codes 0/1/2, the job's status from
the run lock, moved runs, where ``ls`` looks, and progress only on a terminal (issue 36).

Runs are built without MPI through the storage API (real files, real manifest); commands run in process
through ``ftkit.cli.main`` or as real processes (the terminal test, on a pseudo-terminal).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest

from ftkit.cli import main
from ftkit.inject import corrupt_file
from ftkit.storage.levels import make_level
from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile, write_manifest

NODES = [0, 0, 1, 1]


def _make_run(root: Path, levels: tuple[int, ...] = (4, 1), n: int = 1000) -> Path:
    """A 4-rank run of checkpoint ids 1, 2, ... each complete at the level of ``levels`` at that position."""
    local, glbl, meta = root / "local", root / "global", root / "meta"
    meta.mkdir(parents=True)
    m = Manifest(exec_id="run9", nranks=4, created=1.0,
                 dirs={"ckpt_dir": str(local), "glbl_dir": str(glbl), "meta_dir": str(meta)})
    for cid, level in enumerate(levels, start=1):
        lv = make_level(level, local, glbl, "run9", NODES)
        files = []
        for r in range(4):
            info = lv.write(cid, r, [("u", np.full(n, float(r + cid)))], level=level, nranks=4)
            files.append(RankFile(info.size, info.digest))
        m.checkpoints.append(CheckpointEntry(id=cid, seq=cid, level=level, time=1.0, levels={level: True},
                                             nodes=NODES, files=files))
    write_manifest(meta, m)
    return root


def _json(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out   # one JSON object, nothing else on stdout
    doc = json.loads(out[0])
    assert doc["exit_code"] == code
    return code, doc


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.ftk") if p.is_file())


def test_ls_and_verify_json_match_the_files(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    code, doc = _json(capsys, "ls", str(root))
    assert code == 0 and doc["command"] == "ls"
    run = doc["run"]
    assert (run["exec_id"], run["nranks"], run["status"]) == ("run9", 4, "ended")
    assert Path(run["manifest"]) == root / "meta" / "manifest.json"
    assert [(c["id"], c["level"], c["levels_complete"], c["ranks"], c["complete"], c["problems"])
            for c in doc["checkpoints"]] == [(1, 4, [4], 4, True, []), (2, 1, [1], 4, True, [])]
    for c in doc["checkpoints"]:   # the sizes listed are the sizes of the files on disk
        lv = make_level(c["level"], root / "local", root / "global", "run9", NODES)
        assert c["bytes"] == sum(lv.path(c["id"], r).stat().st_size for r in range(4))
    code, doc = _json(capsys, "verify", str(root / "meta"))
    on_disk = _files(root)
    assert code == 0 and doc["damaged"] == [] and doc["files"] == len(on_disk) == 8
    assert doc["bytes"] == sum(p.stat().st_size for p in on_disk)
    bad = make_level(4, root / "local", root / "global", "run9", NODES).path(1, 2)
    corrupt_file(bad, -3)
    code, doc = _json(capsys, "verify", str(root))
    assert code == 1 and len(doc["damaged"]) == 1
    assert doc["damaged"][0]["checkpoint"] == 1 and str(bad) in doc["damaged"][0]["problem"]
    bad.unlink()
    code, doc = _json(capsys, "ls", str(root))
    assert code == 1 and doc["checkpoints"][0]["complete"] is False
    problem = doc["checkpoints"][0]["problems"][0]
    assert "missing" in problem and str(bad) in problem


@pytest.mark.parametrize("command", ["ls", "verify", "rebuild", "export"])
def test_exit_codes_missing_empty_damaged_healthy(tmp_path, capsys, command):
    extra = ["--to", "npy", str(tmp_path / "out")] if command == "export" else []
    assert main([command, str(tmp_path / "does" / "not" / "exist"), *extra]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([command, str(empty), *extra]) == 2
    no_ckpt = tmp_path / "noc"
    (no_ckpt / "meta").mkdir(parents=True)
    write_manifest(no_ckpt / "meta", Manifest(exec_id="r0", nranks=2, created=1.0))
    assert main([command, str(no_ckpt), *extra]) == (0 if command == "ls" else 2)   # ls lists nothing
    healthy = _make_run(tmp_path / "ok")
    assert main([command, str(healthy), *extra]) == 0
    damaged = _make_run(tmp_path / "bad")
    for p in _files(damaged):
        corrupt_file(p, -1)   # every file: whichever copy export reads is damaged
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    # ls checks sizes only (the corruption keeps them): exit 0; the others read every byte
    assert main([command, str(damaged), *extra]) == (0 if command == "ls" else 1)
    capsys.readouterr()
    if command in ("verify", "rebuild", "export"):
        code, doc = _json(capsys, command, str(tmp_path / "nowhere"), *extra)
        assert code == 2 and "no such file" in doc["error"]


def test_verify_of_a_directory_without_runs_is_2_and_looks_only_where_runs_are(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    deep = tmp_path / "other" / "a" / "b" / "c" / "d"   # a run's files, deeper than any run layout
    shutil.copytree(root / "local", deep)
    (root / "meta" / "manifest.json").unlink()
    code, doc = _json(capsys, "ls", str(tmp_path / "other"))
    assert code == 2 and doc["files"] == 0
    code, doc = _json(capsys, "verify", str(tmp_path / "other"))
    assert code == 2 and doc["files"] == 0
    # DIR as a run directory, a ckpt_dir, a glbl_dir: the files are found
    for d, count in ((root, 8), (root / "local", 4), (root / "global", 4)):
        code, doc = _json(capsys, "ls", str(d))
        assert code == 0 and sum(c["ranks"] for c in doc["checkpoints"]) == count, d
    code, doc = _json(capsys, "verify", str(root))
    assert code == 0 and doc["files"] == 8


def test_rebuild_reports_every_checkpoint_it_cannot_repair(tmp_path, capsys):
    root = _make_run(tmp_path / "r", levels=(4, 1, 1))
    code, doc = _json(capsys, "rebuild", str(root))
    assert code == 0 and doc["failed_checkpoints"] == [] and doc["unrepaired"] == []
    for cid, level in ((1, 4), (3, 1)):
        corrupt_file(make_level(level, root / "local", root / "global", "run9", NODES).path(cid, 0), -2)
    code, doc = _json(capsys, "rebuild", str(root))
    assert code == 1 and doc["failed_checkpoints"] == [1, 3]
    assert [u["checkpoint"] for u in doc["unrepaired"]] == [3, 1]   # newest first
    assert all("rank 0" in u["problems"][0] and "checksum" in u["problems"][0] for u in doc["unrepaired"])
    assert main(["rebuild", str(root)]) == 1
    out = capsys.readouterr().out
    assert "checkpoint 1: CANNOT REPAIR" in out and "checkpoint 3: CANNOT REPAIR" in out
    assert "could not repair 1, 3" in out


def test_export_json(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    out = tmp_path / "out"
    code, doc = _json(capsys, "export", str(root), "--to", "npy", str(out))
    assert code == 0 and doc["out"] == str(out) and doc["format"] == "npy"
    assert doc["attributes"]["checkpoint_id"] == 2 and doc["attributes"]["run_id"] == "run9"
    assert doc["bytes"] == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert doc["datasets"] == 4   # 'u' without a layout: one dataset per rank
    assert np.array_equal(np.load(out / "u.rank3.npy"), np.full(1000, 5.0))


def test_a_copied_run_is_read_at_its_new_place(tmp_path, capsys):
    """The copy is read, not the original it still records: damage in the copy is found, through the
    copy's meta_dir, a config pointing at the copy, or --root."""
    orig = _make_run(tmp_path / "orig")
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(orig, copy)
    assert main(["verify", str(copy)]) == 0
    capsys.readouterr()
    bad = make_level(1, copy / "local", copy / "global", "run9", NODES).path(2, 3)
    corrupt_file(bad, -1)
    code, doc = _json(capsys, "verify", str(copy))
    assert code == 1 and str(bad) in doc["damaged"][0]["problem"]
    assert doc["run"]["ckpt_dir"] == str(copy / "local")
    assert main(["verify", str(orig)]) == 0   # the original is intact
    capsys.readouterr()
    cfg = tmp_path / "copy.ini"
    cfg.write_text(f"[basic]\nckpt_dir = {copy / 'local'}\nglbl_dir = {copy / 'global'}\n"
                   f"meta_dir = {copy / 'meta'}\n")
    code, doc = _json(capsys, "verify", str(cfg))
    assert code == 1 and str(bad) in doc["damaged"][0]["problem"]
    code, doc = _json(capsys, "ls", str(cfg))
    assert code == 0 and doc["run"]["glbl_dir"] == str(copy / "global")
    # --root: the run's directories read under another root, whatever DIR's manifest records
    moved = tmp_path / "moved"
    shutil.copytree(copy, moved)
    code, doc = _json(capsys, "verify", str(orig / "meta"), "--root", str(moved))
    assert code == 1 and str(moved / bad.relative_to(copy)) in doc["damaged"][0]["problem"]
    bad.unlink()
    code, doc = _json(capsys, "ls", str(copy))
    assert code == 1 and str(bad) in doc["checkpoints"][1]["problems"][0]


def _lock(meta: Path, pid: int, age: float = 0.0, host: str | None = None) -> None:
    import socket

    path = meta / "ftkit.lock"
    path.write_text(json.dumps({"host": host or socket.gethostname(), "pid": pid, "started": 1.0,
                                "token": "t"}))
    now = time.time()
    os.utime(path, (now - age, now - age))


def test_ls_status_comes_from_the_run_lock(tmp_path, capsys):
    from ftkit.checkpoint import runlock
    from ftkit.storage import runactivity

    assert (runactivity.LOCK_NAME, runactivity.STALE_AFTER_S) == (runlock.LOCK_NAME, runlock.STALE_AFTER_S)
    root = _make_run(tmp_path / "r")
    meta = root / "meta"
    assert _json(capsys, "ls", str(root))[1]["run"]["status"] == "ended"   # no lock: exited
    assert "status ended (no run lock" in (main(["ls", str(root)]), capsys.readouterr().out)[1]
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        _lock(meta, live.pid)
        run = _json(capsys, "ls", str(root))[1]["run"]
        assert run["status"] == "running" and f"pid {live.pid}" in run["status_detail"]
        _lock(meta, live.pid, age=runactivity.STALE_AFTER_S + 60)   # no heartbeat for too long: killed
        run = _json(capsys, "ls", str(root))[1]["run"]
        assert run["status"] == "ended" and "last heartbeat" in run["status_detail"]
        _lock(meta, live.pid, host="another-host")   # a live heartbeat from another host
        assert _json(capsys, "ls", str(root))[1]["run"]["status"] == "running"
    finally:
        live.communicate(b"", timeout=60)
    _lock(meta, live.pid)   # the owner's process is gone: killed
    run = _json(capsys, "ls", str(root))[1]["run"]
    assert run["status"] == "ended" and "gone" in run["status_detail"]


def _on_terminal(argv: list[str]) -> str:
    """Run ``python -m ftkit argv`` with stdout and stderr on a pseudo-terminal; return what it shows."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))   # a terminal's size
    proc = subprocess.Popen([sys.executable, "-m", "ftkit", *argv], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:   # EIO: the process closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        proc.kill()
        proc.wait(timeout=60)
    return out.decode(errors="replace")


def _json_of(argv: list[str]) -> dict:
    """``python -m ftkit argv`` on a pseudo-terminal with ``--json``: its JSON object (nothing else shown)."""
    return json.loads(_on_terminal(argv).strip())


def test_progress_on_a_terminal_only(tmp_path):
    root = _make_run(tmp_path / "r", n=300_000)
    shown = _on_terminal(["verify", str(root)])
    assert "verify" in shown and "files" in shown and "B/s" in shown, shown
    assert "verified 8 file(s): 0 damaged" in shown
    shown = _on_terminal(["export", str(root), "--to", "npy", str(tmp_path / "o1")])
    assert "export" in shown and "B/s" in shown and "exported checkpoint 2" in shown, shown
    quiet = _on_terminal(["verify", str(root), "--json"])   # --json: the JSON object only
    assert "B/s" not in quiet and json.loads(quiet.strip())["files"] == 8, quiet
    piped = subprocess.run([sys.executable, "-m", "ftkit", "verify", str(root)], capture_output=True,
                           text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout == "verified 8 file(s): 0 damaged\n"
    shown = _on_terminal(["flush", str(root)])   # checkpoint 2 is at L1 only: its 4 files are copied to L4
    assert "flush" in shown and "/4 files" in shown and "B/s" in shown and "level 4 committed" in shown, shown
    assert _json_of(["flush", str(root), "--json"])["result"] == "already"   # done, and no bar with --json


def test_doctor_and_config_check_json(tmp_path):
    cfg = tmp_path / "c.ini"
    cfg.write_text(f"[basic]\nckpt_l1 = 3\nmeta_dir = {tmp_path / 'meta'}\nverbosity = 1\nbogus = 2\n")
    r = subprocess.run([sys.executable, "-m", "ftkit", "config", "check", str(cfg), "--json"],
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 == doc["exit_code"] and doc["loads"] is True and doc["errors"] == []
    keys = {k["key"]: k for k in doc["keys"]}
    assert (keys["ckpt_l1"]["status"], keys["ckpt_l1"]["uses"], keys["ckpt_l1"]["line"]) == ("used", "3", 2)
    assert keys["bogus"]["status"] == "unknown" and keys["meta_dir"]["uses"] == str(tmp_path / "meta")
    cfg.write_text("[basic]\nckpt_l1 = soon\n")
    r = subprocess.run([sys.executable, "-m", "ftkit", "config", "check", str(cfg), "--json"],
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["loads"] is False and "soon" in doc["keys"][0]["what"]
    r = subprocess.run([sys.executable, "-m", "ftkit", "doctor", "--config", str(cfg), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    doc = json.loads(r.stdout)
    assert r.returncode == 1 == doc["exit_code"] and any("configuration" in p for p in doc["problems"])
    assert doc["ranks"] == 1 and doc["python"]["executable"] == sys.executable
    cfg.write_text(f"[basic]\nckpt_dir = {tmp_path / 'l'}\nglbl_dir = {tmp_path / 'g'}\n")
    r = subprocess.run([sys.executable, "-m", "ftkit", "doctor", "--config", str(cfg), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["problems"] == []
    assert doc["directories"]["glbl_dir"]["path"] == str(tmp_path / "g")
    assert doc["directories"]["glbl_dir"]["exists"] is False
