"""Panel buffers of the SUMMA multiplies, kept between calls in a process-wide cache.

Every panel exchange (plain, ABFT-encoded, failure-aware), the redistributions' message buffers and pooled
outputs, and the ABFT routines' scratch take their buffers from one cache, so alternating routines reuse
each other's memory instead of faulting fresh pages each call.

Why it matters: glibc serves every array of more than a few MiB by its own ``mmap`` and gives it back by
``munmap`` when it is freed, so a fresh array costs a page fault and a kernel zeroing per page, as system
CPU time. On a virtual machine that reports freed guest pages back to its host (virtio-balloon free page
reporting, as the development machine does) the host then faults every page in again as well: a PDSYR2K
at n = 4096, nb = 128 on 2 x 2 spent a median 1.3 s (0.5-1.6 s) of system time per call, all ranks
summed, with fresh redistribution buffers, 0.36 s (0.18-0.68 s) with this cache (user time 3.1-3.3 s).
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["BUFFER_CACHE_BYTES", "panel_slots", "pooled_buffer", "release_buffers", "release_pool"]

#: Buffers kept for reuse between multiplies, per process (bytes), at least: ft_pdsyrk's copy of C0 beside
#: two panel sets is 137 MB per rank at n = 4096, nb = 128 on 2 x 2 (128 MiB dropped it after every call).
#: The cache keeps more when one call had more in use at once (its high-water mark): PDSYR2K's two
#: redistributed operands, then the panels that reuse its message buffers, are ~255 MiB per rank there; a
#: fixed cap below that dropped the 68 MiB receive buffer after every call, to be faulted in again.
BUFFER_CACHE_BYTES = 192 * 2**20


def panel_slots(widths: list[int]) -> list[slice]:
    """The column (or row) slices of a panel made of pieces of ``widths``, side by side in order."""
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(int)
    return [slice(int(offsets[q]), int(offsets[q + 1])) for q in range(len(widths))]


class _BufferCache:
    """Flat float64 buffers kept between multiplies (up to :data:`BUFFER_CACHE_BYTES` per process).

    Fresh panel memory costs a page fault and a kernel zeroing per 4 KiB page: ~100 MB of panels per call at
    n = 4096 on 2 x 2 took measurably more CPU than reusing buffers. A buffer is owned by one exchange from
    ``take`` until ``give``, so concurrent exchanges never share one. Fresh buffers get 1/16 headroom: the
    panels of ft_pdgemm (ABFT checksum rows / columns appended, 3/bs more) then fit in pdgemm's buffers and
    vice versa; exact sizes made alternating calls (e.g. ``ABFTPolicy``) drop and re-fault ~50 MB per call.
    """

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._in_use = 0  # bytes taken and not given back
        self._peak = 0  # the most bytes ever in use at once: what the cache may keep

    def take(self, size: int) -> np.ndarray:
        with self._lock:
            fits = [b for b in self._free if b.size >= size]
            if fits:
                best = min(fits, key=lambda b: b.size)
                self._free = [b for b in self._free if b is not best]
            else:
                best = np.empty(size + size // 16)
            self._in_use += best.nbytes
            self._peak = max(self._peak, self._in_use)
            return best

    def give(self, buf: np.ndarray) -> None:
        with self._lock:
            self._in_use = max(0, self._in_use - buf.nbytes)
            self._free.append(buf)
            self._free.sort(key=lambda b: -b.size)
            limit = max(BUFFER_CACHE_BYTES, self._peak)
            while self._free and sum(b.nbytes for b in self._free) > limit:
                self._free.pop(0)  # drop the largest first


    def clear(self) -> int:
        """Drop every buffer not in use and forget the high-water mark; return the bytes dropped."""
        with self._lock:
            dropped = sum(b.nbytes for b in self._free)
            self._free = []
            self._peak = self._in_use
            return dropped


_buffers = _BufferCache()


def release_buffers() -> int:
    """Free the buffers the PBLAS routines keep between calls in this process (local, not collective).

    The routines keep their panel and redistribution buffers for the next call, as much as one call ever
    had in use at once (~255 MiB per process for a PDSYR2K at n = 4096, nb = 128 on 2 x 2): call this when
    the process is done multiplying for a while and needs the memory. Later calls allocate again.

    Returns
    -------
    int
        The bytes freed (buffers still in use by a running call are kept).
    """
    return _buffers.clear()


def pooled_buffer(pool: dict[object, np.ndarray], key: object, shape: tuple[int, ...],
                  dtype: np.dtype | type = np.float64) -> np.ndarray:
    """Return a column-major array of ``shape`` and ``dtype`` backed by ``pool[key]``, a buffer taken from the
    process-wide cache of panel buffers (kept between multiplies; grown when too small). Its contents are
    whatever an earlier user left. Give it back with :func:`release_pool` once no transfer can touch it."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    size = -(-count * dtype.itemsize // 8)  # in the cache's float64 elements
    buf = pool.get(key)
    if buf is None or buf.size < size:
        if buf is not None:
            _buffers.give(buf)
        buf = pool[key] = _buffers.take(max(size, 1))
    return buf[:size].view(dtype)[:count].reshape(shape, order="F")


def release_pool(pool: dict[object, np.ndarray]) -> None:
    """Hand every buffer of ``pool`` back to the process-wide cache for later multiplies, and empty it."""
    for buf in pool.values():
        _buffers.give(buf)
    pool.clear()
