"""The storage-level contract: where a rank's checkpoint file lives at one level, and how to put it there.

A level (L1 node-local, L2 partner copy, L3 encoded, L4 parallel file system, or any level of
:mod:`ftkit.storage.levels`) stores at most one file per rank per checkpoint, under one *key* of its
:class:`~ftkit.storage.placement.store.Store` (by default a
:class:`~ftkit.storage.placement.dirstore.DirectoryStore` on the level's root directory). Implementations give
only :meth:`StorageLevel.key` and :meth:`StorageLevel.run_keys` (and their name and number); writing, copying
in, verifying, reading, testing and removing are derived here from the store's primitives, so every level
commits the same way. With a store that has local paths (``supports_local_path``: every built-in level) a
checkpoint goes straight from the protected buffers into its file (temporary name, fsync, rename, fsync of the
directory) and is read in place; with another store the file is staged in a private temporary directory and
moved in with one ``put`` (a copy: the price of a store without files). A level holding the checkpoint file
itself (L1, L2 copy, L4) stores it byte-identical to the one written at L1; the file's integrity is the
container's (see :mod:`ftkit.storage.format.container`). Levels that store something else (L3 parity) override
what differs.

This module imports no level implementation.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..._paths import check_plain_name
from .._fsutil import link_durably
from ..format import container as fmt
from ..format.global_layout import Layout
from ..pending import PendingFile, start_write
from .dirstore import DirectoryStore
from .store import Store

__all__ = ["StorageLevel", "FILE_SUFFIX", "ckpt_dir_name", "parse_ckpt_dir_name"]

FILE_SUFFIX = ".ftk"
_CKPT_RE = re.compile(r"^ckpt([0-9]+)$")


def ckpt_dir_name(ckpt_id: int) -> str:
    """Name of the directory holding checkpoint ``ckpt_id``'s files at a level (``ckpt<id>``)."""
    return f"ckpt{ckpt_id}"


def parse_ckpt_dir_name(name: str) -> int | None:
    """Inverse of :func:`ckpt_dir_name`; None if ``name`` is not a checkpoint directory."""
    m = _CKPT_RE.match(name)
    return int(m.group(1)) if m else None


class StorageLevel(ABC):
    """One checkpoint level's storage, for one run (``exec_id``).

    Parameters
    ----------
    root
        The level's root directory (``ckpt_dir`` for node-local levels, ``glbl_dir`` for L4).
    exec_id
        The run's identity; every path is under a directory of that name (a plain name: see
        :func:`ftkit._paths.check_plain_name`, else :class:`~ftkit.errors.UnsafePathError`).
    nodes
        Node id of every rank when the checkpoint was taken (node-local levels place files by node).
    chunk_bytes
        Size (bytes) of one I/O chunk; a level never holds more than one chunk of extra memory.
    fsync
        fsync files and directories on commit (durability). Only format tests turn it off.
    store
        Where the level's bytes live (default: a :class:`~ftkit.storage.placement.dirstore.DirectoryStore` on
        ``root``).
    """

    level: ClassVar[int]
    name: ClassVar[str]
    #: True if checkpoints can be written straight from the protected arrays into this level.
    supports_direct_write: ClassVar[bool] = False
    #: True if the level's file of a rank is the checkpoint file itself (readable with read_into).
    supports_read: ClassVar[bool] = True
    #: True if large files written straight from the arrays or copied in (:meth:`put_file`) bypass the page
    #: cache (direct I/O, where the file system allows it: :func:`ftkit.storage.format.container.write_file`'s
    #: and ``copy_file``'s ``direct``). For files nobody on the node reads back soon (L4); node-local levels
    #: keep the page cache, where L2/L3 read back.
    bypass_page_cache: ClassVar[bool] = False

    def __init__(self, root: str | os.PathLike[str], exec_id: str, nodes: Sequence[int],
                 chunk_bytes: int = fmt.DEFAULT_CHUNK, fsync: bool = True,
                 store: Store | None = None) -> None:
        self.root = Path(root)
        self.exec_id = check_plain_name(exec_id, "exec_id")
        self.nodes = list(nodes)
        self.chunk_bytes = chunk_bytes
        self.fsync = fsync
        self.store: Store = store if store is not None else DirectoryStore(self.root, fsync=fsync)

    # -- what an implementation provides ------------------------------------------------------------------

    @abstractmethod
    def key(self, ckpt_id: int, rank: int) -> str:
        """Store key of ``rank``'s file of checkpoint ``ckpt_id`` at this level."""

    @abstractmethod
    def run_keys(self) -> list[str]:
        """Key prefixes holding this run's files at this level (one per node for node-local levels)."""

    def stop_key(self, ckpt_id: int, rank: int) -> str:
        """Prefix at which empty-prefix cleanup stops for ``rank``'s file (default: the store's root)."""
        return ""

    # -- derived operations -------------------------------------------------------------------------------

    def path(self, ckpt_id: int, rank: int) -> Path:
        """Path of ``rank``'s file of checkpoint ``ckpt_id`` (a store with ``supports_local_path`` only).

        Raises
        ------
        StorageError
            If the level's store keeps no local files.
        """
        return self.store.local_path(self.key(ckpt_id, rank))

    def run_dirs(self) -> list[Path]:
        """Directories holding this run's files at this level (a store with local paths only)."""
        return [self.store.local_path(k) for k in self.run_keys()]

    def stop_dir(self, ckpt_id: int, rank: int) -> Path:
        """Directory at which empty-directory cleanup stops for ``rank``'s file."""
        return self.store.local_path(self.stop_key(ckpt_id, rank))

    def _what(self, rank: int) -> str:
        return f"L{self.level} file of rank {rank}"

    def write(self, ckpt_id: int, rank: int, arrays: Sequence[tuple[str, np.ndarray]], *, level: int,
              nranks: int, meta: Mapping[str, Any] | None = None,
              layouts: Mapping[str, Layout] | None = None,
              compression: tuple[str, int, Mapping[str, str]] | None = None) -> fmt.FileInfo:
        """Write ``rank``'s checkpoint file from ``arrays`` (global ``layouts`` of some) straight into this
        level (atomically); with ``compression`` = (codec, level, per-array codecs) as a compressed copy
        (:func:`ftkit.storage.format.container.write_compressed`), else as the plain file."""
        def put(dst: Path, fsync: bool) -> fmt.FileInfo:
            if compression is not None:
                codec, codec_level, codecs = compression
                return fmt.write_compressed(dst, arrays, rank=rank, level=level, ckpt_id=ckpt_id,
                                            exec_id=self.exec_id, nranks=nranks, codec=codec,
                                            codec_level=codec_level, codecs=codecs, meta=meta, fsync=fsync,
                                            layouts=layouts)
            return fmt.write_file(dst, arrays, rank=rank, level=level, ckpt_id=ckpt_id, exec_id=self.exec_id,
                                  nranks=nranks, meta=meta, chunk_bytes=self.chunk_bytes, fsync=fsync,
                                  layouts=layouts, direct=self.bypass_page_cache and fsync)

        if not self.store.supports_local_path:
            with self._staged(ckpt_id, rank) as dst:
                return put(dst, False)
        return put(self._writable(ckpt_id, rank), self.fsync)

    def start_write(self, ckpt_id: int, rank: int, arrays: Sequence[tuple[str, np.ndarray]], *, level: int,
                    nranks: int, meta: Mapping[str, Any] | None = None,
                    layouts: Mapping[str, Layout] | None = None) -> PendingFile:
        """:meth:`write`, but return once the bytes are written: the fsync runs in the background, and
        :meth:`PendingFile.finish` commits the file (see :mod:`ftkit.storage.pending`).

        Raises
        ------
        StorageError
            If the level's store keeps no local files (use :meth:`write`).
        """
        dst = self._writable(ckpt_id, rank)
        return start_write(dst, arrays, rank=rank, level=level, ckpt_id=ckpt_id, exec_id=self.exec_id,
                           nranks=nranks, meta=meta, chunk_bytes=self.chunk_bytes, fsync=self.fsync,
                           layouts=layouts)

    def put_file(self, ckpt_id: int, rank: int, src: str | os.PathLike[str], *, link: bool = False) -> int:
        """Copy an existing file (e.g. the L1 file) in as ``rank``'s file; return its size in bytes.

        With ``link``, a ``src`` on the same file system is hard-linked instead of copied
        (:func:`~ftkit.storage._fsutil.link_durably`): only for a ``src`` removed right after.

        Raises
        ------
        CheckpointNotFoundError
            If ``src`` is missing.
        StorageError
            If the copy or link fails (``rank``'s previous file, if any, is left as it was).
        """
        if not self.store.supports_local_path:
            with self._staged(ckpt_id, rank) as dst:
                return fmt.copy_file(src, dst, chunk_bytes=self.chunk_bytes, fsync=False)
        dst = self._writable(ckpt_id, rank)
        if link and link_durably(Path(src), dst, fsync=self.fsync):
            return dst.stat().st_size
        return fmt.copy_file(src, dst, chunk_bytes=self.chunk_bytes, fsync=self.fsync,
                             direct=self.bypass_page_cache)

    def verify(self, ckpt_id: int, rank: int, expect_digest: str | None = None) -> fmt.Header:
        """Check ``rank``'s file completely (header, size, every section digest); return its header.

        Raises
        ------
        CheckpointNotFoundError, FormatError, CorruptionError
            Naming the file and what is wrong.
        """
        with self._readable(ckpt_id, rank) as path:
            return fmt.verify_file(path, expect_digest=expect_digest, chunk_bytes=self.chunk_bytes)

    def read_into(self, ckpt_id: int, rank: int, targets: Mapping[str, np.ndarray],
                  header: fmt.Header | None = None) -> fmt.Header:
        """Read ``rank``'s file into ``targets`` (name → array), checking digests."""
        with self._readable(ckpt_id, rank) as path:
            return fmt.read_into(path, targets, header, chunk_bytes=self.chunk_bytes)

    def exists(self, ckpt_id: int, rank: int) -> bool:
        """Whether ``rank``'s file of checkpoint ``ckpt_id`` exists at this level (valid or not)."""
        return self.store.exists(self.key(ckpt_id, rank))

    def remove(self, ckpt_id: int, rank: int) -> None:
        """Delete ``rank``'s file of ``ckpt_id`` (and directories left empty); missing files are ignored."""
        self.store.delete(self.key(ckpt_id, rank), self.stop_key(ckpt_id, rank), self._what(rank))

    def prepare_dir(self, ckpt_id: int, rank: int) -> Path:
        """Create the directory of ``rank``'s file of ``ckpt_id`` ahead of writing it; return the file's path.
        The directory's entry is durable once the file is committed (its directory fsync pays the parent's).

        Raises
        ------
        UnsafePathError
            If the path leads outside the level's root.
        OSError
            If the directory cannot be created.
        """
        return self._writable(ckpt_id, rank)

    def _writable(self, ckpt_id: int, rank: int) -> Path:
        """``rank``'s path, its directory created and checked to lie inside the level's root."""
        key = self.key(ckpt_id, rank)
        self.store.prepare(key, self._what(rank))
        return self.store.local_path(key)

    @contextlib.contextmanager
    def _staged(self, ckpt_id: int, rank: int) -> Iterator[Path]:
        """A private temporary file for ``rank``'s file, moved into a store without local paths by one
        ``put`` when the block ends without an error."""
        with tempfile.TemporaryDirectory(prefix="ftkit-stage-") as tmp:
            path = Path(tmp) / "file"
            yield path
            self.store.put(self.key(ckpt_id, rank), path.read_bytes())

    @contextlib.contextmanager
    def _readable(self, ckpt_id: int, rank: int) -> Iterator[Path]:
        """``rank``'s file as a local path: in place, or fetched from a store without local paths."""
        if self.store.supports_local_path:
            yield self.path(ckpt_id, rank)
            return
        data = self.store.get(self.key(ckpt_id, rank))
        with tempfile.TemporaryDirectory(prefix="ftkit-fetch-") as tmp:
            path = Path(tmp) / "file"
            path.write_bytes(data)
            yield path

    def list_ids(self) -> list[int]:
        """Ids of the checkpoints that have a directory at this level (complete or not)."""
        ids: set[int] = set()
        for prefix in self.run_keys():
            for name in self.store.list_dir(f"{prefix}/l{self.level}"):
                cid = parse_ckpt_dir_name(name)
                if cid is not None:
                    ids.add(cid)
        return sorted(ids)
