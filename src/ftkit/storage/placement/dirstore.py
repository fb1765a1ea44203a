"""The POSIX directory store: every key a file under one root directory.

:class:`DirectoryStore` implements :class:`ftkit.storage.placement.store.Store` with files: ``put`` through
the one atomic writer (temporary name, fsync, rename, directory fsync: :mod:`ftkit.storage._fsutil`), ``get``
by ``pread``, ``list_dir`` by reading the directory, ``barrier`` by fsyncing it. It has local paths
(``supports_local_path``), which is how checkpoints go straight from the protected buffers into their files
(:mod:`ftkit.storage.format.container`, :mod:`ftkit.storage.pending`) with no copy through the store.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..._paths import check_inside, check_removable
from ...errors import CheckpointNotFoundError
from .._fsutil import atomic_write_bytes, fsync_dir, make_dirs, remove_empty_dirs, remove_file
from .store import Store

__all__ = ["DirectoryStore"]


class DirectoryStore(Store):
    """Keys as files under ``root``.

    Parameters
    ----------
    root
        The directory every key lies in.
    fsync
        fsync files and directories on commit (durability). Only format tests turn it off.
    """

    supports_local_path = True
    supports_partial_reads = True
    supports_listing = True

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.root)!r})"

    def local_path(self, key: str) -> Path:
        return self.root / key if key else self.root

    def prepare(self, key: str, what: str = "") -> None:
        """Create ``key``'s directory, after checking (before and after) that it stays in the root. Its entry
        becomes durable with the first fsync of the directory (the commit of a file put there), not before.

        Raises
        ------
        UnsafePathError
            If the path leads outside the root (a link may lead out: checked before anything is created).
        OSError
            If the directory cannot be created.
        """
        path, what = self.local_path(key), what or key
        check_inside(path, self.root, what)
        # The new directory's entry is made durable by the fsync of the directory that commits a file into
        # it (before any manifest claims the file), not now, on the checkpoint's critical path (issue 37).
        make_dirs(path.parent, defer_parent_fsync=self.fsync)
        check_inside(path, self.root, what)

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        path = self.local_path(key)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read() if length is None else f.read(length)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{path} does not exist") from None

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.prepare(key)
        atomic_write_bytes(self.local_path(key), bytes(data), fsync=self.fsync)

    def list_dir(self, prefix: str) -> list[str]:
        try:
            return sorted(p.name for p in self.local_path(prefix).iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def exists(self, key: str) -> bool:
        return self.local_path(key).is_file()

    def delete(self, key: str, stop: str = "", what: str = "") -> None:
        path = self.local_path(key)
        check_removable(path, self.root, what or key)
        remove_file(path)
        remove_empty_dirs(path.parent, self.local_path(stop))

    def barrier(self, prefix: str) -> None:
        if self.fsync:
            fsync_dir(self.local_path(prefix))
