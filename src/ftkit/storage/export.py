"""``ftkit export DIR --to hdf5 OUT.h5`` / ``--to npy OUTDIR``: a checkpoint as plain arrays, without MPI.

Every array protected with a global layout becomes one dataset of its global shape (a matrix protected with
``protect_matrix`` is written in its own orientation, ``M x N``); an array without a layout becomes one
dataset per rank (``name/rank<r>`` in HDF5, ``name.rank<r>.npy``; ``/`` in a name makes HDF5 groups and
becomes ``.`` in a file name). Two arrays that would land in one file or HDF5 path are refused before
anything is written, naming both (see :mod:`ftkit.storage._export_out`). Attributes: ``checkpoint_id``,
``level``, ``run_id``, ``nranks``, ``complete_levels`` (:data:`RUN_ATTRIBUTES`, which no array replaces), and
every other replicated array of at most 16 elements (a step counter) under its name; with npy they go to
``attributes.json``.

The newest complete checkpoint is exported (or ``--id``), from the first copy of each rank's file that
:class:`~ftkit.storage.repair.copies.RunCopies` finds (L1, the L2 partner copy, L4 -- a differential L4
checkpoint read in place), each checked against the manifest's digest; a file held only as L3 parity is
rebuilt first with ``ftkit rebuild``. Memory stays bounded: boxes are copied slab by slab through one reused
buffer (at most ``chunk_bytes`` per slab, one row of a box at least; a box whose rows are one contiguous run
of a plain file is mapped instead, up to 64 MiB at once, and taken in 4 MiB slabs), every byte read is
verified against its chunk digest before it is written, and slabs go to the output without another copy:
``pwrite`` at the place of their elements (an HDF5 dataset is contiguous with its storage allocated at
creation, so its elements have a fixed offset in the file; ``.npy`` files are preallocated). The output is
built inside a private directory ``.OUT.partial`` that the export creates (a name planted there is refused,
never followed) and renamed only when complete, so a damaged checkpoint or a full disk leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..errors import CheckpointNotFoundError, CorruptionError, FormatError, StorageError
from ._export_out import check_names, open_writer
from ._progress import Progress
from ._stream import byte_view
from .format.boxread import map_run, read_runs
from .format.container import DEFAULT_CHUNK, Header, Section
from .format.global_layout import Box, Layout, Runs, box_runs, coverage_problem
from .format.header import digest_hex
from .format.source import ByteSource
from .manifest import CheckpointEntry
from .repair.copies import Copy, RunCopies
from .repair.locate import locate_run

__all__ = ["export_checkpoint", "RUN_ATTRIBUTES"]

#: Replicated arrays up to this many elements are also written as attributes (step counters and the like).
_ATTR_MAX = 16
#: The export's own attributes: an array of one of these names is not written as an attribute.
RUN_ATTRIBUTES = ("checkpoint_id", "level", "run_id", "nranks", "complete_levels")
#: Largest part of a file mapped at once (bytes): a mapping costs no buffer, and fewer mappings cost less.
_MAP_BYTES = 64 * 2**20
#: Slabs of a mapping (bytes): each is verified and then written while it is still in the CPU cache (the
#: digest pass and the write read it once from memory, not twice).
_SLAB_BYTES = 4 * 2**20


def export_checkpoint(target: str | Path, fmt: str, out: str | os.PathLike[str],
                      ckpt_id: int | None = None, chunk_bytes: int = DEFAULT_CHUNK, *,
                      root: str | Path | None = None, progress: Progress | None = None) -> dict[str, Any]:
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
    root, progress
        Where a moved run's directories are now (:func:`.locate.locate_run`); what counts the bytes written.

    Returns
    -------
    dict
        The attributes written (checkpoint id, level, run id, ...).

    Raises
    ------
    CheckpointNotFoundError
        No manifest, no such checkpoint, or a rank's file has no verified copy.
    StorageError
        ``out`` exists, ``.OUT.partial`` exists (left by an interrupted export: the message says what to
        do), two arrays would be written to one file or HDF5 path (naming both), h5py is missing, a file is
        damaged, or the output cannot be written (a full disk): nothing is left at ``out``.
    """
    place = locate_run(target, root)
    if place is None:
        raise CheckpointNotFoundError(f"{target}: no manifest.json here (give the run's meta_dir, its parent "
                                      "or its config file)")
    m = place.manifest
    complete = [e for e in m.newest_first() if e.complete_levels]
    chosen = [e for e in complete if ckpt_id is None or e.id == ckpt_id]
    if not chosen:
        raise CheckpointNotFoundError(f"run {m.exec_id} has no complete checkpoint"
                                      + (f" with id {ckpt_id} (complete: {[e.id for e in complete]})"
                                         if ckpt_id is not None else ""))
    entry = chosen[0]
    copies = RunCopies(place.ckpt_dir, place.glbl_dir, m.exec_id, entry, chunk_bytes)
    found_copies = _locate(copies, entry)
    out = Path(out)
    if out.exists():
        raise StorageError(f"{out} exists: choose a new name (export never overwrites)")
    check_names(fmt, {s.name: [s.name] if all(c.header.section(s.name).layout is not None
                                              for c in found_copies)
                      else [f"{s.name}/rank{r}" for r in range(len(found_copies))]
                      for s in found_copies[0].header.sections})
    attrs: dict[str, Any] = dict(zip(RUN_ATTRIBUTES, (entry.id, entry.level, m.exec_id, len(entry.files),
                                                      list(entry.complete_levels)), strict=True))
    writer = open_writer(fmt, out)
    try:
        with contextlib.ExitStack() as stack:
            files = [(stack.enter_context(copies.open(c.level, r)), c.header)
                     for r, c in enumerate(found_copies)]
            sink = writer if progress is None else progress.counting(writer, *_export_size(files))
            for name in [s.name for s in files[0][1].sections]:
                _export_array(name, files, sink, attrs, chunk_bytes)
        writer.commit(attrs)
    except BaseException:
        writer.abort()
        raise
    return attrs


def _export_size(files: list[tuple[ByteSource, Header]]) -> tuple[int, int]:
    """Datasets and bytes an export writes: a replicated array once, any other from every rank."""
    datasets = nbytes = 0
    for name in [s.name for s in files[0][1].sections]:
        secs = [h.section(name) for _, h in files]
        laid = all(s.layout is not None for s in secs)
        once = laid and all(s.layout is not None and s.layout.replicated for s in secs)
        datasets += 1 if laid else len(secs)
        nbytes += secs[0].nbytes if once else sum(s.nbytes for s in secs)
    return datasets, nbytes


def _locate(copies: RunCopies, entry: CheckpointEntry) -> list[Copy]:
    """A verified-header copy of every rank's file (the first of L1, L2, L4)."""
    out = []
    for rank in range(len(entry.files)):
        found, why = copies.find(rank)
        if found is None:
            raise CheckpointNotFoundError(f"checkpoint {entry.id}: no readable copy of rank {rank}'s file ("
                                          f"{why}): run 'ftkit rebuild' first if it is held at L3")
        out.append(found)
    return out


def _export_array(name: str, files: list[tuple[ByteSource, Header]], writer: Any, attrs: dict[str, Any],
                  chunk_bytes: int) -> None:
    secs = [h.section(name) for _, h in files]
    layouts = [s.layout for s in secs]
    if any(lay is None for lay in layouts):
        for rank, ((source, _), sec) in enumerate(zip(files, secs, strict=True)):
            dset = writer.create(f"{name}/rank{rank}", sec.shape, sec.dtype)
            _copy_section(source, sec, writer, dset, chunk_bytes)
        return
    lays = [lay for lay in layouts if lay is not None]
    problem = coverage_problem(name, lays)
    if problem or len({s.dtype for s in secs}) > 1:
        raise FormatError(f"the stored layouts cannot be assembled: {problem or f'{name!r}: dtypes differ'}")
    transpose = lays[0].order == "F"
    gshape = lays[0].global_shape[::-1] if transpose else lays[0].global_shape
    dset = writer.create(name, gshape, secs[0].dtype)
    slabs = _Slabs(np.dtype(secs[0].dtype), chunk_bytes)
    sources = [0] if all(lay.replicated for lay in lays) else range(len(files))
    pieces = (piece for rank in sources for box in lays[rank].boxes
              for piece in slabs.read(files[rank][0], secs[rank], lays[rank], box))
    for start, buf in pieces:
        region = tuple(slice(a, a + n) for a, n in zip(start, buf.shape, strict=True))
        data = np.ascontiguousarray(buf.T) if transpose else buf
        writer.write(dset, region[::-1] if transpose else region, data)
        if (lays[0].replicated and math.prod(gshape) <= _ATTR_MAX and data.dtype.kind in "biuf"
                and name not in RUN_ATTRIBUTES):
            attrs[name] = data.tolist()


class _Slabs:
    """Boxes slab by slab along axis 0, each verified: mapped from the file when the box's rows are one
    contiguous run of a plain file (no copy; mappings of up to ``_MAP_BYTES``, slabs of ``_SLAB_BYTES``,
    whatever ``chunk_bytes``), else read into one reused buffer of at most ``chunk_bytes``."""

    def __init__(self, dtype: np.dtype, chunk_bytes: int) -> None:
        self.dtype, self.chunk_bytes = dtype, chunk_bytes
        self.buf = np.empty(0, np.uint8)

    def read(self, source: ByteSource, sec: Section, layout: Layout,
             box: Box) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
        """Yield (global start, verified slab) of ``box``; a slab is valid until the next one is asked for."""
        row = max(1, math.prod(box.shape[1:]) * self.dtype.itemsize)
        whole_rows = box.shape[1:] == sec.shape[1:]  # the box's rows lie one after the other in the file
        step = max(1, _MAP_BYTES // row if whole_rows and source.supports_map else box.shape[0])
        for i in range(0, box.shape[0], step):
            n = min(step, box.shape[0] - i)
            start, shape, runs = self._piece(sec, layout, box, i, n)
            mapped = map_run(source, sec, runs)
            if mapped is not None:
                per_slab = max(1, _SLAB_BYTES // row)
                for j in range(0, n, per_slab):
                    m = min(per_slab, n - j)
                    view = mapped.verified(j * row, (j + m) * row)
                    yield (start[0] + j, *start[1:]), np.frombuffer(view, self.dtype).reshape((m, *shape[1:]))
                continue
            yield from self._buffered(source, sec, layout, box, i, n, row)

    def _buffered(self, source: ByteSource, sec: Section, layout: Layout, box: Box, i: int, n: int,
                  row: int) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
        """Rows ``i`` to ``i + n`` of ``box`` read through the reused buffer, ``chunk_bytes`` at most."""
        per_buf = max(1, self.chunk_bytes // row)
        for j in range(i, i + n, per_buf):
            start, shape, runs = self._piece(sec, layout, box, j, min(per_buf, i + n - j))
            size = math.prod(shape) * self.dtype.itemsize
            if self.buf.nbytes < size:
                self.buf = np.empty(size, np.uint8)
            raw = self.buf[:size]
            read_runs(source, sec, runs, byte_view(raw), piece_bytes=self.chunk_bytes)
            yield start, raw.view(self.dtype).reshape(shape)

    def _piece(self, sec: Section, layout: Layout, box: Box, i: int,
               n: int) -> tuple[tuple[int, ...], tuple[int, ...], Runs]:
        """Rows ``i`` to ``i + n`` of ``box``: global start, shape, and the byte runs holding them (from
        ``box`` alone: the boxes of one rank do not overlap, so no other box holds a byte of it)."""
        shape = (n, *box.shape[1:])
        start = (box.start[0] + i, *box.start[1:])
        want = Layout(layout.global_shape, (Box((0,) * len(shape), start, shape),))
        own = Layout(layout.global_shape, (box,))
        return start, shape, box_runs(own, sec.shape, want, shape, self.dtype.itemsize)


def _copy_section(source: ByteSource, sec: Section, writer: Any, dset: Any, chunk_bytes: int) -> None:
    """Stream a section without a layout into ``dset``, slab by slab, checking its whole-section digest."""
    dtype = np.dtype(sec.dtype)
    shape = sec.shape or (1,)  # a 0-d array is one element
    row = max(1, math.prod(shape[1:]) * dtype.itemsize)
    step = max(1, chunk_bytes // row)
    hasher = xxhash.xxh3_64()
    buf = np.empty(min(step, shape[0]) * row, np.uint8)
    for i in range(0, shape[0], step):
        n = min(step, shape[0] - i)
        raw = buf[:n * row]
        source.read_into(sec.offset + i * row, byte_view(raw))
        hasher.update(byte_view(raw))
        data = raw.view(dtype).reshape((n, *shape[1:]))
        region = (slice(i, i + n), *(slice(0, d) for d in shape[1:])) if sec.shape else ()
        writer.write(dset, region, data if sec.shape else data[0])
    if digest_hex(hasher) != sec.xxh3:
        raise CorruptionError(f"{source.name}: checksum mismatch in section {sec.name!r} (stored {sec.xxh3}, "
                              f"computed {digest_hex(hasher)}): the file is damaged")

