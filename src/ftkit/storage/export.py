"""``ftkit export DIR --to hdf5 OUT.h5`` / ``--to npy OUTDIR``: a checkpoint as plain arrays, without MPI.

Every array protected with a global layout becomes one dataset of its global shape (a matrix protected with
``protect_matrix`` is written in its own orientation, ``M x N``); an array without a layout becomes one
dataset per rank (``name/rank<r>`` in HDF5, ``name.rank<r>.npy``). Attributes: ``checkpoint_id``, ``level``,
``run_id``, ``nranks``, ``complete_levels``, and every replicated array of at most 16 elements (a step
counter) under its name; with npy they go to ``attributes.json``.

The newest complete checkpoint is exported (or ``--id``), from each rank's L1 file where it is readable, else
its L4 file, each checked against the manifest's digest; a lost node-local file is rebuilt first with
``ftkit rebuild``. Memory stays bounded: boxes are copied slab by slab (at most ``chunk_bytes`` per slab,
one row of a box at least) and every byte read is verified against its chunk digest; the output is written
under a temporary name and renamed only when complete, so a damaged checkpoint leaves nothing behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..errors import CheckpointNotFoundError, CorruptionError, FormatError, StorageError
from ._stream import byte_view, read_into
from .boxread import read_runs
from .format import DEFAULT_CHUNK, Header, Section, read_header
from .header import digest_hex
from .layout import Box, Layout, box_runs, coverage_problem
from .levels import make_level
from .locate import find_manifest, run_roots
from .manifest import CheckpointEntry

__all__ = ["export_checkpoint", "add_parser", "run_export"]

#: Replicated arrays up to this many elements are also written as attributes (step counters and the like).
_ATTR_MAX = 16


def export_checkpoint(target: str | Path, fmt: str, out: str | os.PathLike[str],
                      ckpt_id: int | None = None, chunk_bytes: int = DEFAULT_CHUNK) -> dict[str, Any]:
    """Export a checkpoint of the run at ``target`` (meta_dir, its parent or a config file) to ``out``.

    Parameters
    ----------
    fmt
        ``"hdf5"`` (``out`` is the ``.h5`` file; needs h5py: ``pip install ftkit[hdf5]``) or ``"npy"``
        (``out`` is a new directory of ``.npy`` files).
    ckpt_id
        The checkpoint to export (default: the newest complete one).
    chunk_bytes
        Largest slab copied at once (bytes).

    Returns
    -------
    dict
        The attributes written (checkpoint id, level, run id, ...).

    Raises
    ------
    CheckpointNotFoundError
        No manifest, no such checkpoint, or a rank's file has no verified copy.
    StorageError
        ``out`` exists, h5py is missing, or a file is damaged (nothing is left at ``out``).
    """
    found = find_manifest(target)
    if found is None:
        raise CheckpointNotFoundError(f"{target}: no manifest.json here (give the run's meta_dir, its parent "
                                      "or its config file)")
    meta_dir, m = found
    complete = [e for e in m.newest_first() if e.complete_levels]
    chosen = [e for e in complete if ckpt_id is None or e.id == ckpt_id]
    if not chosen:
        raise CheckpointNotFoundError(f"run {m.exec_id} has no complete checkpoint"
                                      + (f" with id {ckpt_id} (complete: {[e.id for e in complete]})"
                                         if ckpt_id is not None else ""))
    entry = chosen[0]
    files = _locate(meta_dir, m.exec_id, m, entry, chunk_bytes)
    out = Path(out)
    if out.exists():
        raise StorageError(f"{out} exists: choose a new name (export never overwrites)")
    attrs: dict[str, Any] = {"checkpoint_id": entry.id, "level": entry.level, "run_id": m.exec_id,
                             "nranks": len(entry.files), "complete_levels": list(entry.complete_levels)}
    writer = _Hdf5Writer(out) if fmt == "hdf5" else _NpyWriter(out)
    try:
        for name in [s.name for s in files[0][1].sections]:
            _export_array(name, files, writer, attrs, chunk_bytes)
        writer.commit(attrs)
    except BaseException:
        writer.abort()
        raise
    return attrs


def _locate(meta_dir: Path, exec_id: str, m: Any, entry: CheckpointEntry,
            chunk: int) -> list[tuple[Path, Header]]:
    """A verified-header copy of every rank's file: L1, else L4."""
    ckpt, glbl = run_roots(meta_dir, m)
    out = []
    for rank, f in enumerate(entry.files):
        why = []
        for lv in (1, 4):
            if not entry.complete(lv):
                continue
            path = make_level(lv, ckpt, glbl, exec_id, entry.nodes, chunk).path(entry.id, rank)
            try:
                header = read_header(path)
            except (StorageError, OSError) as exc:
                why.append(f"L{lv}: {exc}")
                continue
            if header.digest != f.digest:
                why.append(f"L{lv}: {path} is not the committed file")
                continue
            out.append((path, header))
            break
        else:
            raise CheckpointNotFoundError(f"checkpoint {entry.id}: no readable copy of rank {rank}'s file ("
                                          + "; ".join(why or ["not complete at L1 or L4"])
                                          + "): run 'ftkit rebuild' first if it is held at L2/L3")
    return out


def _export_array(name: str, files: list[tuple[Path, Header]], writer: Any, attrs: dict[str, Any],
                  chunk_bytes: int) -> None:
    secs = [h.section(name) for _, h in files]
    layouts = [s.layout for s in secs]
    if any(lay is None for lay in layouts):
        for rank, ((path, _), sec) in enumerate(zip(files, secs, strict=True)):
            dset = writer.create(f"{name}/rank{rank}", sec.shape, sec.dtype)
            _copy_section(path, sec, dset, chunk_bytes)
        return
    lays = [lay for lay in layouts if lay is not None]
    problem = coverage_problem(name, lays)
    if problem or len({s.dtype for s in secs}) > 1:
        raise FormatError(f"the stored layouts cannot be assembled: {problem or f'{name!r}: dtypes differ'}")
    transpose = lays[0].order == "F"
    gshape = lays[0].global_shape[::-1] if transpose else lays[0].global_shape
    dset = writer.create(name, gshape, secs[0].dtype)
    sources = [0] if all(lay.replicated for lay in lays) else range(len(files))
    for rank in sources:
        path, sec = files[rank][0], secs[rank]
        for box in lays[rank].boxes:
            for start, buf in _slabs(path, sec, lays[rank], box, chunk_bytes):
                region = tuple(slice(a, a + n) for a, n in zip(start, buf.shape, strict=True))
                if transpose:
                    dset[region[::-1]] = buf.T
                else:
                    dset[region] = buf
    if lays[0].replicated and math.prod(gshape) <= _ATTR_MAX and np.dtype(secs[0].dtype).kind in "biuf":
        attrs[name] = np.asarray(dset[...]).tolist()


def _slabs(path: Path, sec: Section, layout: Layout, box: Box,
           chunk_bytes: int) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """The box's data slab by slab along axis 0 (global start of each slab, verified contents)."""
    dtype = np.dtype(sec.dtype)
    row = max(1, math.prod(box.shape[1:]) * dtype.itemsize)
    step = max(1, chunk_bytes // row)
    for i in range(0, box.shape[0], step):
        shape = (min(step, box.shape[0] - i), *box.shape[1:])
        start = (box.start[0] + i, *box.start[1:])
        want = Layout(layout.global_shape, (Box((0,) * len(shape), start, shape),))
        buf = np.empty(shape, dtype=dtype)
        runs = box_runs(layout, sec.shape, want, shape, dtype.itemsize)
        read_runs(path, sec, runs, byte_view(buf.reshape(-1).view(np.uint8)), piece_bytes=chunk_bytes)
        yield start, buf


def _copy_section(path: Path, sec: Section, dset: Any, chunk_bytes: int) -> None:
    """Stream a section without a layout into ``dset``, slab by slab, checking its whole-section digest."""
    dtype = np.dtype(sec.dtype)
    shape = sec.shape or (1,)  # a 0-d array is one element
    row = max(1, math.prod(shape[1:]) * dtype.itemsize)
    step = max(1, chunk_bytes // row)
    hasher = xxhash.xxh3_64()
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(0, shape[0], step):
            buf = np.empty((min(step, shape[0] - i), *shape[1:]), dtype=dtype)
            raw = buf.reshape(-1).view(np.uint8)
            read_into(fd, sec.offset + i * row, raw, sec.offset + sec.nbytes)
            hasher.update(byte_view(raw))
            if sec.shape:
                dset[i:i + buf.shape[0]] = buf
            else:
                dset[()] = buf[0]
    finally:
        os.close(fd)
    _check_digest(path, sec, digest_hex(hasher))


def _check_digest(path: Path, sec: Section, got: str) -> None:
    if got != sec.xxh3:
        raise CorruptionError(f"{path}: checksum mismatch in section {sec.name!r} (stored {sec.xxh3}, "
                              f"computed {got}): the file is damaged")


class _Hdf5Writer:
    """Datasets in one HDF5 file, written under a temporary name and renamed by :meth:`commit`."""

    def __init__(self, out: Path) -> None:
        try:
            import h5py
        except ImportError as exc:
            raise StorageError("export to HDF5 needs h5py: pip install 'ftkit[hdf5]' (or export --to npy)") \
                from exc
        self.out, self.tmp = out, out.with_name(f".{out.name}.partial")
        self.file = h5py.File(self.tmp, "w")

    def create(self, name: str, shape: tuple[int, ...], dtype: str) -> Any:
        return self.file.create_dataset(name, shape=shape, dtype=np.dtype(dtype))

    def commit(self, attrs: dict[str, Any]) -> None:
        for k, v in attrs.items():
            self.file.attrs[k] = v
        self.file.close()
        os.replace(self.tmp, self.out)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.file.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()


class _NpyWriter:
    """One ``.npy`` file per dataset (``/`` in a name becomes ``.``) in a new directory, plus
    ``attributes.json``; the directory is renamed into place by :meth:`commit`."""

    def __init__(self, out: Path) -> None:
        self.out, self.tmp = out, out.with_name(f".{out.name}.partial")
        self.tmp.mkdir(parents=True)
        self.arrays: list[np.memmap] = []

    def create(self, name: str, shape: tuple[int, ...], dtype: str) -> Any:
        path = self.tmp / (name.replace("/", ".") + ".npy")
        arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=shape)
        self.arrays.append(arr)
        return arr

    def commit(self, attrs: dict[str, Any]) -> None:
        for arr in self.arrays:
            arr.flush()
        self.arrays.clear()
        (self.tmp / "attributes.json").write_text(json.dumps(attrs, indent=1, sort_keys=True) + "\n")
        os.replace(self.tmp, self.out)

    def abort(self) -> None:
        self.arrays.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_export(args: argparse.Namespace) -> int:
    """Carry out ``ftkit export``."""
    fmt, out = args.to
    if fmt not in ("hdf5", "npy"):
        raise StorageError(f"--to {fmt}: use --to hdf5 OUT.h5 or --to npy OUTDIR")
    attrs = export_checkpoint(args.dir, fmt, out, args.id)
    print(f"exported checkpoint {attrs['checkpoint_id']} (level {attrs['level']}) of run {attrs['run_id']} "
          f"to {out}")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``ftkit export``."""
    p = sub.add_parser("export", help="write a checkpoint's arrays to HDF5 or .npy files",
                       description=__doc__.splitlines()[0])
    p.add_argument("dir", help="the run's meta_dir, its parent, or its config file")
    p.add_argument("--to", nargs=2, metavar=("FORMAT", "OUT"), required=True,
                   help="hdf5 OUT.h5, or npy OUTDIR")
    p.add_argument("--id", type=int, default=None, help="checkpoint id (default: the newest complete one)")
    p.set_defaults(func=run_export)
