"""Byte sources: the bytes of one rank's checkpoint file, wherever and however they are stored.

A :class:`ByteSource` reads byte ranges of a *logical* checkpoint file (the bytes a rank's L1 file holds):
:class:`FileSource` reads a plain file (L1, an L2 partner copy, a full L4 copy);
:class:`ftkit.storage.format.dcpstore.DcpSource` reads a differential L4 checkpoint in place from its block
store. Readers of parts of a file (:mod:`ftkit.storage.format.boxread`, :mod:`ftkit.storage.export`, the
header reader of
:mod:`ftkit.storage.format.container`) take a source, so every kind of copy is read the same way.

Rules a reader may rely on: ``read_into`` fills the whole buffer or raises (a short read is a
:class:`~ftkit.errors.StorageError` naming the source, never zeros); a source verifies nothing itself, the
header's digests are checked by its readers.
"""

from __future__ import annotations

import mmap
import os
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType

from ...errors import CheckpointNotFoundError, StorageError

__all__ = ["ByteSource", "FileSource"]


class ByteSource(ABC):
    """Random-access reads of a logical checkpoint file (use as a context manager, or call ``close``)."""

    #: What the source is, for messages (a path, or the dCP map and block store).
    name: str
    #: Size of the logical file (bytes).
    size: int
    #: Whether :meth:`map` can map byte ranges (else it returns None).
    supports_map: bool = False

    @abstractmethod
    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` (a writable byte view) with the bytes from ``offset``.

        Raises
        ------
        StorageError
            If the bytes are not there (truncated) or cannot be read.
        """

    def map(self, offset: int, n: int) -> memoryview | None:
        """The ``n`` bytes from ``offset`` mapped read-only into memory (no copy), or None if this source
        cannot map them (then read them). The mapping lives as long as the view (or an array over it).

        Raises
        ------
        StorageError
            If the bytes are not there (truncated).
        """
        return None

    @abstractmethod
    def close(self) -> None:
        """Release the open files (idempotent)."""

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def pread_exact(fd: int, offset: int, out: memoryview, name: str) -> None:
    """Read exactly ``len(out)`` bytes of ``fd`` at ``offset`` into ``out``.

    Raises
    ------
    StorageError
        If the file ends first (it is truncated, or changed while read) or the read fails.
    """
    got, n = 0, len(out)
    try:
        while got < n:
            r = os.preadv(fd, [out[got:]], offset + got)
            if r <= 0:
                raise StorageError(f"{name}: truncated: it ends at byte {offset + got}, {n - got} bytes "
                                   f"short of the {offset + n} needed (was it modified or cut short?)")
            got += r
    except OSError as exc:
        raise StorageError(f"{name}: cannot read: {exc.strerror or exc}") from exc


class FileSource(ByteSource):
    """A plain checkpoint file (its byte ranges can be mapped).

    Raises
    ------
    CheckpointNotFoundError
        If the file does not exist.
    StorageError
        If it cannot be opened.
    """

    supports_map = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise CheckpointNotFoundError(f"{self.path}: checkpoint file is missing") from exc
        except OSError as exc:
            raise StorageError(f"{self.path}: cannot open: {exc.strerror or exc}") from exc
        self.size = os.fstat(self.fd).st_size

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the file's bytes from ``offset`` (see :func:`pread_exact`)."""
        pread_exact(self.fd, offset, out, self.name)

    def map(self, offset: int, n: int) -> memoryview | None:
        """Map the file's bytes ``[offset, offset + n)`` (pages populated at once; the file must not be
        truncated in place while a view lives: checkpoint files are only ever replaced by a rename)."""
        if offset + n > self.size:
            raise StorageError(f"{self.name}: truncated: {offset + n} bytes needed, {self.size} on disk")
        if n <= 0:
            return None
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            m = mmap.mmap(self.fd, offset + n - start, prot=mmap.PROT_READ,
                          flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), offset=start)
        except (OSError, ValueError):
            return None  # not mappable here (a special file system): the caller reads instead
        return memoryview(m)[offset - start:offset - start + n]

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
