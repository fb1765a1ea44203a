"""Early writeback: hand bytes just written to the device without waiting for them (see
:mod:`ftkit.storage._fsutil`, whose :class:`~ftkit.storage._fsutil.AtomicWriter` uses it).

Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` through ``ctypes`` (the standard library has no binding):
the dirty pages of a range are submitted now, so the disk works while the caller goes on, and a later fsync
waits only for what is left. It makes nothing durable (no metadata, no flush of the device's cache).
Submitting can itself wait when the device's queue is full, so :class:`Writeback` submits from a helper
thread: the writer goes on copying the next piece into the page cache meanwhile (measured, issue 37: done in
the writer's own thread, it delayed the L2 partner exchange that follows the L1 write).
"""

from __future__ import annotations

import ctypes
import queue
import threading

__all__ = ["start_writeback", "Writeback", "WRITEBACK_MIN_BYTES"]

#: Pieces smaller than this are left to the fsync (for a small file one request is as good as two).
WRITEBACK_MIN_BYTES = 1 << 20
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


class Writeback:
    """Submit written ranges of one open file to the device from a helper thread, in the order given.

    The owner calls :meth:`add` after each write and :meth:`close` before it fsyncs or closes the descriptor
    (the thread never touches the descriptor afterwards). Not thread-safe: one writer thread.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.working = True   # False once the system refused (then :meth:`add` does nothing)

    def add(self, offset: int, nbytes: int) -> None:
        """Submit bytes ``[offset, offset + nbytes)`` soon (pieces under :data:`WRITEBACK_MIN_BYTES` are
        left to the fsync)."""
        if not self.working or nbytes < WRITEBACK_MIN_BYTES:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ftkit-writeback", daemon=True)
            self._thread.start()
        self._queue.put((offset, nbytes))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self.working:
                self.working = start_writeback(self._fd, *item)

    def close(self) -> None:
        """Wait until every range added is submitted (not written) and end the thread. Idempotent."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
