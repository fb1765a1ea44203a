"""A checkpoint directory's entry is made durable by the commit of the first file put in it, not when it is
created (``make_dirs(defer_parent_fsync=True)``, :meth:`DirectoryStore.prepare`: issue 37), and never left
owed once a file in it is committed, whichever way it is committed."""

from __future__ import annotations

import os

from ftkit.storage._dirsync import owed_dir_fsyncs
from ftkit.storage._fsutil import AtomicWriter, BackgroundSyncs, make_dirs
from ftkit.storage.placement.dirstore import DirectoryStore


def _owed_under(root) -> dict[str, str]:
    top = os.path.abspath(root)
    return {d: p for d, p in owed_dir_fsyncs().items() if d.startswith(top + os.sep)}


def test_prepare_owes_the_parents_fsyncs_and_the_commit_pays_them_up_the_chain(tmp_path):
    store = DirectoryStore(tmp_path)
    store.prepare("node0/run/l1/ckpt1/rank0.ftk")
    owed = _owed_under(tmp_path)
    # Every directory created owes its parent's fsync (the first one's parent already existed).
    assert owed == {str(tmp_path / "node0"): str(tmp_path),
                    str(tmp_path / "node0/run"): str(tmp_path / "node0"),
                    str(tmp_path / "node0/run/l1"): str(tmp_path / "node0/run"),
                    str(tmp_path / "node0/run/l1/ckpt1"): str(tmp_path / "node0/run/l1")}
    with AtomicWriter(tmp_path / "node0/run/l1/ckpt1/rank0.ftk") as w:
        w.pwrite(b"x" * 1000, 0)
    assert _owed_under(tmp_path) == {}, "committing the file made every new directory's entry durable"
    assert (tmp_path / "node0/run/l1/ckpt1/rank0.ftk").read_bytes() == b"x" * 1000


def test_a_second_checkpoint_directory_owes_only_its_own_entry(tmp_path):
    store = DirectoryStore(tmp_path)
    store.put("run/l1/ckpt1/rank0.ftk", b"one")
    assert _owed_under(tmp_path) == {}
    store.prepare("run/l1/ckpt2/rank0.ftk")
    assert _owed_under(tmp_path) == {str(tmp_path / "run/l1/ckpt2"): str(tmp_path / "run/l1")}
    store.put("run/l1/ckpt2/rank0.ftk", b"two")
    assert _owed_under(tmp_path) == {}


def test_a_file_synced_in_the_background_pays_the_debt_there(tmp_path):
    # L2/L3 files committed under their final names with their fsync in a background batch: the batch's
    # directory fsync pays the new directory's entry before wait() vouches for the files.
    DirectoryStore(tmp_path).prepare("l2/ckpt1/rank0.ftk")
    syncs = BackgroundSyncs()
    w = AtomicWriter(tmp_path / "l2/ckpt1/rank0.ftk")
    w.pwrite(b"y" * 1000, 0)
    w.commit(syncs)
    assert str(tmp_path / "l2/ckpt1") in _owed_under(tmp_path), "not paid before the batch runs"
    assert syncs.wait() is None
    assert _owed_under(tmp_path) == {}


def test_make_dirs_without_deferral_owes_nothing(tmp_path):
    make_dirs(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    assert _owed_under(tmp_path) == {}
