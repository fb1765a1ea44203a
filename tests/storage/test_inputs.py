"""The input store survivors read a dead process's operands from: round trip, atomicity, damage detection."""

from __future__ import annotations

import errno
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
    with pytest.raises(StorageError, match="not inside") as err:  # a failed save, as a full disk is
        store.save("call/a.0", np.ones(2))
    assert err.value.errno == errno.ELOOP and isinstance(err.value.__cause__, UnsafePathError)
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


def test_a_recycled_file_is_rewritten_in_place_and_reads_as_a_new_one(tmp_path):
    store = CheckpointFileStore(tmp_path, fsync=False)
    assert store.supports_recycle
    rng = np.random.default_rng(2)
    first = np.asfortranarray(rng.standard_normal((40, 30)))
    store.save("call-1/b.0", first)
    inode = (tmp_path / "call-1" / "b.0.ftk").stat().st_ino
    store.retire("call-1/b.0", "ops/spare-b.0")
    with pytest.raises(StorageError, match="nothing saved"):
        store.load("call-1/b.0")
    with pytest.raises(FormatError, match="saved under 'call-1/b.0'"):  # a spare is never read as good
        store.load("ops/spare-b.0")
    second = np.asfortranarray(rng.standard_normal((40, 30)))
    store.save("call-22/b.0", second, recycle="ops/spare-b.0")
    path = tmp_path / "call-22" / "b.0.ftk"
    assert path.stat().st_ino == inode  # the same file, its pages rewritten: nothing allocated or freed
    assert not (tmp_path / "ops" / "spare-b.0.ftk").exists()
    assert np.array_equal(store.load("call-22/b.0"), second)
    # smaller than the file it took over (and a longer key: the header grew): the old tail is cut
    store.retire("call-22/b.0", "ops/spare-b.0")
    third = np.arange(6.0)
    store.save("call-333/b.0", third, recycle="ops/spare-b.0")
    path = tmp_path / "call-333" / "b.0.ftk"
    assert path.stat().st_ino == inode and path.stat().st_size == read_header(path).file_size
    assert np.array_equal(store.load("call-333/b.0"), third)
    assert sorted(p.name for p in (tmp_path / "call-333").iterdir()) == ["b.0.ftk"]  # no temporary left
    store.save("call-4/b.0", third, recycle="ops/nothing-here")  # no spare: a new file
    assert np.array_equal(store.load("call-4/b.0"), third)
    store.retire("call-9/b.0", "ops/spare-b.0")  # nothing saved under the key: nothing done


def test_a_symlink_as_the_spare_is_never_written_through(tmp_path):
    root = tmp_path / "store"
    (root / "ops").mkdir(parents=True)
    inside_file = root / "ops" / "other.bin"
    inside_file.write_bytes(b"precious")
    (root / "ops" / "spare-b.0.ftk").symlink_to(inside_file)
    store = CheckpointFileStore(root, fsync=False)
    store.save("call/b.0", np.ones(5), recycle="ops/spare-b.0")  # a new file, the link left alone
    assert inside_file.read_bytes() == b"precious"
    assert np.array_equal(store.load("call/b.0"), np.ones(5))
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"precious")
    (root / "ops" / "spare-b.1.ftk").symlink_to(outside)
    with pytest.raises(StorageError, match="not inside") as err:
        store.save("call/b.1", np.ones(5), recycle="ops/spare-b.1")
    assert err.value.errno == errno.ELOOP and isinstance(err.value.__cause__, UnsafePathError)
    assert outside.read_bytes() == b"precious"


WRITER = """
import sys, time
from pathlib import Path
import numpy as np
from ftkit.storage.inputs import CheckpointFileStore
root = Path(sys.argv[1])
store = CheckpointFileStore(root, fsync=False)
for i in range(1, 10**6):
    store.save(f"call-{i}/b.0", np.full((512, 1024), float(i)), recycle="ops/spare-b.0")
    if i == 2:
        (root / "started").write_text("")
    store.retire(f"call-{i}/b.0", "ops/spare-b.0")
"""


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.011, 0.03])
def test_a_writer_killed_while_recycling_never_leaves_a_key_that_reads_as_good(tmp_path, delay):
    """A process rewriting one kept 4 MiB file under new keys is SIGKILLed at some moment: every key left
    reads back exactly what was saved under it, or is refused; the spare never reads as good."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert (tmp_path / "started").exists(), "the writer did not start"
        time.sleep(delay)
        inject.kill_pid(proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    store = CheckpointFileStore(tmp_path, fsync=False)
    keys = [f"{d.name}/b.0" for d in tmp_path.glob("call-*") if (d / "b.0.ftk").exists()]
    for key in keys:
        i = int(key.split("/")[0].split("-")[1])
        assert np.array_equal(store.load(key), np.full((512, 1024), float(i))), key
    with pytest.raises((FormatError, CorruptionError, StorageError)):
        store.load("ops/spare-b.0")


def test_the_last_file_retired_from_a_directory_removes_it(tmp_path):
    store = CheckpointFileStore(tmp_path, fsync=False)
    store.save("call/b.0", np.ones(3))
    store.save("call/b.1", np.ones(3))
    store.retire("call/b.1", "ops/spare-b.1")
    assert (tmp_path / "call").is_dir()  # rank 0's file is still there
    store.retire("call/b.0", "ops/spare-b.0")
    assert not (tmp_path / "call").exists()
    assert sorted(p.name for p in (tmp_path / "ops").iterdir()) == ["spare-b.0.ftk", "spare-b.1.ftk"]


def test_recycling_on_a_full_disk(small_disk):
    """On a disk that another writer has filled: a save over a kept file of the same size needs no new space
    and succeeds; one that needs more fails with a StorageError naming ENOSPC, saves nothing under its key
    and leaves no temporary file behind (the spare it took over is gone: the next save makes a new file)."""
    root = small_disk(256 * 1024)
    store = CheckpointFileStore(root, fsync=False)
    first = np.arange(4096.0)  # 32 KiB
    store.save("call-1/b.0", first)
    store.retire("call-1/b.0", "ops/spare-b.0")
    with open(root / "filler", "wb", buffering=0) as fh:  # the rest of the disk, to the last byte it takes
        with pytest.raises(OSError) as full:
            while True:
                fh.write(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC
    second = first[::-1].copy()
    store.save("call-2/b.0", second, recycle="ops/spare-b.0")  # its own pages, rewritten
    assert np.array_equal(store.load("call-2/b.0"), second)
    store.retire("call-2/b.0", "ops/spare-b.0")
    with pytest.raises(StorageError) as err:
        store.save("call-3/b.0", np.arange(40960.0), recycle="ops/spare-b.0")  # 320 KiB: more than it had
    assert "No space left on device" in str(err.value)
    with pytest.raises(StorageError, match="nothing saved"):
        store.load("call-3/b.0")
    left = [p.name for p in root.rglob("*") if p.is_file() and p.name != "filler"]
    assert left == [], left
