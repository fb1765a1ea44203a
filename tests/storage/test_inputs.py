"""The input store survivors read a dead process's operands from: round trip, atomicity, damage detection."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ftkit import inject
from ftkit.errors import CorruptionError, FormatError, StorageError, UnsafePathError
from ftkit.storage.format.container import read_header
from ftkit.storage.inputs import CheckpointFileStore, open_store


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["float64", "int32", "complex128"])
def test_round_trip_keeps_values_shape_and_order(tmp_path, order, dtype):
    store = CheckpointFileStore(tmp_path, fsync=False)
    a = np.asarray(np.arange(24).reshape(4, 6), dtype=dtype, order=order) * 3
    store.save("call/a.3", a)
    b = store.load("call/a.3")
    assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
    assert b.flags.f_contiguous == (order == "F") or a.ndim < 2
    assert [p.name for p in (tmp_path / "call").iterdir()] == ["a.3.ftk"]  # no temporary left


def test_empty_and_overwrite(tmp_path):
    store = CheckpointFileStore(tmp_path)
    store.save("k", np.zeros((0, 5)))
    assert store.load("k").shape == (0, 5)
    store.save("k", np.ones(3))
    assert store.load("k").tolist() == [1.0, 1.0, 1.0]


def test_damage_is_detected(tmp_path):
    store = CheckpointFileStore(tmp_path)
    store.save("x/b.0", np.random.default_rng(0).standard_normal((8, 8)))
    inject.corrupt_file(tmp_path / "x" / "b.0.ftk", offset=-5)
    with pytest.raises(CorruptionError, match="checksum"):
        store.load("x/b.0")
    store.save("x/b.1", np.ones((8, 8)))
    inject.truncate_file(tmp_path / "x" / "b.1.ftk", (tmp_path / "x" / "b.1.ftk").stat().st_size - 8)
    with pytest.raises(FormatError, match="truncated"):
        store.load("x/b.1")
    (tmp_path / "x" / "b.2.ftk").write_bytes(b"\x80\x04pickle?" * 8)
    with pytest.raises(FormatError, match="magic"):
        store.load("x/b.2")
    with pytest.raises(StorageError, match="nothing saved"):
        store.load("x/b.9")


def test_a_file_moved_to_another_key_is_refused(tmp_path):
    store = CheckpointFileStore(tmp_path)
    store.save("call/a.0", np.ones(4))
    store.save("call/a.1", np.zeros(4))
    os.replace(tmp_path / "call" / "a.0.ftk", tmp_path / "call" / "a.1.ftk")
    with pytest.raises(FormatError, match="saved under 'call/a.0'"):
        store.load("call/a.1")


def test_bad_keys_and_dtypes_are_rejected(tmp_path):
    store = CheckpointFileStore(tmp_path)
    for key in ("", "../escape", "a/./b", "a/../../b", "a b"):
        with pytest.raises(StorageError, match="invalid store key"):
            store.save(key, np.ones(1))
    with pytest.raises(StorageError, match="dtype"):
        store.save("o", np.array([object()]))


def test_a_symlink_leading_out_of_the_store_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "store"
    root.mkdir()
    (root / "call").symlink_to(outside, target_is_directory=True)
    store = CheckpointFileStore(root)
    with pytest.raises(UnsafePathError):
        store.save("call/a.0", np.ones(2))
    assert not list(outside.iterdir())


def test_remove_prefix(tmp_path):
    store = CheckpointFileStore(tmp_path)
    store.save("call/a.0", np.ones(2))
    store.save("call/b.0", np.ones(2))
    store.remove("call")
    assert not (tmp_path / "call").exists()
    store.remove("call")  # missing is fine


@pytest.mark.parametrize("order", ["C", "F"])
def test_checkpoint_file_store_round_trip_and_damage(tmp_path, order):
    store = open_store(tmp_path, rank=3, nranks=4)
    assert isinstance(store, CheckpointFileStore)
    a = np.asarray(np.random.default_rng(1).standard_normal((5, 7)), order=order)
    store.save("call/a.3", a)
    b = store.load("call/a.3")
    assert np.array_equal(a, b) and b.flags.f_contiguous == (order == "F")
    header = read_header(tmp_path / "call" / "a.3.ftk")  # an ordinary ftkit checkpoint file
    assert header.rank == 3 and header.level == 4 and header.meta["key"] == "call/a.3"
    inject.corrupt_file(tmp_path / "call" / "a.3.ftk", offset=-3)
    with pytest.raises(CorruptionError):
        store.load("call/a.3")
    with pytest.raises(StorageError, match="nothing saved"):
        store.load("call/b.0")
    store.remove("call")
    assert not (tmp_path / "call").exists()
