"""Compressed copies of a checkpoint file (L4, where the bytes leave the node), read as the file they hold.

A compressed copy stands at the level's usual path (``rank<r>.ftk``) and holds the *logical* file -- the
bytes of the rank's L1 file, header and digests unchanged -- in independently compressed chunks, so a range
read (a reshard, an export) decompresses only the chunks it touches. Every reader opens a path with
:func:`open_source`, which sees the magic and returns a :class:`CompressedSource` or a plain
:class:`~ftkit.storage.source.FileSource`: the container's header digest and section digests stay those of
the uncompressed bytes, so verification, the manifest's digests and recovery work as for a plain copy.

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

from ..errors import CheckpointNotFoundError, ConfigError, CorruptionError, FormatError, StorageError
from ._fsutil import AtomicWriter
from .source import ByteSource, FileSource, pread_exact

__all__ = ["MAGIC", "CODECS", "MAX_CHUNK", "CompressedSource", "open_source", "compress_file",
           "require_codec", "stored_size", "encode_chunk", "decode_chunk"]

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


def encode_chunk(codec: str, level: int, data: memoryview, typesize: int) -> tuple[bytes, int]:
    """Compress one chunk: return its stored bytes and codec id (0, the bytes as they are, when ``codec`` is
    "none" or compressing saves less than 3 %).

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
    return bytes(data), 0


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


def _plan(pieces: Iterable[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """Cut ``(offset, nbytes, itemsize, codec)`` extents into chunks of at most MAX_CHUNK whole items."""
    out: list[tuple[int, int, int, str]] = []
    for off, n, item, codec in pieces:
        item = item if 1 <= item <= 255 else 1
        step = max(item, MAX_CHUNK - MAX_CHUNK % item)
        out.extend((o, min(step, off + n - o), item, codec) for o in range(off, off + n, step))
    return out


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
    for name in {p[3] for p in pieces}:
        if name != "none":
            require_codec(name)  # fail before anything is read or written
    chunks = _plan(pieces)
    try:
        fd = os.open(src, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"{src}: file to compress is missing") from exc
    try:
        logical = os.fstat(fd).st_size
        if sum(c[1] for c in chunks) != logical:
            raise StorageError(f"{src}: its sections do not tile its {logical} bytes: cannot compress it")
        start = _PRE.size + _REC.size * len(chunks) + _U64.size
        records, pos, buf = [], start, bytearray(MAX_CHUNK)
        with AtomicWriter(dst, fsync=fsync) as writer:
            for off, n, item, codec in chunks:
                view = memoryview(buf)[:n]
                pread_exact(fd, off, view, str(src))
                packed, cid_used = encode_chunk(codec, level, view, item)
                writer.pwrite(packed, pos)
                records.append(_REC.pack(off, pos, n, len(packed), cid_used, item, 0,
                                         xxhash.xxh3_64_intdigest(packed)))
                pos += len(packed)
            head = _PRE.pack(MAGIC, VERSION, 0, 0, logical, len(chunks)) + b"".join(records)
            writer.pwrite(head + _U64.pack(xxhash.xxh3_64_intdigest(head)), 0)
    except OSError as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot compress {src} to {dst}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return logical, pos


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
