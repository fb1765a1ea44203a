"""The store contract (``ftkit.storage.placement.store``): one conformance kit, each store a short subclass
(as zarr's ``testing/store.py``), and a level's storage run on a store without local paths."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ftkit.errors import CheckpointNotFoundError, StorageError, UnsafePathError
from ftkit.storage.placement.dirstore import DirectoryStore
from ftkit.storage.placement.global_dir import PFSLevel

from ..conftest import REPO

_spec = importlib.util.spec_from_file_location("mirror_level",
                                              REPO / "tests" / "programs" / "mirror_level.py")
mirror_level = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mirror_level)


class StoreTests:
    """What every store must do; a subclass gives ``make(tmp_path)``."""

    def make(self, tmp_path):
        raise NotImplementedError

    def test_put_get_ranges_list_delete(self, tmp_path):
        s = self.make(tmp_path)
        s.put("run/l1/ckpt3/rank0.ftk", b"0123456789")
        s.put("run/l1/ckpt4/rank0.ftk", memoryview(b"abc"))
        s.barrier("run/l1/ckpt3")
        assert s.get("run/l1/ckpt3/rank0.ftk") == b"0123456789"
        assert s.get("run/l1/ckpt3/rank0.ftk", 2, 3) == b"234" and s.get("run/l1/ckpt3/rank0.ftk", 8) == b"89"
        assert s.list_dir("run/l1") == ["ckpt3", "ckpt4"] and s.list_dir("run/l1/ckpt3") == ["rank0.ftk"]
        assert s.list_dir("nothing/here") == []
        assert s.exists("run/l1/ckpt4/rank0.ftk") and not s.exists("run/l1/ckpt4/rank1.ftk")
        s.put("run/l1/ckpt4/rank0.ftk", b"new")  # replaced whole
        assert s.get("run/l1/ckpt4/rank0.ftk") == b"new"
        s.delete("run/l1/ckpt4/rank0.ftk", "run")
        s.delete("run/l1/ckpt4/rank0.ftk", "run")  # missing: fine
        assert s.list_dir("run/l1") == ["ckpt3"]
        with pytest.raises(CheckpointNotFoundError):
            s.get("run/l1/ckpt4/rank0.ftk")

    def test_a_level_keeps_checkpoint_files_in_it(self, tmp_path):
        s = self.make(tmp_path)
        level = PFSLevel(tmp_path / "root", "run1", [0, 0], store=s)
        a = np.arange(1000, dtype=np.float64)
        info = level.write(7, 1, [("a", a)], level=4, nranks=2)
        assert level.exists(7, 1) and not level.exists(7, 0) and level.list_ids() == [7]
        assert level.verify(7, 1, info.digest).rank == 1
        out = np.zeros_like(a)
        level.read_into(7, 1, {"a": out})
        assert np.array_equal(out, a)
        other = PFSLevel(tmp_path / "other", "run1", [0, 0])  # a file copied in from a directory level
        other.write(8, 0, [("a", a)], level=4, nranks=2)
        level.put_file(8, 0, other.path(8, 0))
        assert level.list_ids() == [7, 8] and level.verify(8, 0).rank == 0
        level.remove(7, 1)
        level.remove(8, 0)
        assert level.list_ids() == [] and not level.exists(7, 1)


class TestDirectoryStore(StoreTests):
    def make(self, tmp_path):
        return DirectoryStore(tmp_path / "root")

    def test_keys_are_files_inside_the_root(self, tmp_path):
        s = self.make(tmp_path)
        assert s.supports_local_path and s.local_path("a/b") == tmp_path / "root" / "a" / "b"
        (tmp_path / "outside").mkdir()
        (tmp_path / "root").mkdir()
        (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
        with pytest.raises(UnsafePathError):
            s.put("link/x", b"1")
        with pytest.raises(UnsafePathError):
            s.delete("../outside/x")
        assert not (tmp_path / "outside" / "x").exists()


class TestFlatStore(StoreTests):
    """The object-store stand-in of the fifth-level test: no local paths."""

    def make(self, tmp_path):
        return mirror_level.FlatStore(tmp_path / "objects")

    def test_it_has_no_local_paths(self, tmp_path):
        s = self.make(tmp_path)
        assert not s.supports_local_path
        with pytest.raises(StorageError, match="no local files"):
            s.local_path("a")
        with pytest.raises(StorageError):
            PFSLevel(tmp_path / "root", "run1", [0], store=s).path(1, 0)
