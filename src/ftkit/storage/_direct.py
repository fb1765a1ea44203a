"""Direct writes: a large file's bytes go to the device through two small aligned staging buffers, bypassing
the page cache (Linux ``O_DIRECT``), for :class:`~ftkit.storage._fsutil.AtomicWriter` (issue 37).

Why: 4 writers x 256 MiB into one directory of this project's disk (``benchmarks/fti/write_paths.py``, 20
interleaved runs each, load 9): buffered write + fsync took 1.04 s median, 1.54 s p90; with early writeback
(``sync_file_range`` per 16 MiB, ftkit's writer before) 0.90 / 1.16; ``O_DIRECT`` from a 4 MiB staging buffer,
copy included, 0.66 / 0.78, with a fifth of the CPU. The buffered writes' time follows the CPU the kernel
spends putting 1 GiB into the page cache (0.07-0.4 s per writer from run to run); a direct write copies each
byte once into a buffer the device reads from, and leaves no dirty pages behind for the next job.

Rules a caller may rely on (:class:`DirectStream`):

* The first write is at offset 0: the file's head (that write rounded up to :data:`ALIGN`, at most
  :data:`DIRECT_CHUNK` bytes) is kept in memory until :meth:`DirectStream.finish`, so it may be rewritten at
  any time (the container's header, rewritten with the digests once the data is written). Every other
  write continues the file where the last one ended; anything else raises
  :class:`~ftkit.errors.StorageError` (a caller error, nothing is lost).
* At most two staging buffers of :data:`DIRECT_CHUNK` bytes per file: this thread fills one while the
  process's direct-write thread (:class:`~ftkit.storage._writeback.KeptThread`) writes the other. No copy of
  the whole file is ever made.
* :meth:`DirectStream.finish` writes the tail's and the head's whole pages direct, then the last partial
  page (fewer than :data:`ALIGN` bytes at the file's end) through the page cache, with ``O_DIRECT`` turned
  off: the file gets its exact size without a padded write and an ``ftruncate``, which on ext4 read the
  partial block back from the device and journalled the truncation (strace of a 64 MiB L4 call, issue 37:
  0.2-6.5 ms, and the fsync after it 6 ms). The caller fsyncs (the size, the allocation, that page and the
  device's write cache). Nothing here makes anything durable.
* :func:`enable_direct` raises :class:`~ftkit.errors.DirectIOUnsupported` where the file system refuses
  ``O_DIRECT``; a file system that accepts the flag but refuses the first aligned write with ``EINVAL`` is
  written buffered from then on (the same bytes, through the page cache).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading

import numpy as np

from ..errors import DirectIOUnsupported, StorageError
from ._writeback import KeptThread

__all__ = ["ALIGN", "DIRECT_CHUNK", "DIRECT_MIN_BYTES", "DIRECT_MIN_BYTES_ENV", "DirectStream",
           "enable_direct"]

#: Offset and length alignment of every direct write (the page size: enough for 512 B and 4 KiB sectors).
ALIGN = 4096
#: Bytes per staging buffer (two per open file).
DIRECT_CHUNK = 4 << 20
#: The environment variable that sets :data:`DIRECT_MIN_BYTES` (a number of bytes, read once, when this
#: module is imported): tests lower it to kill jobs while they write direct L4 files of a few MiB.
DIRECT_MIN_BYTES_ENV = "FTKIT_DIRECT_MIN_BYTES"


def _min_bytes() -> int:
    text = os.environ.get(DIRECT_MIN_BYTES_ENV, "").strip()
    if not text:
        return 64 << 20
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise StorageError(f"{DIRECT_MIN_BYTES_ENV}={text!r}: give the file size (bytes, an integer >= 0) "
                           "from which files are written with direct I/O, or unset it (64 MiB)")
    return value


#: Files smaller than this (bytes; 64 MiB unless :data:`DIRECT_MIN_BYTES_ENV` says otherwise) are written
#: buffered (for them the page cache costs little, and a small file read right back, e.g. a manifest, is
#: served from it).
DIRECT_MIN_BYTES = _min_bytes()

_O_DIRECT = getattr(os, "O_DIRECT", 0)
_WRITER = KeptThread("ftkit-direct-write")


def _align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _copy_into(buf: mmap.mmap, at: int, data: memoryview) -> None:
    """``buf[at:at + len(data)] = data``, with the GIL released during the copy (numpy's copy loop releases
    it; an mmap slice assignment holds it). The direct-write thread needs the GIL between two writes: held
    by a 4 MiB copy, it waited 5.7 ms median to get it on a loaded machine (0.1 ms with numpy's copy), the
    device idle meanwhile (issue 37)."""
    np.frombuffer(buf, np.uint8, len(data), at)[:] = np.frombuffer(data, np.uint8)


def enable_direct(fd: int, what: object) -> None:
    """Switch open file ``fd`` (named ``what`` in errors) to direct I/O.

    Raises
    ------
    DirectIOUnsupported
        Where the system or the file system refuses ``O_DIRECT`` (the descriptor is left as it was).
    """
    if not _O_DIRECT:
        raise DirectIOUnsupported(f"{what}: this system has no direct I/O (O_DIRECT); write it buffered")
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | _O_DIRECT)
    except OSError as exc:
        raise DirectIOUnsupported(f"{what}: the file system refuses direct I/O (O_DIRECT: "
                                  f"{exc.strerror or exc}); write it buffered") from exc


def _disable_direct(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_DIRECT)


class DirectStream:
    """The bytes of one file opened with :func:`enable_direct`, written through aligned staging buffers.

    Not thread-safe: one writer thread calls :meth:`write`, then :meth:`finish` (or :meth:`close` to drop
    what is not written yet); the descriptor must stay open until either has returned.
    """

    def __init__(self, fd: int, what: object) -> None:
        self.fd = fd
        self.what = what
        self.direct = True        # False once the file system refused an aligned write (then buffered)
        self._bufs = [mmap.mmap(-1, DIRECT_CHUNK) for _ in range(2)]   # page-aligned, zero-filled
        self._busy: list[threading.Event | None] = [None, None]
        self._cur = 0             # the staging buffer being filled
        self._fill = 0            # bytes in it
        self._start = 0           # file offset of its first byte
        self._head: mmap.mmap | None = None
        self._end = 0             # where the last write ended (the file's size so far)
        self._error: OSError | None = None
        self._wrote_direct = False
        # Last partial pages left to finish(): (buffer, first byte in it, end in it, file offset).
        self._partial: list[tuple[mmap.mmap, int, int, int]] = []

    def write(self, data: memoryview, offset: int) -> None:
        """Write ``data`` (bytes) at ``offset``: the first write at 0, then the head again or sequentially.

        Raises
        ------
        StorageError
            If the write is neither (a caller error).
        OSError
            As an earlier write in the background raised it (e.g. ``ENOSPC``, ``EIO``).
        """
        self._raise_error()
        n = len(data)
        if self._head is None:
            if offset != 0:
                raise StorageError(f"{self.what}: a direct write starts at offset 0, not {offset}")
            self._head = mmap.mmap(-1, _align_up(min(max(n, 1), DIRECT_CHUNK)))
            self._start = len(self._head)
        head = len(self._head)
        if offset + n <= head and offset <= self._end:   # inside the kept head (a rewrite, or its first fill)
            self._head[offset:offset + n] = data
            self._end = max(self._end, offset + n)
            return
        if offset != self._end:
            raise StorageError(f"{self.what}: direct writes continue the file (at {self._end}), "
                               f"not at {offset}")
        if offset < head:                               # the part of this write that is still head
            k = head - offset
            self._head[offset:head] = data[:k]
            data, offset, n = data[k:], head, n - k
        done = 0
        while done < n:
            k = min(n - done, DIRECT_CHUNK - self._fill)
            _copy_into(self._bufs[self._cur], self._fill, data[done:done + k])
            self._fill += k
            done += k
            if self._fill == DIRECT_CHUNK:
                self._submit()
        self._end = offset + n

    def _submit(self) -> None:
        """Hand the current staging buffer to the writer thread and wait until the other one is free."""
        i, at, n = self._cur, self._start, self._fill
        self._busy[i] = _WRITER.put(lambda: self._write_out(self._bufs[i], at, n))
        self._cur ^= 1
        self._start += n
        self._fill = 0
        self._wait(self._cur)

    def _wait(self, i: int) -> None:
        # The process's own thread ends every write it was handed (no peer): no deadline.
        event = self._busy[i]
        if event is not None:
            event.wait()
            self._busy[i] = None
        self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _write_out(self, buf: mmap.mmap, at: int, n: int) -> None:
        """Write ``buf[:n]`` at ``at`` (aligned), in the writer thread or the caller's. Direct: the whole
        pages now; a last partial page is kept for :meth:`finish` to write through the page cache.

        Keeps a failure for the caller instead of raising (the writer thread must live on).
        """
        if self._error is not None:
            return
        try:
            if self.direct:
                whole = n - n % ALIGN
                try:
                    if whole:
                        self._pwrite(memoryview(buf)[:whole], at)
                        self._wrote_direct = True
                    if whole < n:
                        self._partial.append((buf, whole, n, at + whole))
                    return
                except OSError as exc:
                    if exc.errno != errno.EINVAL or self._wrote_direct:
                        raise
                    _disable_direct(self.fd)   # the flag was accepted, the write is not: buffered from now on
                    self.direct = False
            self._pwrite(memoryview(buf)[:n], at)
        except OSError as exc:
            self._error = exc.with_traceback(None)   # no frame may keep a view of a buffer close() frees

    def _pwrite(self, view: memoryview, at: int) -> None:
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], at + done)

    def finish(self) -> int:
        """Write what is left (the last staging buffer, then the head, then the last partial page buffered:
        the file has its exact size); return that size in bytes. The caller fsyncs.

        Raises
        ------
        OSError
            As a write raised it.
        """
        try:
            for i in (0, 1):
                self._wait(i)
            if self._fill:
                self._write_out(self._bufs[self._cur], self._start, self._fill)
                self._fill = 0
            if self._head is not None:
                self._write_out(self._head, 0, min(len(self._head), self._end))
            self._raise_error()
            if self._partial:
                if self.direct:
                    _disable_direct(self.fd)
                for buf, first, end, at in self._partial:
                    self._pwrite(memoryview(buf)[first:end], at)
                self._partial = []
            return self._end
        finally:
            self.close()

    def close(self) -> None:
        """Wait for the writes handed to the thread and free the buffers; nothing more is written.
        Idempotent."""
        for i in (0, 1):
            event = self._busy[i]
            if event is not None:
                event.wait()
                self._busy[i] = None
        for b in [*self._bufs, *([self._head] if self._head is not None else [])]:
            try:
                b.close()
            except BufferError:   # a view still held somewhere: the mapping goes with its last reference
                pass
        self._bufs = []
        self._head = None
        self._partial = []
