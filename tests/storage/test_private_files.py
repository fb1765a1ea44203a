"""Private files (issue 13, defect 11): random temporary names opened O_CREAT|O_EXCL|O_NOFOLLOW, files 0600
and directories 0700 by default, 0640/0750 with group access; stale temporaries of killed writers are
cleaned."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from ftkit.errors import UnsafePathError
from ftkit.failure.state import save_state_table
from ftkit.storage import _fsutil, set_group_access
from ftkit.storage.format.container import copy_file, write_file
from ftkit.storage.levels import make_level
from ftkit.storage.manifest import Manifest, write_manifest


@pytest.fixture(autouse=True)
def _umask_and_default_modes():
    old = os.umask(0o022)
    yield
    os.umask(old)
    set_group_access(False)


def _mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


def _plant_old_style_links(path, victim):
    # The names ftkit used before (predictable from the pid) and a few more guesses.
    for name in (f".{path.name}.tmp.{os.getpid()}", f".{path.name}.tmp{os.getpid()}", f".{path.name}.tmp"):
        (path.parent / name).symlink_to(victim)


def test_planted_symlinks_at_predictable_temp_names_are_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    d = tmp_path / "d"
    d.mkdir()
    targets = {"ckpt": d / "rank0.ftk", "copy": d / "copy.ftk", "manifest": d / "manifest.json",
               "state": d / "state.json"}
    for p in targets.values():
        _plant_old_style_links(p, victim)
    write_file(targets["ckpt"], [("u", np.arange(10.0))], rank=0, level=1, ckpt_id=1, exec_id="r", nranks=1)
    copy_file(targets["ckpt"], targets["copy"])
    write_manifest(d, Manifest(exec_id="r", nranks=1, created=1.0))
    save_state_table(targets["state"], np.ones((2, 2), np.int8))
    assert victim.read_bytes() == b"precious"
    for p in targets.values():
        assert p.is_file() and not p.is_symlink()


def test_a_temp_name_that_is_taken_is_never_opened(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path = tmp_path / "f.bin"
    monkeypatch.setattr(_fsutil.secrets, "token_hex", lambda n: "ab" * n)  # an attacker who guesses right
    planted = tmp_path / f".f.bin.{'ab' * 8}.tmp"
    planted.symlink_to(victim)
    with pytest.raises(FileExistsError, match="already taken"):  # O_EXCL|O_NOFOLLOW: never opened
        _fsutil.open_temp(path)
    _fsutil.atomic_write_bytes(path, b"data")  # the writer drops the planted name first (it is a stale one)
    assert victim.read_bytes() == b"precious" and path.read_bytes() == b"data" and not path.is_symlink()


def test_temp_names_are_random(tmp_path):
    a, b = _fsutil.AtomicWriter(tmp_path / "x"), _fsutil.AtomicWriter(tmp_path / "y")
    try:
        assert a.tmp.name != b.tmp.name.replace(".y.", ".x.")
        assert _fsutil.is_temp_name(a.tmp.name, "x") and _fsutil.is_temp_name(b.tmp.name, "y")
    finally:
        a.abort()
        b.abort()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("group, fmode, dmode", [(False, 0o600, 0o700), (True, 0o640, 0o750)])
def test_checkpoint_files_and_directories_are_private(tmp_path, group, fmode, dmode):
    set_group_access(group)
    for level in (1, 4):
        lv = make_level(level, tmp_path / "local", tmp_path / "global", "run1", [0, 1])
        lv.write(3, 1, [("u", np.ones(4))], level=level, nranks=2)
        p = lv.path(3, 1)
        assert _mode(p) == fmode
        for d in (p.parent, p.parent.parent, p.parent.parent.parent):
            assert _mode(d) == dmode, d
    write_manifest(tmp_path / "meta", Manifest(exec_id="run1", nranks=2, created=1.0))
    assert _mode(tmp_path / "meta" / "manifest.json") == fmode and _mode(tmp_path / "meta") == dmode


def test_stale_temporaries_of_a_killed_writer_are_ignored_then_cleaned(tmp_path):
    lv = make_level(1, tmp_path / "local", tmp_path / "global", "run1", [0])
    lv.write(1, 0, [("u", np.ones(4))], level=1, nranks=1)
    p = lv.path(1, 0)
    stale = p.with_name(f".{p.name}.{'0' * 16}.tmp")  # what a SIGKILLed writer leaves
    stale.write_bytes(b"half a file")
    assert lv.verify(1, 0).rank == 0  # readers only ever open final names
    lv.write(1, 0, [("u", np.zeros(4))], level=1, nranks=1)  # the next writer of that name cleans up
    assert not stale.exists()
    stale.write_bytes(b"half a file")
    lv.remove(1, 0)  # so does removing the checkpoint
    assert not stale.exists() and not p.exists()


def test_level_paths_never_leave_their_root(tmp_path):
    with pytest.raises(UnsafePathError):
        make_level(1, tmp_path / "local", tmp_path / "global", "..", [0])
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "node0").symlink_to(outside, target_is_directory=True)
    lv = make_level(1, tmp_path / "local", tmp_path / "global", "run1", [0])
    with pytest.raises(UnsafePathError):
        lv.write(1, 0, [("u", np.ones(4))], level=1, nranks=1)
    with pytest.raises(UnsafePathError):
        lv.remove(1, 0)
    assert not any(p.is_file() for p in outside.rglob("*"))
