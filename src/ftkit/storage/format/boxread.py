"""Read parts of a stored section -- the byte runs of some boxes -- verifying every byte read.

The unit of verification is the section's digest chunk (sections with a layout carry one xxh3 per chunk, see
:mod:`ftkit.storage.format.container`); a section without chunk digests is one unit, checked against its
whole-section digest in a streaming pass. Only the units holding a needed byte are read, each exactly once,
through one buffer of at most ``piece_bytes`` bytes (rounded up to whole chunks), except units lying wholly
inside one contiguous run of the target, which are read straight into it (no copy): memory stays bounded
whatever the size.

The caller must have checked the file's header first (against the manifest's digest): the chunk digests
come from that header.
"""

from __future__ import annotations

import numpy as np
import xxhash

from ...errors import CorruptionError
from .._stream import byte_view
from .global_layout import Runs
from .header import Section, digest_hex
from .source import ByteSource

__all__ = ["read_runs", "map_run", "MappedRun", "needed_units"]


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


def read_runs(source: ByteSource, section: Section, runs: Runs, dest: memoryview, *,
              piece_bytes: int = 16 * 2**20) -> int:
    """Copy ``runs`` (offsets relative to the section's first byte → offsets in ``dest``) from ``source``.

    Digest units lying wholly inside one run are read straight into ``dest`` and verified there; the others
    go through one buffer of at most ``piece_bytes`` bytes and only their needed bytes are copied.

    Parameters
    ----------
    source
        The checkpoint file (its header already checked by the caller).
    section
        The stored section to read from (from that header).
    runs
        Byte runs, sorted by source offset and not overlapping (see
        :func:`ftkit.storage.format.global_layout.box_runs`).
    dest
        Flat byte view of the target buffer.
    piece_bytes
        Size of the one read buffer (bytes; at least one digest chunk).

    Returns
    -------
    int
        Bytes read from the source.

    Raises
    ------
    CorruptionError
        If a unit read does not match its digest (``dest`` may then hold part of the damaged bytes).
    StorageError, OSError
        If the source is truncated (changed while read) or cannot be read.
    """
    unit = _unit(section)
    if section.chunk:
        piece_bytes = max(unit, piece_bytes // unit * unit)
    ends = runs.src + runs.nbytes
    buf: np.ndarray | None = None
    total = 0
    for first, last in needed_units(section, runs):
        for a, b, run in _groups(section, runs, ends, first, last, unit):
            start, stop = a * unit, min(b * unit, section.nbytes)
            if run >= 0:  # wholly inside run ``run``: straight into the target
                at = int(runs.dst[run]) + start - int(runs.src[run])
                view = dest[at:at + stop - start]
                source.read_into(section.offset + start, view)
                _verify(source, section, a, view, unit)
                total += stop - start
                continue
            if buf is None:
                buf = np.empty(min(piece_bytes, max(1, section.nbytes)), dtype=np.uint8)
            total += _read_buffered(source, section, runs, ends, dest, buf, a, stop)
    return total


def _read_buffered(source: ByteSource, section: Section, runs: Runs, ends: np.ndarray, dest: memoryview,
                   buf: np.ndarray, first: int, stop: int) -> int:
    """Read units ``first``.. up to byte ``stop`` through ``buf``, hashing each unit as it streams by (a unit
    may span pieces), and copy the needed bytes of each piece."""
    unit = _unit(section)
    hasher, current = xxhash.xxh3_64(), first
    for pos in range(first * unit, stop, len(buf)):
        n = min(len(buf), stop - pos)
        view = byte_view(buf)[:n]
        source.read_into(section.offset + pos, view)
        p = 0
        while p < n:  # hash, finishing every unit that ends in this piece
            unit_end = min((current + 1) * unit, section.nbytes)
            q = min(n, unit_end - pos)
            hasher.update(view[p:q])
            if pos + q == unit_end:
                _check(source.name, section, current, digest_hex(hasher))
                hasher, current = xxhash.xxh3_64(), current + 1
            p = q
        _copy(view, pos, runs, ends, dest)
    return stop - first * unit


class MappedRun:
    """One run of a section mapped from its source without a copy, verified digest unit by digest unit as its
    bytes are asked for (see :func:`map_run`)."""

    def __init__(self, source: ByteSource, section: Section, view: memoryview, first: int, skip: int,
                 nbytes: int) -> None:
        self.source, self.section, self.view = source, section, view
        self.first, self.skip, self.nbytes = first, skip, nbytes
        self.checked = 0  # bytes of ``view`` (whole digest units from its start) verified so far

    def verified(self, a: int, b: int) -> memoryview:
        """Bytes ``[a, b)`` of the run, after verifying the digest units holding them (each unit once; ask in
        ascending order).

        Raises
        ------
        CorruptionError
            If a unit does not match its digest.
        """
        unit = _unit(self.section)
        need = min(-(-(self.skip + b) // unit) * unit, len(self.view))
        if need > self.checked:
            _verify(self.source, self.section, self.first + self.checked // unit,
                    self.view[self.checked:need], unit)
            self.checked = need
        return self.view[self.skip + a:self.skip + b]


def map_run(source: ByteSource, section: Section, runs: Runs) -> MappedRun | None:
    """The bytes of ``runs`` -- one run -- mapped from ``source`` without a copy (the digest units holding
    them, populated at once), to be read verified with :meth:`MappedRun.verified`; None if ``runs`` is not
    one run or the source cannot map.

    Raises
    ------
    StorageError
        If the source is truncated.
    """
    if len(runs.src) != 1 or not source.supports_map:
        return None
    unit = _unit(section)
    src, n = int(runs.src[0]), int(runs.nbytes[0])
    first = src // unit
    stop = min(-(-(src + n) // unit) * unit, section.nbytes)
    view = source.map(section.offset + first * unit, stop - first * unit)
    if view is None:
        return None
    return MappedRun(source, section, view, first, src - first * unit, n)


def _groups(section: Section, runs: Runs, ends: np.ndarray, first: int, last: int,
            unit: int) -> list[tuple[int, int, int]]:
    """Units ``[first, last)`` cut into ``(a, b, run)``: consecutive units wholly inside run ``run``, or
    (``run = -1``) consecutive units that are not."""
    starts = np.arange(first, last, dtype=np.int64) * unit
    stops = np.minimum(starts + unit, section.nbytes)
    idx = np.searchsorted(ends, starts, side="right")
    ok = idx < len(ends)
    safe = np.minimum(idx, len(ends) - 1)
    inside = ok & (runs.src[safe] <= starts) & (ends[safe] >= stops)
    key = np.where(inside, safe, -1)
    cuts = np.flatnonzero(np.diff(key)) + 1
    bounds = np.concatenate(([0], cuts, [len(key)]))
    return [(first + int(lo), first + int(hi), int(key[lo])) for lo, hi in zip(bounds[:-1], bounds[1:],
                                                                               strict=True)]


def _verify(source: ByteSource, section: Section, first: int, view: memoryview, unit: int) -> None:
    """Check the digest units held by ``view`` (starting at unit ``first``, whole units only): the digests
    are computed in one pass and compared at once with the stored ones; a mismatch names its unit."""
    got = "".join([f"{xxhash.xxh3_64_intdigest(view[p:p + unit]):016x}" for p in range(0, len(view), unit)])
    want = section.chunk_xxh3[16 * first:16 * first + len(got)] if section.chunk else section.xxh3
    if got and got != want:
        k = next(k for k in range(0, len(got), 16) if got[k:k + 16] != want[k:k + 16])
        _check(source.name, section, first + k // 16, got[k:k + 16])


def _check(name: str, section: Section, i: int, got: str) -> None:
    want = section.chunk_digest(i) if section.chunk else section.xxh3
    if got != want:
        where = f"digest chunk {i} ({section.chunk} bytes)" if section.chunk else "the section"
        raise CorruptionError(f"{name}: checksum mismatch in {where} of section {section.name!r} (stored "
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
