"""The store contract: the few primitives a level's storage needs from where its bytes live.

A :class:`Store` (in the manner of zarr's ``abc/store.py``) maps *keys* to byte strings. A key is a relative,
``/``-separated name of plain parts (``node0/<exec_id>/l1/ckpt3/rank0.ftk``); a store never lets a key
leave its root. The primitives:

- :meth:`Store.get` a byte range of a key (:class:`~ftkit.errors.CheckpointNotFoundError` when missing);
- :meth:`Store.put` a whole value, atomically: a reader sees the old value or the new one, never a part;
- :meth:`Store.list_dir` the names directly under a prefix (empty when there is none);
- :meth:`Store.delete` a key (a missing key is fine), with the prefixes it leaves empty up to ``stop``;
- :meth:`Store.barrier` the durability barrier: every completed ``put`` under a prefix survives a crash
  after it returns.

Capability flags say what else a store can do; callers test them instead of the store's type:

``supports_local_path``
    keys are files a process can open (:meth:`Store.local_path`): checkpoints are then written straight from
    the protected buffers into them, copied or hard-linked, and read in place (the POSIX fast path of every
    built-in level; a store without it gets whole values through :meth:`Store.put`).
``supports_partial_reads``
    :meth:`Store.get` with a byte range costs only that range.
``supports_listing``
    :meth:`Store.list_dir` works (a store that cannot list reports no checkpoints to ``ftkit ls``).

Derived operations (:meth:`Store.exists`) are concrete here. This module imports no implementation: the
POSIX directory store is :class:`ftkit.storage.placement.dirstore.DirectoryStore`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from ...errors import StorageError

__all__ = ["Store", "join_key"]


def join_key(*parts: str) -> str:
    """Join key parts with ``/`` (empty parts dropped)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


class Store(ABC):
    """Where a level's bytes live: keys → byte strings, with capability flags (see the module docstring)."""

    supports_local_path: ClassVar[bool] = False
    supports_partial_reads: ClassVar[bool] = True
    supports_listing: ClassVar[bool] = True

    @abstractmethod
    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        """Return ``length`` bytes of ``key`` from ``start`` (all to the end with None).

        Raises
        ------
        CheckpointNotFoundError
            If ``key`` does not exist.
        """

    @abstractmethod
    def put(self, key: str, data: bytes | memoryview) -> None:
        """Set ``key`` to ``data`` atomically (durable once :meth:`barrier` of a prefix of it returned).

        Raises
        ------
        StorageError
            If it cannot be written (the previous value, if any, is left as it was).
        """

    @abstractmethod
    def list_dir(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (keys and deeper prefixes), sorted; empty if there are none."""

    @abstractmethod
    def delete(self, key: str, stop: str = "", what: str = "") -> None:
        """Delete ``key`` (missing is fine), then the prefixes it leaves empty, up to (not including)
        ``stop``; ``what`` names the key in messages.

        Raises
        ------
        UnsafePathError
            If the key leads outside the store (nothing is removed).
        """

    @abstractmethod
    def barrier(self, prefix: str) -> None:
        """Make every completed :meth:`put` (and creation) of a key directly under ``prefix`` durable."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        parent, _, name = key.rpartition("/")
        return name in self.list_dir(parent)

    def local_path(self, key: str) -> Path:
        """The file behind ``key`` (only with ``supports_local_path``).

        Raises
        ------
        StorageError
            If this store has no local files.
        """
        raise StorageError(f"{type(self).__name__} keeps no local files (key {key!r}): use get/put")

    def prepare(self, key: str, what: str = "") -> None:
        """Make ``key`` writable ahead of a write (create its prefixes durably; ``what`` names it in
        messages); default: nothing to do."""
        return None
