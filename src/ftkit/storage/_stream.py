"""Streaming file helpers shared by the redundancy levels: chunked reads with zero padding, digests, sizes.

Files are written through the one atomic writer, :class:`ftkit.storage._fsutil.AtomicWriter` (re-exported
here for the modules that stream into it).
"""

from __future__ import annotations

import os

import numpy as np
import xxhash

from ..errors import StorageError
from ._fsutil import AtomicWriter

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
