"""Panel buffers of the SUMMA multiplies, kept between calls in a process-wide cache.

Every panel exchange (plain, ABFT-encoded, failure-aware) and the ABFT routines' scratch take their buffers
from one cache, so alternating routines reuse each other's memory instead of faulting fresh pages each call.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["BUFFER_CACHE_BYTES", "panel_slots", "pooled_buffer", "release_pool"]

#: Panel buffers kept for reuse between multiplies, per process (bytes): ft_pdsyrk's copy of C0 beside two
#: panel sets is 137 MB per rank at n = 4096, nb = 128 on 2 x 2 (128 MiB dropped it after every call).
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

    def take(self, size: int) -> np.ndarray:
        with self._lock:
            fits = [b for b in self._free if b.size >= size]
            if fits:
                best = min(fits, key=lambda b: b.size)
                self._free = [b for b in self._free if b is not best]
                return best
        return np.empty(size + size // 16)

    def give(self, buf: np.ndarray) -> None:
        with self._lock:
            self._free.append(buf)
            self._free.sort(key=lambda b: -b.size)
            while self._free and sum(b.nbytes for b in self._free) > BUFFER_CACHE_BYTES:
                self._free.pop(0)  # drop the largest first


_buffers = _BufferCache()


def pooled_buffer(pool: dict[object, np.ndarray], key: object, shape: tuple[int, int]) -> np.ndarray:
    """Return a column-major array of ``shape`` backed by ``pool[key]``, a buffer taken from the process-wide
    cache of panel buffers (kept between multiplies; grown when too small). Give it back with
    :func:`release_pool` once no transfer can touch it."""
    size = shape[0] * shape[1]
    buf = pool.get(key)
    if buf is None or buf.size < size:
        if buf is not None:
            _buffers.give(buf)
        buf = pool[key] = _buffers.take(max(size, 1))
    return buf[:size].reshape(shape, order="F")


def release_pool(pool: dict[object, np.ndarray]) -> None:
    """Hand every buffer of ``pool`` back to the process-wide cache for later multiplies, and empty it."""
    for buf in pool.values():
        _buffers.give(buf)
    pool.clear()
