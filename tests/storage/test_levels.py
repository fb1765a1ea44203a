"""Conformance kit for the storage-level contract: every level is a short subclass of LevelTests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ftkit.errors import CheckpointNotFoundError, CorruptionError, StorageError
from ftkit.inject import corrupt_file
from ftkit.storage.groupcode.erasure import EncodedLevel
from ftkit.storage.groupcode.partner_copy import PartnerLevel
from ftkit.storage.levels import LEVEL_CLASSES, make_level
from ftkit.storage.placement.global_dir import PFSLevel
from ftkit.storage.placement.node_local import LocalLevel

NODES = [0, 0, 1, 1]


class LevelTests:
    """What every StorageLevel must do."""

    level: int

    def make(self, tmp_path):
        return make_level(self.level, tmp_path / "local", tmp_path / "global", "run1", NODES,
                          chunk_bytes=4096)

    def arrays(self, rank):
        return [("u", np.arange(3000.0) + rank), ("step", np.array([rank], dtype=np.int64))]

    def test_write_verify_read_remove(self, tmp_path):
        lv = self.make(tmp_path)
        assert lv.level == self.level
        for rank in range(len(NODES)):
            info = lv.write(7, rank, self.arrays(rank), level=self.level, nranks=len(NODES))
            assert lv.exists(7, rank)
            h = lv.verify(7, rank, info.digest)
            assert h.rank == rank and h.ckpt_id == 7 and h.exec_id == "run1"
            u = np.zeros(3000)
            step = np.zeros(1, dtype=np.int64)
            lv.read_into(7, rank, {"u": u, "step": step})
            assert np.array_equal(u, np.arange(3000.0) + rank) and step[0] == rank
        assert lv.list_ids() == [7]
        for rank in range(len(NODES)):
            lv.remove(7, rank)
            assert not lv.exists(7, rank)
            lv.remove(7, rank)   # removing twice is fine
        assert lv.list_ids() == []
        assert not list(tmp_path.rglob("*.ftk"))

    def test_put_file_copies_byte_identically(self, tmp_path):
        lv = self.make(tmp_path)
        other_level = 1 if self.level != 1 else 4
        other = make_level(other_level, tmp_path / "local", tmp_path / "global", "run1", NODES)
        info = other.write(2, 1, self.arrays(1), level=1, nranks=4)
        lv.put_file(2, 1, other.path(2, 1))
        assert lv.path(2, 1).read_bytes() == other.path(2, 1).read_bytes()
        assert lv.verify(2, 1, info.digest).digest == info.digest

    def test_put_file_links_only_when_asked(self, tmp_path):
        """``link=True`` on one file system: the same bytes under a second name (no second write); the
        default stays an independent copy, whose bytes a later change of the source does not reach."""
        lv = self.make(tmp_path)
        other = make_level(1 if self.level != 1 else 4, tmp_path / "local", tmp_path / "global", "run1",
                           NODES)
        info = other.write(2, 1, self.arrays(1), level=1, nranks=4)
        src = other.path(2, 1)
        assert lv.put_file(2, 1, src, link=True) == src.stat().st_size
        assert lv.path(2, 1).stat().st_ino == src.stat().st_ino and src.stat().st_nlink == 2
        assert not [p for p in lv.path(2, 1).parent.iterdir() if p.name.endswith(".tmp")]
        src.unlink()                              # as finalize() does: the linked name keeps the bytes
        assert lv.verify(2, 1, info.digest).digest == info.digest
        info = other.write(3, 1, self.arrays(1), level=1, nranks=4)
        lv.put_file(3, 1, other.path(3, 1))
        assert lv.path(3, 1).stat().st_ino != other.path(3, 1).stat().st_ino

    def test_put_file_link_onto_a_planted_directory_fails_cleanly(self, tmp_path):
        """A directory planted at the final name: the link raises StorageError naming it, leaves no temporary
        name behind, and the source keeps its bytes and its one name."""
        lv = self.make(tmp_path)
        other = make_level(1 if self.level != 1 else 4, tmp_path / "local", tmp_path / "global", "run1",
                           NODES)
        info = other.write(2, 1, self.arrays(1), level=1, nranks=4)
        lv.path(2, 1).mkdir(parents=True)
        (lv.path(2, 1) / "x").write_text("occupied")
        with pytest.raises(StorageError, match=f"cannot link .* as {lv.path(2, 1)}"):
            lv.put_file(2, 1, other.path(2, 1), link=True)
        assert not [p for p in lv.path(2, 1).parent.iterdir() if p.name.endswith(".tmp")]
        assert other.path(2, 1).stat().st_nlink == 1
        assert other.verify(2, 1, info.digest).digest == info.digest

    def test_put_file_copies_when_it_cannot_link(self, tmp_path, small_disk):
        """The source on another file system (a real tmpfs): ``link=True`` falls back to a copy."""
        lv = self.make(tmp_path)
        other = make_level(1 if self.level != 1 else 4, small_disk(1 << 20) / "local",
                           small_disk(1 << 20) / "global", "run1", NODES)
        info = other.write(2, 1, self.arrays(1), level=1, nranks=4)
        lv.put_file(2, 1, other.path(2, 1), link=True)
        assert other.path(2, 1).stat().st_nlink == 1
        assert lv.path(2, 1).read_bytes() == other.path(2, 1).read_bytes()
        assert lv.verify(2, 1, info.digest).digest == info.digest
        with pytest.raises(CheckpointNotFoundError):
            lv.put_file(5, 1, other.path(5, 1), link=True)

    def test_damage_and_absence_are_reported(self, tmp_path):
        lv = self.make(tmp_path)
        info = lv.write(1, 0, self.arrays(0), level=self.level, nranks=4)
        with pytest.raises(CheckpointNotFoundError):
            lv.verify(1, 3)
        with pytest.raises(CorruptionError):
            lv.verify(1, 0, expect_digest="0" * 16)
        corrupt_file(lv.path(1, 0), -5)
        with pytest.raises(CorruptionError):
            lv.verify(1, 0, info.digest)


class TestLocalLevel(LevelTests):
    level = 1

    def test_files_are_in_their_node_directory(self, tmp_path):
        lv = self.make(tmp_path)
        assert lv.path(3, 2) == tmp_path / "local" / "node1" / "run1" / "l1" / "ckpt3" / "rank2.ftk"
        assert lv.run_dirs() == [tmp_path / "local" / "node0" / "run1", tmp_path / "local" / "node1" / "run1"]


class TestPFSLevel(LevelTests):
    level = 4

    def test_files_are_in_glbl_dir(self, tmp_path):
        assert self.make(tmp_path).path(3, 2) == tmp_path / "global" / "run1" / "l4" / "ckpt3" / "rank2.ftk"


class TestPartnerLevel(LevelTests):
    """L2 storage passes the kit too (a partner copy is a checkpoint file, held on the holder's node)."""

    level = 2

    def test_copies_are_held_on_the_holders_node(self, tmp_path):
        lv = self.make(tmp_path)
        assert lv.path(3, 2) == tmp_path / "local" / "node1" / "run1" / "l2" / "ckpt3" / "rank2.ftk"
        assert not lv.supports_read


def test_registry_holds_every_level():
    assert LEVEL_CLASSES[1] is LocalLevel and LEVEL_CLASSES[2] is PartnerLevel
    assert LEVEL_CLASSES[3] is EncodedLevel and LEVEL_CLASSES[4] is PFSLevel


def test_the_level_table_carries_what_callers_asked_level_numbers_for():
    from ftkit.config import Config
    from ftkit.storage import levels as table

    assert table.numbers() == (1, 2, 3, 4) and table.node_local() == (1, 2, 3)
    assert [s.number for s in table.recovery_order()] == [1, 2, 3, 4]
    assert [s.needs_groups for s in table.specs()] == [False, True, True, False]
    cfg = Config(ckpt_l1=3, ckpt_l4=9, inline_l3=0)
    assert [table.interval(cfg, n) for n in table.numbers()] == [3, 0, 0, 9]
    assert [table.inline(cfg, n) for n in table.numbers()] == [True, True, False, True]
    # Inline L4 is written from the buffers (compressed or not); with dCP or inline_l4 = 0 it is flushed
    # from L1.
    assert [table.primary_level(cfg, n) for n in table.numbers()] == [1, 1, 1, 4]
    assert table.primary_level(cfg.replace(compression="lz4"), 4) == 4
    for other in (cfg.replace(enable_dcp=1), cfg.replace(inline_l4=0)):
        assert table.primary_level(other, 4) == 1
    assert table.level_root(4, Path("/c"), Path("/g")) == Path("/g")
    assert all(table.level_root(n, Path("/c"), Path("/g")) == Path("/c") for n in table.node_local())
    with pytest.raises(StorageError, match="4 \\(parallel file system\\)"):
        table.spec(6)
