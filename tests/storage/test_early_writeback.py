"""Early writeback (:func:`start_writeback`, ``AtomicWriter(writeback=...)``): a writer whose fsync runs in
the call hands each written piece to the device at once; one whose fsync is deferred leaves its bytes in the
page cache. Observed through the kernel's own accounting: bytes still dirty when a file is deleted are
counted as ``cancelled_write_bytes`` in ``/proc/self/io``; bytes already handed to the device are not."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from ftkit.storage._fsutil import WRITEBACK_MIN_BYTES, AtomicWriter, start_writeback
from ftkit.storage._writeback import Writeback
from ftkit.storage.pending import start_write

PIECE = 4 << 20


def _cancelled() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("cancelled_write_bytes:"))


def _dirty_bytes_dropped(path, writeback: bool | None) -> int:
    """Write two pieces through an AtomicWriter, abort it (the temporary file is deleted): the bytes that
    were still dirty, as the kernel counts them."""
    w = AtomicWriter(path, writeback=writeback)
    w.pwrite(os.urandom(PIECE), 0)
    w.pwrite(os.urandom(PIECE), PIECE)
    before = _cancelled()
    w.abort()
    return _cancelled() - before


def test_start_writeback_works_on_a_file_and_says_no_where_it_cannot(tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    r, w = os.pipe()
    try:
        os.write(fd, b"x" * WRITEBACK_MIN_BYTES)
        assert start_writeback(fd, 0, WRITEBACK_MIN_BYTES) is True
        assert start_writeback(w, 0, 1) is False              # a pipe: ESPIPE, reported, not raised
    finally:
        for x in (fd, r, w):
            os.close(x)


def test_a_durable_writer_hands_its_pieces_to_the_device_and_a_deferred_one_does_not(tmp_path):
    kept = _dirty_bytes_dropped(tmp_path / "deferred.bin", writeback=False)
    if kept == 0:
        pytest.skip(f"{tmp_path}: this file system does not account dirty page-cache bytes (e.g. tmpfs)")
    assert kept >= PIECE, kept                                 # deferred: the bytes were still dirty
    handed = _dirty_bytes_dropped(tmp_path / "durable.bin", writeback=None)   # the default, fsync on
    assert handed < WRITEBACK_MIN_BYTES, handed               # already on their way to the disk
    assert os.listdir(tmp_path) == []


def test_early_writeback_changes_nothing_of_what_is_committed(tmp_path):
    data = os.urandom(3 * PIECE + 123)
    with AtomicWriter(tmp_path / "a" / "f.bin") as w:          # default: fsync and early writeback
        w.pwrite(data[:PIECE], 0)
        w.pwrite(data[PIECE:], PIECE)
        w.pwrite(b"head", 0)                                  # a small rewrite (below the threshold)
    assert (tmp_path / "a" / "f.bin").read_bytes() == b"head" + data[4:]
    assert os.listdir(tmp_path / "a") == ["f.bin"]
    no_sync = AtomicWriter(tmp_path / "b.bin", fsync=False)   # format tests: no fsync, no writeback
    assert no_sync.writeback is False
    no_sync.abort()


def test_one_kept_writeback_thread_serves_every_writer_and_a_refusal_is_not_an_error(tmp_path):
    # Issue 37: a thread started per file cost its writer 4-13 ms on a loaded machine (Thread.start waits
    # for the new thread to be scheduled); the process's one writeback thread is started once and kept.
    def helpers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "ftkit-writeback"]

    data = [os.urandom(PIECE) for _ in range(3)]
    for i, piece in enumerate(data):
        w = AtomicWriter(tmp_path / f"f{i}.bin")
        w.pwrite(piece, 0)
        w.commit()                                           # close() waited for this file's submissions
        assert (tmp_path / f"f{i}.bin").read_bytes() == piece
    kept = helpers()
    assert len(kept) == 1 and kept[0].is_alive()             # one thread for the three files, still there
    r, wfd = os.pipe()
    wb = Writeback(wfd)
    wb.add(0, PIECE)                                         # a pipe: the system refuses, quietly
    wb.close()                                               # returns once the refusal was seen
    assert wb.working is False
    wb.add(0, PIECE)                                         # refused once: nothing more is queued
    wb.close()
    assert helpers() == kept                                 # the same thread serves on
    os.close(r)
    os.close(wfd)


def test_a_file_whose_fsync_runs_beside_the_next_step_is_not_written_back_early(tmp_path):
    # start_write (inline L2/L3): its fsync thread starts right after the writes and overlaps the exchange;
    # the writes themselves leave the bytes in the page cache (early writeback competed with them there).
    arr = np.frombuffer(os.urandom(2 * PIECE), np.uint8)
    pending = start_write(tmp_path / "f.ftk", [("a", arr)], rank=0, level=2, ckpt_id=1, exec_id="x", nranks=1)
    assert pending._writer.writeback is False and pending._writer._wb is None
    pending.finish()
    assert (tmp_path / "f.ftk").stat().st_size > 2 * PIECE


def test_only_whole_pages_are_handed_over_each_once_and_never_the_header_rewritten_at_the_end():
    # Issue 37: a checkpoint file's pieces start after its header, off page boundaries; handing each piece's
    # own range over sent the page shared with the next piece half written (the fsync wrote it again) and the
    # header's page, rewritten with the digests at the end, too. The ranges planned for the writes of
    # write_uncommitted (header, three 16 MiB pieces, the header again) and for writes elsewhere in a file.
    page, piece, head = os.sysconf("SC_PAGE_SIZE"), 16 << 20, 309
    wb = Writeback(-1)                                        # plan() touches no descriptor
    spans = [wb.plan(0, head)] + [wb.plan(head + k * piece, piece) for k in range(3)] + [wb.plan(0, head)]
    assert spans[0] is None and spans[-1] is None              # the header's page: left to the fsync
    ranges = [s for s in spans if s is not None]
    assert ranges == [(page, piece - page), (piece, piece), (2 * piece, piece)]
    assert all(start % page == 0 and length % page == 0 for start, length in ranges)
    # the last, partial page of the last piece: left to the fsync too (its bytes are all there by then)
    lone = Writeback(-1)                                      # a write that continues nothing: its own pages
    assert lone.plan(5 * piece + 1, piece) == (5 * piece + page, piece - page)
    assert lone.plan(5 * piece + 1 + piece, WRITEBACK_MIN_BYTES // 2) is None   # small: left to the fsync
