"""Early writeback: hand bytes just written to the device without waiting for them (see
:mod:`ftkit.storage._fsutil`, whose :class:`~ftkit.storage._fsutil.AtomicWriter` uses it).

Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` through ``ctypes`` (the standard library has no binding):
the dirty pages of a range are submitted now, so the disk works while the caller goes on, and a later fsync
waits only for what is left. It makes nothing durable (no metadata, no flush of the device's cache).
Submitting can itself wait when the device's queue is full, so :class:`Writeback` submits from a helper
thread: the writer goes on copying the next piece into the page cache meanwhile (measured, issue 37: done in
the writer's own thread, it delayed the L2 partner exchange that follows the L1 write). That thread is one per
process, started once and kept (:class:`KeptThread`): starting a thread per file cost its writer 4-13 ms on a
loaded machine, where ``Thread.start`` waits until the new thread is scheduled (issue 37).

Only whole pages are handed over, each once (:meth:`Writeback.plan`): a checkpoint file's pieces start after
its header, off page boundaries, and handing over each piece's range as written sent the page it shares with
the next piece to the device half written, to be written again by the fsync, and the header's page, rewritten
with the digests at the end, likewise (strace of a 256 MiB L4 call, issue 37: 17 such pages per file).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import queue
import threading
from collections.abc import Callable

__all__ = ["start_writeback", "Writeback", "WRITEBACK_MIN_BYTES", "KeptThread"]

#: Pieces smaller than this are left to the fsync (for a small file one request is as good as two).
WRITEBACK_MIN_BYTES = 1 << 20
_PAGE = mmap.PAGESIZE
_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range: list = []   # [the libc function or None], resolved on first use


def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Start writing bytes ``[offset, offset + nbytes)`` of ``fd`` to the device, without waiting for them.

    Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``: the dirty pages of the range are submitted now; it makes
    nothing durable (no metadata, no device cache flush: the fsync still does that).

    Returns
    -------
    bool
        False where it is not available (another system, or a file system refusing it): the caller stops
        asking and leaves the bytes to the fsync. Never raises.
    """
    if not _sync_file_range:
        fn = None
        try:
            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _sync_file_range.append(fn)
    fn = _sync_file_range[0]
    return fn is not None and fn(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE) == 0


class KeptThread:
    """A daemon thread of the process, started on first use and kept, running the callables queued to it one
    after the other, in order (:meth:`put`); started anew in a forked child, where the parent's thread does
    not exist. A callable must not raise (it keeps its own outcome); one that does is ignored. :meth:`put`
    returns an event set once the callable has run, so a caller waits for its own work without one of its
    own.

    Used for the early writeback here, and for the background fsyncs of
    :class:`~ftkit.storage._fsutil.BackgroundSyncs` and :mod:`ftkit.storage.pending` (each their own: an
    fsync must not hold back another kind of work): starting a thread per file or per call cost its caller
    4-13 ms on a loaded machine (issue 37).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[Callable[[], object], threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = -1

    def put(self, work: Callable[[], object]) -> threading.Event:
        """Run ``work()`` in the thread after everything queued before it; return an event set once it has run
        (raised or not)."""
        done = threading.Event()
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, args=(self._queue,), name=self.name,
                                                daemon=True)
                self._thread.start()
                self._pid = os.getpid()
            self._queue.put((work, done))
        return done

    def wait_queued(self) -> None:
        """Return once everything queued before this call has run (the thread's own work: no deadline)."""
        self.put(lambda: None).wait()

    @staticmethod
    def _run(items: queue.SimpleQueue[tuple[Callable[[], object], threading.Event]]) -> None:
        while True:
            work, done = items.get()
            try:
                work()
            except BaseException:  # noqa: BLE001, S110 - never expected; the thread must live on
                pass
            finally:
                done.set()


_SUBMITTER = KeptThread("ftkit-writeback")


class Writeback:
    """Submit written ranges of one open file to the device from the process's writeback thread, in order.

    The owner calls :meth:`add` after each write and :meth:`close` before it fsyncs or closes the descriptor
    (the thread never touches the descriptor afterwards). Not thread-safe: one writer thread.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._queued = False
        self.working = True   # False once the system refused (then :meth:`add` does nothing)
        self._end = 0         # where the last write ended
        self._sent = 0        # the sequential writes' bytes before this are handed over or left to the fsync

    def plan(self, offset: int, nbytes: int) -> tuple[int, int] | None:
        """The range ``(start, length)`` to hand over after writing bytes ``[offset, offset + nbytes)``, or
        None (left to the fsync): whole pages only, each once.

        A write continuing the previous one hands over from where that one's range stopped (the page they
        share is whole now) to the last whole page it wrote; a write elsewhere, its own whole pages. A range
        under :data:`WRITEBACK_MIN_BYTES` is left to the fsync, and a later sequential write starts after it
        (a header written first and rewritten at the end is never handed over half done).
        """
        end = offset + nbytes
        start = self._sent if offset == self._end else -(-offset // _PAGE) * _PAGE
        stop = end - end % _PAGE
        self._end = end
        if stop - start < WRITEBACK_MIN_BYTES:
            self._sent = -(-end // _PAGE) * _PAGE
            return None
        self._sent = stop
        return start, stop - start

    def add(self, offset: int, nbytes: int) -> None:
        """Submit the whole pages of bytes ``[offset, offset + nbytes)`` just written soon (:meth:`plan`)."""
        if not self.working:
            return
        span = self.plan(offset, nbytes)
        if span is None:
            return
        self._queued = True
        _SUBMITTER.put(functools.partial(self._submit, *span))

    def _submit(self, offset: int, nbytes: int) -> None:
        """In the writeback thread: hand the range over (until the system refuses once)."""
        if self.working:
            self.working = start_writeback(self.fd, offset, nbytes)

    def close(self) -> None:
        """Wait until every range added is submitted (not written). Idempotent.

        The wait is on this process's own thread (no peer), which ends each submission: no deadline.
        """
        if self._queued:
            _SUBMITTER.wait_queued()
            self._queued = False
