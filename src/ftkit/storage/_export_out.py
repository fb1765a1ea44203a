"""Where ``ftkit export`` writes: dataset names, the private temporary directory, the HDF5 and npy writers.

Rules a caller (:mod:`ftkit.storage.export`) may rely on:

* *Names.* An array with a global layout is the dataset ``name``; one without is the datasets
  ``name/rank<r>``. In HDF5 a dataset's path is its name (``/`` makes groups; empty components are dropped);
  with npy each dataset is the file ``<dataset with '/' as '.'>.npy``. :func:`check_names` refuses, before
  anything is created, two arrays that would land in one file or one HDF5 path (``x`` kept per rank and
  ``x.rank0``; ``a/b`` and ``a.b``; in HDF5 ``a`` and ``a/b``), naming both arrays and the other format,
  which keeps them apart.
* *No planted path is followed.* The output is built inside ``.OUT.partial``, a directory this export
  creates with ``mkdir`` (mode 0700: an existing name, a symbolic link included, is refused, never followed),
  and renamed to ``OUT`` only when complete; any failure removes the directory. One left by an export that
  was killed is named, with what to do.
* Every ``.npy`` file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and preallocated; slabs are written
  with ``pwrite`` at the place of their elements (:func:`pwrite_region`), as are the elements of an HDF5
  dataset that is contiguous (see :class:`Hdf5Writer`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import StorageError
from ._stream import byte_view
from .format.global_layout import Box, Layout, box_runs

__all__ = ["check_names", "open_writer", "write_error", "WRITE_ERRORS", "Hdf5Writer", "NpyWriter"]

#: What a failed write of the output raises (h5py reports a full disk as OSError or RuntimeError).
WRITE_ERRORS = (OSError, RuntimeError)
_NAME_BYTES = 255   # longest file name of the usual file systems


def npy_file(dataset: str) -> str:
    """The ``.npy`` file name of a dataset."""
    return dataset.replace("/", ".") + ".npy"


def hdf5_path(dataset: str) -> tuple[str, ...] | None:
    """A dataset's HDF5 path (its components); None if HDF5 cannot hold it (empty, or a ``.`` component)."""
    parts = tuple(p for p in dataset.split("/") if p)
    return None if not parts or "." in parts else parts


def check_names(fmt: str, datasets: Mapping[str, Sequence[str]]) -> None:
    """Refuse arrays whose datasets (array name → its dataset names) would overwrite each other in ``fmt``.

    Raises
    ------
    StorageError
        Naming both arrays, the place they share and the format that keeps them apart.
    """
    (_check_hdf5 if fmt == "hdf5" else _check_npy)(datasets)


def _check_npy(datasets: Mapping[str, Sequence[str]]) -> None:
    owner: dict[str, str] = {}
    for array, names in datasets.items():
        for key in map(npy_file, names):
            if len(key.encode()) > _NAME_BYTES:
                raise StorageError(f"array {array!r}: its file {key!r} would be longer than a file name "
                                   f"may be ({_NAME_BYTES} bytes): export --to hdf5 instead (nothing was "
                                   "written)")
            other = owner.setdefault(key, array)
            if other != array:
                raise StorageError(f"arrays {other!r} and {array!r} would both be written to {key}: export "
                                   "--to hdf5 instead, which keeps them apart (nothing was written)")


def _check_hdf5(datasets: Mapping[str, Sequence[str]]) -> None:
    owner: dict[tuple[str, ...], str] = {}    # dataset path -> array
    groups: dict[tuple[str, ...], str] = {}   # group path -> first array below it
    for array, names in datasets.items():
        for path in map(hdf5_path, names):
            if path is None:
                raise StorageError(f"array {array!r} cannot be an HDF5 dataset (an empty name or a '.' "
                                   "between '/'): export --to npy instead (nothing was written)")
            above = (owner[path[:i]] for i in range(1, len(path)) if path[:i] in owner)
            clash = owner.get(path) or groups.get(path) or next(above, None)
            if clash is not None and clash != array:
                raise StorageError(f"arrays {clash!r} and {array!r} cannot both be written to HDF5: one "
                                   "would be the dataset or group that holds the other ('/' in a name makes "
                                   "HDF5 groups): export --to npy instead (nothing was written)")
            owner[path] = array
            for i in range(1, len(path)):
                groups.setdefault(path[:i], array)


def _private_dir(out: Path) -> Path:
    """Create ``.OUT.partial`` next to ``out`` (mode 0700, never an existing name or link) and return it."""
    tmp = out.with_name(f".{out.name}.partial")
    try:
        os.mkdir(tmp, 0o700)
    except FileExistsError:
        raise StorageError(f"{tmp} exists: it is left over from an export to {out} that was interrupted "
                           f"(killed, or its machine went down), or another export to {out} is running now. "
                           f"If none is running, remove it (rm -r '{tmp}') and export again") from None
    except OSError as exc:
        raise write_error(out, exc) from exc
    return tmp


def _publish(tmp_dir: Path, out: Path) -> None:
    """Move the complete output ``tmp_dir/OUT`` to ``out`` and remove the emptied private directory."""
    os.replace(tmp_dir / out.name, out)
    with contextlib.suppress(OSError):
        os.rmdir(tmp_dir)


def open_writer(fmt: str, out: Path) -> Hdf5Writer | NpyWriter:
    """The writer of ``fmt`` (``"hdf5"``, else npy) building ``out`` inside its private directory."""
    return Hdf5Writer(out) if fmt == "hdf5" else NpyWriter(out)


def write_error(out: Path, exc: BaseException) -> StorageError:
    """The error of a failed write of the output (nothing is left at ``out``)."""
    return StorageError(f"cannot write the export to {out}: {exc} (is the disk full? nothing was left at "
                        f"{out}; free space or choose another place)")


class RawDataset(NamedTuple):
    """Where a dataset's elements lie in an output file: C order, from byte ``data_at`` of ``fd``."""

    fd: int
    data_at: int
    shape: tuple[int, ...]
    itemsize: int


def pwrite_region(dset: RawDataset, region: tuple[slice, ...], data: np.ndarray) -> None:
    """Write C-contiguous ``data`` at ``region`` of ``dset`` (``()``: a 0-d dataset): one ``pwrite`` per
    contiguous run of the file, no copy.

    Raises
    ------
    OSError
        If a write fails (a full disk).
    """
    fd, data_at, shape, itemsize = dset
    data = np.ascontiguousarray(data)
    view = byte_view(data.reshape(-1).view(np.uint8))
    if region and data.shape[1:] == shape[1:]:  # whole rows: one run
        todo = [(0, region[0].start * math.prod(shape[1:]) * itemsize, len(view))]
    elif region:
        start = tuple(r.start for r in region)
        zero = (0,) * len(shape)
        runs = box_runs(Layout(shape, (Box(zero, start, data.shape),)), data.shape,
                        Layout(shape, (Box(zero, zero, shape),)), shape, itemsize)
        todo = list(zip(runs.src.tolist(), runs.dst.tolist(), runs.nbytes.tolist(), strict=True))
    else:  # a 0-d array
        todo = [(0, 0, len(view))]
    for src, dst, n in todo:
        done = 0
        while done < n:
            done += os.pwrite(fd, view[src + done:src + n], data_at + dst + done)


class Hdf5Writer:
    """Datasets in one HDF5 file, built as ``.OUT.partial/OUT`` and renamed to ``OUT`` by :meth:`commit`.

    Each dataset is created contiguous, its storage allocated at once and never filled (every element is
    written by the export), so its elements lie at a fixed offset of the file (``get_offset``): slabs are
    written there with ``pwrite`` through a second descriptor, as HDF5's own ``sec2`` driver would, without
    HDF5's per-write selection work. A dataset without such an offset (a type HDF5 stores differently) is
    written with h5py ``write_direct``.
    """

    def __init__(self, out: Path) -> None:
        try:
            import h5py
        except ImportError as exc:
            raise StorageError("export to HDF5 needs h5py: pip install 'ftkit[hdf5]' (or export --to npy)") \
                from exc
        self.h5py = h5py
        self.out, self.dir = out, _private_dir(out)
        self.tmp, self.fd = self.dir / out.name, -1
        self.file: Any = None
        try:
            self.file = h5py.File(self.tmp, "w-")
            self.fd = os.open(self.tmp, os.O_WRONLY | os.O_NOFOLLOW)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, WRITE_ERRORS):
                raise write_error(out, exc) from exc
            raise

    def create(self, name: str, shape: tuple[int, ...], dtype: str) -> Any:
        """A new dataset: a :class:`RawDataset` when its elements have a fixed place, else the h5py one."""
        h5p, h5d = self.h5py.h5p, self.h5py.h5d
        dt = np.dtype(dtype)
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5d.FILL_TIME_NEVER)
        path = hdf5_path(name)
        try:
            if path is None:   # check_names refuses such a name first
                raise ValueError("an empty name or a '.' between '/'")
            dset = self.file.create_dataset("/".join(path), shape=shape, dtype=dt, dcpl=dcpl)
        except ValueError as exc:   # h5py's "name already exists": check_names keeps this from happening
            raise StorageError(f"dataset {name!r} cannot be created in HDF5 ({exc}): export --to npy "
                               "instead") from exc
        except WRITE_ERRORS as exc:
            raise write_error(self.out, exc) from exc
        at = dset.id.get_offset()
        if at is None or dset.dtype != dt or dset.id.get_type().get_size() != dt.itemsize:
            return dset
        return RawDataset(self.fd, at, tuple(shape), dt.itemsize)

    def write(self, dset: Any, region: tuple[slice, ...], data: np.ndarray) -> None:
        """Write C-contiguous ``data`` at ``region`` of ``dset`` (no intermediate copy)."""
        try:
            if isinstance(dset, RawDataset):
                pwrite_region(dset, region, data)
            elif region:
                dset.write_direct(data, dest_sel=region)
            else:
                dset[()] = data
        except WRITE_ERRORS as exc:
            raise write_error(self.out, exc) from exc

    def commit(self, attrs: dict[str, Any]) -> None:
        """Write the attributes, close the file and move it to ``OUT``."""
        assert self.file is not None
        try:
            self._close_fd()
            for k, v in attrs.items():
                self.file.attrs[k] = v
            self.file.close()
        except WRITE_ERRORS as exc:
            raise write_error(self.out, exc) from exc
        _publish(self.dir, self.out)

    def _close_fd(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def abort(self) -> None:
        """Close everything and remove the private directory."""
        with contextlib.suppress(OSError):
            self._close_fd()
        with contextlib.suppress(Exception):
            if self.file is not None:
                self.file.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class NpyWriter:
    """One ``.npy`` file per dataset (see :func:`npy_file`) in a new directory, plus ``attributes.json``,
    built as ``.OUT.partial/OUT`` and renamed to ``OUT`` by :meth:`commit`. Each file is created exclusively
    and preallocated (a full disk fails there) and written with ``pwrite``."""

    def __init__(self, out: Path) -> None:
        self.out, self.dir = out, _private_dir(out)
        self.tmp = self.dir / out.name
        self.fds: list[int] = []
        try:
            self.tmp.mkdir()
        except OSError as exc:
            self.abort()
            raise write_error(out, exc) from exc

    def create(self, name: str, shape: tuple[int, ...], dtype: str) -> RawDataset:
        """A new, preallocated ``.npy`` file for dataset ``name``."""
        dt = np.dtype(dtype)
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": np.lib.format.dtype_to_descr(dt),
                                                    "fortran_order": False, "shape": tuple(shape)})
        try:
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
            fd = os.open(self.tmp / npy_file(name), flags, 0o666)
            self.fds.append(fd)
            os.posix_fallocate(fd, 0, head.tell() + math.prod(shape) * dt.itemsize)
            os.pwrite(fd, head.getvalue(), 0)
        except WRITE_ERRORS as exc:
            raise write_error(self.out, exc) from exc
        return RawDataset(fd, head.tell(), tuple(shape), dt.itemsize)

    def write(self, dset: RawDataset, region: tuple[slice, ...], data: np.ndarray) -> None:
        """Write C-contiguous ``data`` at ``region`` of ``dset`` (see :func:`pwrite_region`)."""
        try:
            pwrite_region(dset, region, data)
        except WRITE_ERRORS as exc:
            raise write_error(self.out, exc) from exc

    def commit(self, attrs: dict[str, Any]) -> None:
        """Sync the files, write ``attributes.json`` and move the directory to ``OUT``."""
        try:
            for fd in self.fds:
                os.fsync(fd)
            self._close()
            (self.tmp / "attributes.json").write_text(json.dumps(attrs, indent=1, sort_keys=True) + "\n")
        except WRITE_ERRORS as exc:
            raise write_error(self.out, exc) from exc
        _publish(self.dir, self.out)

    def _close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def abort(self) -> None:
        """Close the files and remove the private directory."""
        self._close()
        shutil.rmtree(self.dir, ignore_errors=True)
