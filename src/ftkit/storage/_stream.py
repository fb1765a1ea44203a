"""Streaming file helpers shared by the redundancy levels: chunked reads with zero padding, atomic writes.

A file written through :class:`AtomicWriter` appears under its final name only after its bytes are fsynced
(temporary name, fsync, rename, fsync of the directory), so a crash never leaves a half-written file under
a name a reader would trust.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

import numpy as np
import xxhash

from ..errors import StorageError

__all__ = ["AtomicWriter", "read_into", "file_digest", "file_size", "byte_view"]


def byte_view(a: np.ndarray | bytes | memoryview) -> memoryview:
    """Return a flat byte memoryview of a contiguous array (no copy)."""
    return memoryview(a).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers


def file_size(path: str | os.PathLike[str] | None) -> int:
    """Return the size of ``path`` in bytes, or -1 when it is missing or ``path`` is None."""
    if path is None:
        return -1
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def read_into(fd: int, offset: int, out: np.ndarray, file_len: int) -> None:
    """Fill ``out`` (uint8) with the file's bytes from ``offset``; bytes past ``file_len`` read as zeros.

    Raises
    ------
    StorageError
        If the file is shorter than ``file_len`` (it changed while being read).
    """
    n = out.nbytes
    avail = max(0, min(n, file_len - offset))
    view = byte_view(out)
    got = 0
    while got < avail:
        r = os.preadv(fd, [view[got:avail]], offset + got)
        if r <= 0:
            raise StorageError(f"file shrank while being read (expected {file_len} bytes, got EOF at "
                               f"{offset + got}): was it modified during the operation?")
        got += r
    if avail < n:
        out[avail:] = 0


def file_digest(path: str | os.PathLike[str], chunk_size: int = 4 << 20) -> str:
    """Return the xxh3-64 digest (hex) of the whole file ``path``, read in chunks of ``chunk_size`` bytes.

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    h = xxhash.xxh3_64()
    buf = np.empty(chunk_size, np.uint8)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(byte_view(buf))
            if not n:
                break
            h.update(byte_view(buf)[:n])
    return h.hexdigest()


class AtomicWriter:
    """Write a file under a temporary name; :meth:`commit` fsyncs and renames it to ``path``.

    Used as a context manager, it commits on normal exit and removes the temporary file on an exception.
    The parent directory is created if missing (a replacement node starts with an empty local directory).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
            self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path}: {exc}") from exc
        self._done = False

    def pwrite(self, data: np.ndarray | bytes | memoryview, offset: int) -> None:
        """Write ``data`` at byte ``offset`` of the file."""
        view = byte_view(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)

    def commit(self) -> None:
        """Make the file durable and visible under its final name."""
        if self._done:
            return
        try:
            os.fsync(self.fd)
            os.close(self.fd)
            os.replace(self.tmp, self.path)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise StorageError(f"cannot commit {self.path}: {exc}") from exc
        self._done = True

    def abort(self) -> None:
        """Drop the temporary file (the final name is left untouched)."""
        if self._done:
            return
        self._done = True
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is None:
            self.commit()
        else:
            self.abort()
