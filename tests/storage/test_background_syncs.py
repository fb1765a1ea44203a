"""Background fsyncs of committed files (:class:`BackgroundSyncs`, ``AtomicWriter.commit(syncs)``): the file
is under its final name at once, every descriptor handed over is fsynced and closed, failures are reported."""

from __future__ import annotations

import errno
import os
import threading

import numpy as np
import pytest

from ftkit.storage._fsutil import AtomicWriter, BackgroundSyncs
from ftkit.storage.pending import start_write


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_commit_with_syncs_names_the_file_at_once_and_the_batch_syncs_and_closes_it(tmp_path):
    before = _open_fds()
    syncs = BackgroundSyncs()
    paths = [tmp_path / "sub" / f"f{i}.bin" for i in range(3)]
    for i, p in enumerate(paths):
        w = AtomicWriter(p)
        w.pwrite(bytes([i]) * 100_000, 0)
        w.commit(syncs)
        assert p.read_bytes() == bytes([i]) * 100_000      # readable under its final name before the fsync
    assert sorted(os.listdir(tmp_path / "sub")) == ["f0.bin", "f1.bin", "f2.bin"]   # no temporary name left
    # The fsyncs wait for seal(): they must not compete with the rest of the checkpoint call (until then the
    # batch holds every descriptor, none fsynced or closed).
    assert len(_open_fds() - before) == 3
    syncs.seal()
    assert syncs.wait() is None
    assert _open_fds() == before                          # every descriptor handed over is closed
    assert syncs.wait() is None                           # idempotent


def test_a_failed_fsync_is_reported_and_the_other_files_still_synced(tmp_path):
    before = _open_fds()
    syncs = BackgroundSyncs()
    r, w = os.pipe()                                      # fsync of a pipe fails (EINVAL)
    syncs.add(w, tmp_path)
    writer = AtomicWriter(tmp_path / "good.bin")
    writer.pwrite(b"x" * 10, 0)
    writer.commit(syncs)
    err = syncs.wait()
    os.close(r)
    assert isinstance(err, OSError) and err.errno == errno.EINVAL
    assert (tmp_path / "good.bin").read_bytes() == b"x" * 10
    assert _open_fds() == before


def test_a_file_committed_into_a_sealed_batch_is_synced_in_the_call(tmp_path):
    before = _open_fds()
    syncs = BackgroundSyncs()
    syncs.seal()
    assert syncs.wait() is None                           # nothing added: no thread, nothing to wait for
    writer = AtomicWriter(tmp_path / "late.bin")
    writer.pwrite(b"y", 0)
    writer.commit(syncs)
    assert (tmp_path / "late.bin").read_bytes() == b"y" and os.listdir(tmp_path) == ["late.bin"]
    assert _open_fds() == before
    r, w = os.pipe()
    with pytest.raises(OSError):                          # a failure is the caller's, at once
        syncs.add(w, tmp_path)
    os.close(r)
    assert _open_fds() == before


def test_one_kept_thread_runs_every_batch_and_every_l1_fsync(tmp_path):
    # Issue 37: a thread started per batch (L2/L3 copies) and per call (the L1 fsync) cost the checkpoint
    # call 4-13 ms each on a loaded machine; each kind now has one thread per process, started once and kept.
    def named(name: str) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == name]

    seen = []
    for i in range(3):
        syncs = BackgroundSyncs()
        w = AtomicWriter(tmp_path / f"c{i}.bin")
        w.pwrite(b"z" * 1000, 0)
        w.commit(syncs)
        assert syncs.wait() is None
        pending = start_write(tmp_path / f"l1_{i}.ftk", [("a", np.arange(1000))], rank=0, level=2, ckpt_id=i,
                              exec_id="x", nranks=1)
        pending.finish()
        assert (tmp_path / f"l1_{i}.ftk").stat().st_size > 8000
        seen.append((named("ftkit-redundancy-fsync"), named("ftkit-l1-fsync")))
    for threads in seen:
        assert len(threads[0]) == 1 and len(threads[1]) == 1, seen
    assert all(t == seen[0] for t in seen) and all(t[0].is_alive() for t in seen[0]), seen
