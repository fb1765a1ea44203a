"""Read parts of a stored section -- the byte runs of some boxes -- verifying every byte read.

The unit of verification is the section's digest chunk (sections with a layout carry one xxh3 per chunk, see
:mod:`ftkit.storage.format`); a section without chunk digests is one unit, checked against its whole-section
digest in a streaming pass. Only the units holding a needed byte are read, each exactly once, through one
buffer of at most ``piece_bytes`` bytes (rounded up to whole chunks): memory stays bounded whatever the size.

The caller must have checked the file's header first (against the manifest's digest): the chunk digests
come from that header.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import xxhash

from ..errors import CorruptionError
from ._stream import byte_view, read_into
from .header import Section, digest_hex
from .layout import Runs

__all__ = ["read_runs", "needed_units"]


def _unit(section: Section) -> int:
    return section.chunk or max(1, section.nbytes)


def needed_units(section: Section, runs: Runs) -> list[tuple[int, int]]:
    """The ranges ``[first, last)`` of digest units that hold a byte of ``runs`` (merged, ascending)."""
    if not len(runs.src):
        return []
    unit = _unit(section)
    count = -(-section.nbytes // unit)
    diff = np.zeros(count + 1, dtype=np.int64)
    np.add.at(diff, runs.src // unit, 1)
    np.add.at(diff, (runs.src + runs.nbytes - 1) // unit + 1, -1)
    need = np.cumsum(diff[:-1]) > 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], need.astype(np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def read_runs(path: str | os.PathLike[str], section: Section, runs: Runs, dest: memoryview, *,
              piece_bytes: int = 16 * 2**20) -> int:
    """Copy ``runs`` (offsets relative to the section's first byte → offsets in ``dest``) from the file.

    Parameters
    ----------
    path
        The checkpoint file (its header already checked by the caller).
    section
        The stored section to read from (from that header).
    runs
        Byte runs, sorted by source offset and not overlapping (see :func:`ftkit.storage.layout.box_runs`).
    dest
        Flat byte view of the target buffer.
    piece_bytes
        Size of the one read buffer (bytes; at least one digest chunk).

    Returns
    -------
    int
        Bytes read from the file.

    Raises
    ------
    CorruptionError
        If a unit read does not match its digest (``dest`` may then hold part of the damaged bytes).
    StorageError, OSError
        If the file is truncated (changed while read) or cannot be read.
    """
    path = Path(path)
    unit = _unit(section)
    if section.chunk:
        piece_bytes = max(unit, piece_bytes // unit * unit)
    ends = runs.src + runs.nbytes
    buf = np.empty(min(piece_bytes, max(1, section.nbytes)), dtype=np.uint8)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for first, last in needed_units(section, runs):
            start, stop = first * unit, min(last * unit, section.nbytes)
            hasher, current = xxhash.xxh3_64(), first
            pos = start
            while pos < stop:
                n = min(len(buf), stop - pos)
                piece = buf[:n]
                read_into(fd, section.offset + pos, piece, section.offset + section.nbytes)
                total += n
                view = byte_view(piece)
                p = 0
                while p < n:  # hash, finishing every unit that ends in this piece
                    unit_end = min((current + 1) * unit, section.nbytes)
                    q = min(n, unit_end - pos)
                    hasher.update(view[p:q])
                    if pos + q == unit_end:
                        _check(path, section, current, digest_hex(hasher))
                        hasher, current = xxhash.xxh3_64(), current + 1
                    p = q
                _copy(view, pos, runs, ends, dest)
                pos += n
    finally:
        os.close(fd)
    return total


def _check(path: Path, section: Section, i: int, got: str) -> None:
    want = section.chunk_digest(i) if section.chunk else section.xxh3
    if got != want:
        where = f"digest chunk {i} ({section.chunk} bytes)" if section.chunk else "the section"
        raise CorruptionError(f"{path}: checksum mismatch in {where} of section {section.name!r} (stored "
                              f"{want}, computed {got}): the file is damaged")


def _copy(view: memoryview, pos: int, runs: Runs, ends: np.ndarray, dest: memoryview) -> None:
    """Copy the parts of ``runs`` inside the bytes ``[pos, pos + len(view))`` of the section."""
    stop = pos + len(view)
    first = int(np.searchsorted(ends, pos, side="right"))
    last = int(np.searchsorted(runs.src, stop, side="left"))
    for i in range(first, last):
        src, dst = int(runs.src[i]), int(runs.dst[i])
        lo, hi = max(src, pos), min(int(ends[i]), stop)
        if lo < hi:
            dest[dst + lo - src:dst + hi - src] = view[lo - pos:hi - pos]
