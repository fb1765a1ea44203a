"""Where a failed process's inputs are read from: a small store contract and shared-directory stores.

Contract (:class:`InputStore`): ``save(key, array)`` makes the array readable by every rank under ``key``
once it
returns (atomically: a reader sees the whole array or nothing); ``load(key)`` returns exactly what was
saved or
raises (:class:`~ftkit.errors.StorageError` if absent, :class:`~ftkit.errors.CorruptionError` if damaged);
``remove(prefix)`` drops a set of keys. Keys are ``/``-separated names.

:class:`DirectoryStore` keeps one file per key in a directory every rank can read (the checkpoint L4 /
``glbl_dir`` on a parallel file system). File layout, which a reader may rely on: the magic line
``FTKIT-ARRAY 1\\n``, one JSON header line (``dtype`` among plain numeric types, ``shape``, ``order``
``"F"``/``"C"``, ``xxh3`` = hex xxh3-64 of the data bytes, ``nbytes``), then the raw array bytes. The
header is
parsed as JSON and validated; nothing read is ever executed or unpickled.

:class:`CheckpointFileStore` (the default for a directory path) writes ftkit's checkpoint container instead
(:mod:`ftkit.storage.format`: header with per-section xxh3 digests, atomic commit), one ``<key>.ftk`` file per
key, level 4 in the header: the same files ``ftkit verify`` checks.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

import numpy as np
import xxhash

from ..errors import CorruptionError, FormatError, StorageError

__all__ = ["InputStore", "DirectoryStore", "CheckpointFileStore", "open_store"]

_MAGIC = b"FTKIT-ARRAY 1\n"
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


class DirectoryStore:
    """An :class:`InputStore` of checksummed files in a shared directory.

    Parameters
    ----------
    root
        Directory readable and writable by every rank (created if missing).
    fsync
        Flush every file to stable storage before it becomes visible (default True; tests on tmpfs may skip).
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"DirectoryStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise StorageError(f"invalid store key {key!r}: use '/'-separated names without '.' or '..'")
        return self.root.joinpath(*parts)

    def save(self, key: str, array: np.ndarray) -> None:
        """Save ``array`` under ``key``: temporary file, (fsync), rename.

        Raises
        ------
        StorageError
            If the dtype is not a plain numeric type or the file cannot be written.
        """
        arr = np.asarray(array)
        if arr.dtype.name not in _DTYPES:
            raise StorageError(f"cannot store dtype {arr.dtype}: use one of {sorted(_DTYPES)}")
        order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
        data = np.ascontiguousarray(arr) if order == "C" else np.asfortranarray(arr)
        raw = memoryview(data.reshape(-1, order="A")).cast("B")  # type: ignore[arg-type]
        header = {
            "dtype": arr.dtype.name,
            "shape": list(arr.shape),
            "order": order,
            "xxh3": xxhash.xxh3_64_hexdigest(raw),
            "nbytes": raw.nbytes,
        }
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_MAGIC)
                    f.write(json.dumps(header).encode() + b"\n")
                    f.write(raw)
                    if self.fsync:
                        f.flush()
                        os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise StorageError(f"cannot save {key!r} to {target}: {exc}") from exc

    def load(self, key: str) -> np.ndarray:
        """Return the array saved under ``key``, checked against its digest.

        Raises
        ------
        StorageError
            If no array was saved under ``key``.
        FormatError
            If the file is not an ftkit array file or is truncated.
        CorruptionError
            If the data do not match the recorded xxh3 digest.
        """
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError as exc:
            raise StorageError(f"nothing saved under {key!r} ({path} is missing)") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        if not blob.startswith(_MAGIC):
            raise FormatError(f"{path} is not an ftkit array file (bad magic)")
        end = blob.find(b"\n", len(_MAGIC))
        try:
            header = json.loads(blob[len(_MAGIC) : end])
            dtype, shape, order = header["dtype"], tuple(int(s) for s in header["shape"]), header["order"]
            digest, nbytes = str(header["xxh3"]), int(header["nbytes"])
        except (ValueError, KeyError, TypeError) as exc:
            raise FormatError(f"{path}: unreadable header: {exc}") from exc
        if dtype not in _DTYPES or order not in ("C", "F") or any(s < 0 for s in shape):
            raise FormatError(f"{path}: invalid header {header}")
        raw = memoryview(blob)[end + 1 :]
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if raw.nbytes != nbytes or nbytes != expected:
            raise FormatError(
                f"{path} is truncated or inconsistent: {raw.nbytes} data bytes, header says "
                f"{nbytes}, shape needs {expected}"
            )
        if xxhash.xxh3_64_hexdigest(raw) != digest:
            raise CorruptionError(f"{path}: data do not match their xxh3 digest (file damaged)")
        return np.frombuffer(raw, dtype=dtype).reshape(shape, order=order).copy(order=order)  # type: ignore[call-overload]

    def remove(self, prefix: str) -> None:
        """Remove every key under ``prefix`` (missing keys are ignored)."""
        path = self._path(prefix)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


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

    def __init__(
        self, root: str | os.PathLike[str], *, rank: int = 0, nranks: int = 1, fsync: bool = True
    ) -> None:
        self.root = Path(root)
        self.rank, self.nranks, self.fsync = int(rank), int(nranks), fsync

    def __repr__(self) -> str:
        return f"CheckpointFileStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise StorageError(f"invalid store key {key!r}: use '/'-separated names without '.' or '..'")
        return self.root.joinpath(*parts[:-1], parts[-1] + ".ftk")

    def save(self, key: str, array: np.ndarray) -> None:
        """Save ``array`` under ``key`` as a one-section checkpoint file (atomic).

        Raises
        ------
        StorageError
            If the dtype is not a plain numeric type or the file cannot be written.
        """
        from ..storage.format import write_file

        arr = np.asarray(array)
        if arr.dtype.name not in _DTYPES:
            raise StorageError(f"cannot store dtype {arr.dtype}: use one of {sorted(_DTYPES)}")
        # The container stores C-contiguous sections: an F-order array is stored as its (C-order) transpose.
        order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
        data = arr.T if order == "F" else np.ascontiguousarray(arr)
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {path.parent}: {exc}") from exc
        write_file(
            path,
            [("data", data)],
            rank=self.rank,
            level=4,
            ckpt_id=0,
            exec_id=key.split("/")[0],
            nranks=self.nranks,
            meta={"ftkit_input_store": 1, "order": order, "key": key},
            fsync=self.fsync,
        )

    def load(self, key: str) -> np.ndarray:
        """Return the array saved under ``key``, every digest checked.

        Raises
        ------
        StorageError
            If nothing was saved under ``key``.
        FormatError, CorruptionError
            If the file is not a valid ftkit file or its data do not match their digests.
        """
        from ..storage.format import read_arrays, read_header

        path = self._path(key)
        if not path.exists():
            raise StorageError(f"nothing saved under {key!r} ({path} is missing)")
        header = read_header(path)
        order = header.meta.get("order")
        if order not in ("C", "F"):
            raise FormatError(f"{path}: not an ftkit input-store file (meta.order={order!r})")
        data = read_arrays(path)["data"]
        return data.T if order == "F" else data

    def remove(self, prefix: str) -> None:
        """Remove every key under ``prefix`` (missing keys are ignored)."""
        parts = [p for p in prefix.split("/") if p]
        path = self.root.joinpath(*parts) if parts else None
        if path is None or any(p in (".", "..") for p in parts):
            raise StorageError(f"invalid store prefix {prefix!r}")
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        self._path(prefix).unlink(missing_ok=True)


def open_store(where: InputStore | str | os.PathLike[str], *, rank: int = 0, nranks: int = 1) -> InputStore:
    """Return ``where`` if it is a store, else a :class:`CheckpointFileStore` on that directory."""
    if isinstance(where, (str, os.PathLike)):
        return CheckpointFileStore(where, rank=rank, nranks=nranks)
    return where
