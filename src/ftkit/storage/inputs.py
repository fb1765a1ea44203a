"""Where a failed process's inputs are read from: the input-store contract and its directory store.

Contract (:class:`InputStore`): ``save(key, array)`` makes the array readable by every rank under ``key`` once
it returns (atomically: a reader sees the whole array or nothing); ``load(key)`` returns exactly what was
saved or raises (:class:`~ftkit.errors.StorageError` if absent, :class:`~ftkit.errors.FormatError` /
:class:`~ftkit.errors.CorruptionError` if damaged or not the file saved under that key); ``remove(prefix)``
drops a set of keys. Keys are ``/``-separated plain names (:func:`ftkit._paths.check_plain_name`).

:class:`CheckpointFileStore` (what :func:`open_store` makes of a directory path) keeps one file per key,
``<root>/<key>.ftk``, in ftkit's checkpoint container (:mod:`ftkit.storage.format.container`: header with
per-section xxh3 digests, written by the one atomic writer), level 4 in the header: the same files ``ftkit
verify`` checks. The file holds one section ``data`` and records in its header ``meta`` the key (a file moved
to another key is refused) and the array order (an F-order array is stored as its C-order transpose).
Nothing read is ever executed or unpickled.

Recycling, an optional part of the contract (:class:`RecyclingInputStore`, declared by a true
``supports_recycle``; :func:`recycles` tells): a writer that saves an array of the same size again and again
under new keys (a failure-tolerant routine's per-call input) can ``retire`` a key it no longer needs to a
spare key no reader asks for, and pass that spare as ``save(..., recycle=)``: the file is taken over and
written in place (its page-cache pages reused, nothing allocated, truncated or freed), under a temporary
name as any save, so readers see exactly what they see of a new file. A store without the flag is used
without recycling. :class:`CheckpointFileStore` recycles.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Protocol, TypeGuard

import numpy as np

from .._paths import check_plain_name, check_removable, inside
from ..errors import FormatError, FtkitError, StorageError, UnsafePathError
from ._fsutil import make_dirs
from .format.container import read_arrays, read_header, write_file

__all__ = ["InputStore", "RecyclingInputStore", "recycles", "CheckpointFileStore", "open_store"]

_DTYPES = {"float64", "float32", "int64", "int32", "int8", "uint8", "complex128"}


class InputStore(Protocol):
    """Arrays saved by one rank and readable by every other rank (see the module docstring)."""

    def save(self, key: str, array: np.ndarray) -> None:
        """Save ``array`` under ``key`` (atomic; overwrites)."""
        ...

    def load(self, key: str) -> np.ndarray:
        """Return the array saved under ``key``."""
        ...

    def remove(self, prefix: str) -> None:
        """Remove every key under ``prefix``."""
        ...


class RecyclingInputStore(InputStore, Protocol):
    """An :class:`InputStore` that recycles files (see the module docstring): ``supports_recycle`` is true."""

    supports_recycle: bool

    def save(self, key: str, array: np.ndarray, *, recycle: str | None = None) -> None:
        """Save ``array`` under ``key`` (atomic; overwrites), in the file of the spare key ``recycle`` if one
        is given (the spare is gone afterwards; nothing under it: a new file)."""
        ...

    def retire(self, key: str, spare: str) -> None:
        """Move what is saved under ``key`` to the key ``spare`` (nothing under ``key``: nothing is done)."""
        ...


def recycles(store: InputStore) -> TypeGuard[RecyclingInputStore]:
    """Return whether ``store`` recycles files (a true ``supports_recycle``; a store without it does not)."""
    return bool(getattr(store, "supports_recycle", False))


def _key_parts(key: str, what: str = "store key") -> list[str]:
    parts = [p for p in str(key).split("/") if p]
    try:
        if not parts:
            raise StorageError("empty")
        for p in parts:
            check_plain_name(p, what)
    except FtkitError as exc:
        raise StorageError(f"invalid {what} {key!r}: use '/'-separated plain names without '.' or '..' "
                           f"({exc})") from exc
    return parts


class CheckpointFileStore:
    """An :class:`InputStore` of ftkit checkpoint files (``<root>/<key>.ftk``, level 4) in a shared directory.

    Parameters
    ----------
    root
        Directory readable and writable by every rank (the L4 / ``glbl_dir`` directory, or a sub-directory).
    rank, nranks
        Identity recorded in the file headers (the saving rank and the communicator size).
    fsync
        Make every file durable before it becomes visible (default True).
    """

    #: :meth:`save` takes ``recycle=`` and :meth:`retire` exists (see the module docstring).
    supports_recycle = True

    def __init__(
        self, root: str | os.PathLike[str], *, rank: int = 0, nranks: int = 1, fsync: bool = True
    ) -> None:
        self.root = Path(root)
        self.rank, self.nranks, self.fsync = int(rank), int(nranks), fsync

    def __repr__(self) -> str:
        return f"CheckpointFileStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        parts = _key_parts(key)
        return inside(self.root, *parts[:-1], parts[-1] + ".ftk", what=f"input store key {key!r}")

    def save(self, key: str, array: np.ndarray, *, recycle: str | None = None) -> None:
        """Save ``array`` under ``key`` as a one-section checkpoint file (atomic).

        ``recycle``: a spare key (:meth:`retire`) whose file is taken over and written in place; the spare
        is gone afterwards. Nothing under it: a new file.

        Raises
        ------
        StorageError
            If the key is not made of plain names, the dtype is not a plain numeric type, the file would be
            written through a symbolic link leading out of the store (``errno`` ELOOP: the callers' failed
            save, raised alike on every rank), or it cannot be written.
        """
        arr = np.asarray(array)
        if arr.dtype.name not in _DTYPES:
            raise StorageError(f"cannot store dtype {arr.dtype}: use one of {sorted(_DTYPES)}")
        # The container stores C-contiguous sections: an F-order array is stored as its (C-order) transpose.
        order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
        data = arr.T if order == "F" else np.ascontiguousarray(arr)
        try:
            path, spare = self._path(key), self._path(recycle) if recycle is not None else None
        except UnsafePathError as exc:  # a link leading out of the store: a failed save, like a full disk
            raise StorageError(errno.ELOOP, str(exc)) from exc
        write_file(path, [("data", data)], rank=self.rank, level=4, ckpt_id=0, exec_id=key.split("/")[0],
                   nranks=self.nranks, meta={"ftkit_input_store": 1, "order": order, "key": key},
                   fsync=self.fsync, recycle=spare)

    def retire(self, key: str, spare: str) -> None:
        """Move the file saved under ``key`` to the key ``spare`` (one no reader asks for: its header still
        names ``key``, so even a load of ``spare`` refuses it), for a later ``save(..., recycle=spare)``.
        Nothing under ``key``: nothing is done. The directory of ``key``, if the move leaves it empty, is
        removed (ranks retiring their files from one directory: the last one out removes it).

        Raises
        ------
        StorageError
            If a key is not made of plain names, or the file cannot be moved.
        """
        src, dst = self._path(key), self._path(spare)
        try:
            make_dirs(dst.parent)
            os.replace(src, dst)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot move {src} to {dst}: {exc.strerror or exc}") from exc
        if src.parent != self.root:
            with contextlib.suppress(OSError):  # not empty (another rank's file is still there), or gone
                src.parent.rmdir()

    def load(self, key: str) -> np.ndarray:
        """Return the array saved under ``key``, every digest checked.

        Raises
        ------
        StorageError
            If nothing was saved under ``key``.
        FormatError, CorruptionError
            If the file is not a valid ftkit input-store file, was saved under another key, or its data do
            not match their digests.
        """
        path = self._path(key)
        if not path.exists():
            raise StorageError(f"nothing saved under {key!r} ({path} is missing)")
        header = read_header(path)
        order = header.meta.get("order")
        if order not in ("C", "F") or header.meta.get("ftkit_input_store") != 1:
            raise FormatError(f"{path}: not an ftkit input-store file (meta.order={order!r})")
        if header.meta.get("key") != key:
            raise FormatError(f"{path}: holds the array saved under {header.meta.get('key')!r}, not {key!r} "
                              "(a file moved or copied between keys): save the array again")
        if [s.name for s in header.sections] != ["data"]:
            raise FormatError(f"{path}: an input-store file holds exactly one section 'data'")
        if order == "F" and len(header.sections[0].shape) < 2:
            raise FormatError(f"{path}: order 'F' recorded for a {len(header.sections[0].shape)}-D array")
        data = read_arrays(path, header=header)["data"]
        return data.T if order == "F" else data

    def remove(self, prefix: str) -> None:
        """Remove every key under ``prefix`` (missing keys are ignored).

        Raises
        ------
        StorageError
            If ``prefix`` is not made of plain names.
        UnsafePathError
            If the files to remove are not inside the store's root (a symbolic link leading out).
        """
        parts = _key_parts(prefix, "store prefix")
        tree = self.root.joinpath(*parts)
        if tree.is_dir() and not tree.is_symlink():
            check_removable(tree, self.root, f"input store prefix {prefix!r}")
            shutil.rmtree(tree, ignore_errors=True)
        self._path(prefix).unlink(missing_ok=True)


def open_store(where: InputStore | str | os.PathLike[str], *, rank: int = 0, nranks: int = 1,
               fsync: bool = True) -> InputStore:
    """Return ``where`` if it is a store, else a :class:`CheckpointFileStore` on that directory (``fsync``:
    as the store's)."""
    if isinstance(where, (str, os.PathLike)):
        return CheckpointFileStore(where, rank=rank, nranks=nranks, fsync=fsync)
    return where
