"""Compressed copies of a checkpoint file (L4, where the bytes leave the node), read as the file they hold.

A compressed copy stands at the level's usual path (``rank<r>.ftk``) and holds the *logical* file -- the
bytes of the rank's L1 file, header and digests unchanged -- in independently compressed chunks, so a range
read (a reshard, an export) decompresses only the chunks it touches. Every reader opens a path with
:func:`open_source`, which sees the magic and returns a :class:`CompressedSource` or a plain
:class:`~ftkit.storage.format.source.FileSource`: the container's header digest and section digests stay those
of the uncompressed bytes, so verification, the manifest's digests and recovery work as for a plain copy.

Layout (little-endian)::

    offset 0   preamble (32 bytes): magic b"FTKITCZ1", version u16 (1), flags u16 (0), reserved u32 (0),
               logical_size u64 (bytes of the file held), nchunks u64
    offset 32  index: nchunks records of 40 bytes: logical_offset u64, stored_offset u64, logical_len u32,
               stored_len u32, codec u8 (0 raw, 1 lz4, 2 zstd, 3 blosc), typesize u8 (bytes per item of
               the byte-shuffle applied before lz4/zstd, or given to blosc; 1: none), reserved u16 (0),
               xxh3 u64 (xxh3-64 of the chunk's stored bytes)
    then       index_xxh3 u64: xxh3-64 of the preamble and the index
    then       the chunks' stored bytes, back to back in index order

The chunks tile ``[0, logical_size)`` in order and their stored bytes tile the rest of the file in order; a
chunk holds at most :data:`MAX_CHUNK` logical bytes. The writer cuts the header apart from each section and
cuts sections at multiples of their item size (so the shuffle sees whole items), and stores a chunk raw
(codec 0) when compressing it saves less than 3 %: incompressible data costs only the index. lz4, zstd and
blosc are those of ``numcodecs`` (``pip install 'ftkit[compress]'``): lz4 and zstd frames as
``numcodecs.LZ4`` and ``numcodecs.Zstd`` write them, after ``numcodecs.Shuffle``; blosc1 frames with
byte-shuffle.

A reader checks the preamble, the index digest, the tiling and each chunk's stored digest before
decompressing it, and that it decompresses to exactly ``logical_len`` bytes: any damage is a
:class:`~ftkit.errors.FormatError`/:class:`~ftkit.errors.CorruptionError`, as for a plain file.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import xxhash

from ...errors import CheckpointNotFoundError, ConfigError, CorruptionError, FormatError, StorageError
from .._fsutil import AtomicWriter
from .source import ByteSource, FileSource, pread_exact

__all__ = ["MAGIC", "CODECS", "MAX_CHUNK", "CompressedSource", "open_source", "compress_file",
           "require_codec", "stored_size", "encode_chunk", "decode_chunk", "ChunkWriter",
           "chunk_step"]

MAGIC = b"FTKITCZ1"
VERSION = 1
#: Codec names of ``[ftkit] compression`` and their ids in the index (0: stored raw).
CODECS = {"none": 0, "lz4": 1, "zstd": 2, "blosc": 3}
#: Logical bytes per chunk (at most).
MAX_CHUNK = 1 << 20
_PRE = struct.Struct("<8sHHIQQ")
_REC = struct.Struct("<QQIIBBHQ")
_U64 = struct.Struct("<Q")
_MIN_SAVING = 0.97


def require_codec(name: str) -> Any:
    """Return the ``numcodecs`` module for codec ``name`` (not "none").

    Raises
    ------
    ConfigError
        If ``name`` is unknown or ``numcodecs`` is not installed.
    """
    if name not in CODECS or name == "none":
        raise ConfigError(f"compression = {name!r}: choose one of {', '.join(CODECS)}")
    try:
        import numcodecs
        import numcodecs.blosc
    except ImportError as exc:
        raise ConfigError(f"compression = {name} needs numcodecs: pip install 'ftkit[compress]' (or set "
                          "compression = none)") from exc
    return numcodecs


def _encode(nc: Any, codec: int, level: int, data: memoryview, typesize: int) -> bytes:
    if codec == 3:
        return bytes(nc.blosc.compress(data, b"zstd", min(max(level, 1), 9), nc.blosc.SHUFFLE, 0, typesize))
    raw: Any = data
    if typesize > 1:  # whole items shuffled; a ragged tail (the last block of a dCP store) follows as it is
        whole = len(data) - len(data) % typesize
        raw = bytes(nc.Shuffle(typesize).encode(data[:whole])) + bytes(data[whole:])
    inner = nc.LZ4(acceleration=1) if codec == 1 else nc.Zstd(level=level)
    return bytes(inner.encode(raw))


def _decode(nc: Any, codec: int, data: bytes, typesize: int, n: int) -> bytes:
    """Decode a chunk into exactly ``n`` bytes (a frame claiming another size raises: no allocation follows
    what a damaged or forged frame says)."""
    out = bytearray(n)
    if codec == 3:
        nc.blosc.decompress(data, out)
        return bytes(out)
    (nc.LZ4() if codec == 1 else nc.Zstd()).decode(data, out=out)
    if typesize == 1:
        return bytes(out)
    whole = n - n % typesize
    plain = bytearray(n)
    nc.Shuffle(typesize).decode(memoryview(out)[:whole], out=memoryview(plain)[:whole])
    plain[whole:] = out[whole:]
    return bytes(plain)


def encode_chunk(codec: str, level: int, data: memoryview, typesize: int) -> tuple[bytes | memoryview, int]:
    """Compress one chunk: return its stored bytes and codec id (0, the bytes as they are, when ``codec`` is
    "none" or compressing saves less than 3 %: then ``data`` itself, not a copy, so write it before ``data``
    changes).

    ``typesize`` is the item size in bytes of the byte-shuffle applied first (1: none; 1-255).

    Raises
    ------
    ConfigError
        If ``codec`` is unknown or ``numcodecs`` is missing.
    """
    cid = CODECS.get(codec)
    if cid is None:
        raise ConfigError(f"compression = {codec!r}: choose one of {', '.join(CODECS)}")
    if cid:
        packed = _encode(require_codec(codec), cid, level, data, typesize)
        if len(packed) < _MIN_SAVING * len(data):
            return packed, cid
    return data, 0


def decode_chunk(cid: int, stored: bytes | bytearray, typesize: int, n: int, what: str) -> bytes:
    """Decompress one chunk stored with codec id ``cid`` into exactly ``n`` bytes.

    Raises
    ------
    CorruptionError
        If the stored bytes do not decode to ``n`` bytes (``what`` names the chunk in the message).
    ConfigError
        If ``numcodecs`` is missing.
    """
    if cid == 0:
        data = bytes(stored)
    elif cid not in CODECS.values():
        raise CorruptionError(f"{what}: unknown codec id {cid}")
    else:
        try:
            data = _decode(require_codec("zstd"), cid, bytes(stored), typesize, n)
        except (RuntimeError, ValueError, TypeError, MemoryError) as exc:
            raise CorruptionError(f"{what} does not decode: {exc}") from exc
    if len(data) != n:
        raise CorruptionError(f"{what} decodes to {len(data)} bytes, not {n}")
    return data


def chunk_step(itemsize: int) -> int:
    """Logical bytes per chunk of a section of ``itemsize``-byte items: whole items, at most MAX_CHUNK."""
    item = itemsize if 1 <= itemsize <= 255 else 1
    return max(item, MAX_CHUNK - MAX_CHUNK % item)


def _plan(pieces: Iterable[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """Cut ``(offset, nbytes, itemsize, codec)`` extents into chunks of at most MAX_CHUNK whole items."""
    out: list[tuple[int, int, int, str]] = []
    for off, n, item, codec in pieces:
        step = chunk_step(item)
        item = item if 1 <= item <= 255 else 1
        out.extend((o, min(step, off + n - o), item, codec) for o in range(off, off + n, step))
    return out


class ChunkWriter:
    """Write a compressed copy chunk by chunk, in the order of its plan (see the module docstring).

    ``pieces`` are ``(offset, nbytes, itemsize, codec)`` extents tiling the logical file, cut into chunks
    by :func:`chunk_step`; :meth:`put` takes each chunk's logical bytes in order, compresses and writes it
    (a chunk that shrinks by less than 3 % is stored as it is; after four such chunks in a row of one
    extent, only every eighth chunk of it is tried, so incompressible data costs little CPU). With
    ``head_bytes`` the first ``head_bytes`` logical bytes (the checkpoint file's preamble and header, whose
    digests are known only at the end) are stored raw in space reserved before the chunks and given to
    :meth:`finish`. Nothing is at ``path`` until :meth:`finish` commits (temporary name, fsync, rename).

    Raises
    ------
    ConfigError
        If a codec is unknown or unavailable (before anything is written).
    """

    def __init__(self, path: str | os.PathLike[str], pieces: list[tuple[int, int, int, str]], level: int, *,
                 head_bytes: int = 0, fsync: bool = True) -> None:
        for name in {p[3] for p in pieces}:
            if name != "none":
                require_codec(name)
        extents = ([(0, head_bytes, 1, "none")] if head_bytes else []) + pieces
        plan: list[tuple[int, int, int, str]] = []
        self.extent_starts: set[int] = set()  # plan indices of each extent's first chunk
        for extent in extents:
            self.extent_starts.add(len(plan))
            plan.extend(_plan([extent]))
        self.path, self.level, self.plan = str(path), level, plan
        self.nhead = sum(1 for c in plan if c[0] < head_bytes)
        self.records: list[bytes] = [b""] * len(plan)
        self.pos = _PRE.size + _REC.size * len(plan) + _U64.size + head_bytes
        self.next = self.nhead
        self.raw_run = 0
        self.writer = AtomicWriter(path, fsync=fsync)

    def put(self, data: memoryview | bytes) -> None:
        """Compress and write the next chunk's logical bytes (exactly that chunk's length)."""
        off, n, item, codec = self.plan[self.next]
        if len(data) != n:
            raise StorageError(f"{self.path}: internal error: chunk at {off} given {len(data)} bytes, "
                               f"not {n}")
        if self.next in self.extent_starts:
            self.raw_run = 0
        probe_only = self.raw_run >= 4 and self.raw_run % 8
        packed, cid = encode_chunk("none" if probe_only else codec, self.level, memoryview(data), item)
        self.raw_run = self.raw_run + 1 if cid == 0 and codec != "none" else 0
        self.writer.pwrite(packed, self.pos)
        self.records[self.next] = _REC.pack(off, self.pos, n, len(packed), cid, item, 0,
                                            xxhash.xxh3_64_intdigest(packed))
        self.pos += len(packed)
        self.next += 1

    def finish(self, head: bytes = b"") -> tuple[int, int]:
        """Write the reserved head (``head_bytes`` bytes) and the index, and commit; return the copy's
        (logical, stored) sizes in bytes."""
        if self.next != len(self.plan) or len(head) != sum(c[1] for c in self.plan[:self.nhead]):
            raise StorageError(f"{self.path}: internal error: {len(self.plan) - self.next} chunks never "
                               f"given, head of {len(head)} bytes")
        pos = _PRE.size + _REC.size * len(self.plan) + _U64.size
        for i in range(self.nhead):
            off, n, item, _codec = self.plan[i]
            piece = head[off:off + n]
            self.writer.pwrite(piece, pos)
            self.records[i] = _REC.pack(off, pos, n, n, 0, 1, 0, xxhash.xxh3_64_intdigest(piece))
            pos += n
        logical = sum(c[1] for c in self.plan)
        index = _PRE.pack(MAGIC, VERSION, 0, 0, logical, len(self.plan)) + b"".join(self.records)
        self.writer.pwrite(index + _U64.pack(xxhash.xxh3_64_intdigest(index)), 0)
        self.writer.commit()
        return logical, self.pos

    def abort(self) -> None:
        """Remove the temporary file (nothing is left at ``path``)."""
        self.writer.abort()


def compress_file(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                  pieces: list[tuple[int, int, int, str]], level: int, *,
                  fsync: bool = True) -> tuple[int, int]:
    """Write a compressed copy of ``src`` at ``dst`` atomically; return (logical, stored) sizes in bytes.

    ``pieces`` are ``(offset, nbytes, itemsize, codec)`` extents tiling ``src``: the header (item size 1)
    and each section (its dtype's item size), each with its codec name (``none``: stored raw).

    Raises
    ------
    ConfigError
        If the codec is unknown or unavailable.
    CheckpointNotFoundError, StorageError
        If ``src`` is missing or a read or write fails (``dst`` is left as it was).
    """
    writer = ChunkWriter(dst, pieces, level, fsync=fsync)
    try:
        fd = os.open(src, os.O_RDONLY)
    except FileNotFoundError as exc:
        writer.abort()
        raise CheckpointNotFoundError(f"{src}: file to compress is missing") from exc
    try:
        logical = os.fstat(fd).st_size
        if sum(c[1] for c in writer.plan) != logical:
            raise StorageError(f"{src}: its sections do not tile its {logical} bytes: cannot compress it")
        buf = bytearray(MAX_CHUNK)
        for off, n, _item, _codec in writer.plan:
            view = memoryview(buf)[:n]
            pread_exact(fd, off, view, str(src))
            writer.put(view)
        return writer.finish()
    except BaseException as exc:
        writer.abort()
        if isinstance(exc, OSError) and not isinstance(exc, StorageError):
            raise StorageError(f"cannot compress {src} to {dst}: {exc.strerror or exc}") from exc
        raise
    finally:
        os.close(fd)


class CompressedSource(ByteSource):
    """The logical file held by a compressed copy (chunks decompressed on demand, the last one cached).

    Raises
    ------
    FormatError, CorruptionError
        If the preamble or index is damaged (on opening), or a chunk (when read).
    ConfigError
        If the chunks' codec needs ``numcodecs`` and it is missing.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.file = FileSource(path)
        self.name = f"{self.file.name} (compressed)"
        try:
            self._index()
        except BaseException:
            self.file.close()
            raise
        self._cache: tuple[int, bytes] | None = None

    def _index(self) -> None:
        pre = bytearray(_PRE.size)
        if self.file.size < _PRE.size + _U64.size:
            raise FormatError(f"{self.name}: truncated ({self.file.size} bytes)")
        self.file.read_into(0, memoryview(pre))
        magic, version, flags, reserved, self.size, n = _PRE.unpack(pre)
        if magic != MAGIC or version != VERSION or flags or reserved:
            raise FormatError(f"{self.name}: not a compressed copy of version {VERSION} (magic {magic!r}, "
                              f"version {version})")
        if n > (self.file.size - _PRE.size - _U64.size) // _REC.size:
            raise FormatError(f"{self.name}: truncated or damaged: index of {n} chunks does not fit")
        raw = bytearray(_PRE.size + _REC.size * n + _U64.size)
        self.file.read_into(0, memoryview(raw))
        (want,) = _U64.unpack_from(raw, len(raw) - _U64.size)
        if xxhash.xxh3_64_intdigest(bytes(raw[:-_U64.size])) != want:
            raise CorruptionError(f"{self.name}: index checksum mismatch: the copy is damaged")
        self.chunks = [_REC.unpack_from(raw, _PRE.size + i * _REC.size) for i in range(n)]
        logical, stored = 0, len(raw)
        for lo, so, ln, sn, codec, item, _pad, _h in self.chunks:
            if lo != logical or so != stored or ln > MAX_CHUNK or codec not in CODECS.values() or not item:
                raise FormatError(f"{self.name}: damaged index (chunk at logical offset {lo})")
            logical, stored = logical + ln, stored + sn
        if logical != self.size or stored != self.file.size:
            what = "truncated" if stored > self.file.size else "damaged"
            raise FormatError(f"{self.name}: {what}: the chunks hold {logical} of {self.size} bytes and "
                              f"{stored} stored bytes of {self.file.size}")
        self.starts = [c[0] for c in self.chunks]

    def _chunk(self, i: int) -> bytes:
        if self._cache is not None and self._cache[0] == i:
            return self._cache[1]
        lo, so, ln, sn, codec, item, _pad, digest = self.chunks[i]
        stored = bytearray(sn)
        self.file.read_into(so, memoryview(stored))
        if xxhash.xxh3_64_intdigest(bytes(stored)) != digest:
            raise CorruptionError(f"{self.name}: checksum mismatch in the chunk at logical offset {lo}")
        data = decode_chunk(codec, stored, item, ln, f"{self.name}: chunk at logical offset {lo}")
        self._cache = (i, data)
        return data

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the logical file's bytes from ``offset`` (decompressing the chunks touched)."""
        end = offset + len(out)
        if offset < 0 or end > self.size:
            raise StorageError(f"{self.name}: truncated: {end} bytes needed, {self.size} held")
        i = max(0, bisect.bisect_right(self.starts, offset) - 1)
        done = 0
        while done < len(out):
            data = self._chunk(i)
            at = offset + done - self.starts[i]
            n = min(len(data) - at, len(out) - done)
            out[done:done + n] = data[at:at + n]
            done += n
            i += 1

    def close(self) -> None:
        """Close the file (idempotent)."""
        self.file.close()


def is_compressed(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` is a compressed copy (by its magic; False if unreadable)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def open_source(path: str | os.PathLike[str]) -> ByteSource:
    """Open the checkpoint file at ``path``, plain or compressed, as the logical file it holds.

    Raises
    ------
    CheckpointNotFoundError, StorageError, FormatError
        As :class:`FileSource` and :class:`CompressedSource`.
    """
    return CompressedSource(path) if is_compressed(path) else FileSource(path)


def stored_size(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(logical, stored) sizes in bytes of the file at ``path`` (equal for a plain file)."""
    stored = Path(path).stat().st_size
    if not is_compressed(path):
        return stored, stored
    with CompressedSource(path) as src:
        return src.size, stored
