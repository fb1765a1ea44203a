"""Early writeback: hand bytes just written to the device without waiting for them (see
:mod:`ftkit.storage._fsutil`, whose :class:`~ftkit.storage._fsutil.AtomicWriter` uses it).

Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` through ``ctypes`` (the standard library has no binding):
the dirty pages of a range are submitted now, so the disk works while the caller goes on, and a later fsync
waits only for what is left. It makes nothing durable (no metadata, no flush of the device's cache).
"""

from __future__ import annotations

import ctypes

__all__ = ["start_writeback", "WRITEBACK_MIN_BYTES"]

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
