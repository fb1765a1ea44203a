"""Writing the checkpoint file container (:mod:`ftkit.storage.format.container`): plain, or as a compressed
copy (:mod:`ftkit.storage.format.compressed`), straight from the protected arrays.

Each protected buffer is streamed straight to the file in chunks (memoryviews: no copy of the data), hashing
as it goes; the header is written first with zero digests and rewritten in place with the real ones (same
length), so one pass over memory suffices and ftkit's extra memory stays near zero whatever the size. A
compressed file reserves the header's room, stored raw, and compresses each chunk of the sections as it
comes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ...errors import StorageError
from .._direct import DIRECT_CHUNK, DIRECT_MIN_BYTES
from .._fsutil import AtomicWriter
from .compressed import ChunkWriter, chunk_step
from .global_layout import Layout
from .header import (
    MAGIC,
    PREAMBLE,
    VERSION,
    FileInfo,
    Section,
    chunk_count,
    decode_header,
    digest_hex,
    encode_header,
    parse_dtype,
)

__all__ = ["DEFAULT_CHUNK", "array_bytes", "digest_chunk_size", "write_file", "write_uncommitted",
           "write_compressed"]

DEFAULT_CHUNK = 16 * 2**20
#: Digest chunks of a section with a layout: at least this many bytes, and at most _MAX_DIGEST_CHUNKS chunks.
_MIN_DIGEST_CHUNK = 64 * 2**10
_MAX_DIGEST_CHUNKS = 4096


def digest_chunk_size(nbytes: int) -> int:
    """Bytes per digest chunk of a section of ``nbytes`` bytes: a power of two, 64 KiB or more, chosen so
    that the section has at most 4096 chunks (a partial reader reads at most two chunks more per run)."""
    chunk = _MIN_DIGEST_CHUNK
    while nbytes > chunk * _MAX_DIGEST_CHUNKS:
        chunk *= 2
    return chunk


def array_bytes(array: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array, without copying."""
    if not array.flags.c_contiguous:
        raise StorageError("ftkit writes C-contiguous arrays only")
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _layout(fields_: dict[str, Any], arrays: Sequence[tuple[str, np.ndarray]],
            layouts: Mapping[str, Layout]) -> tuple[bytes, list[Section]]:
    """Fix the header length and section offsets (the header's length depends on the offsets' digits)."""
    header_len = 0
    while True:
        offset = PREAMBLE.size + header_len
        sections = []
        for name, arr in arrays:
            nbytes = int(arr.nbytes)
            layout = layouts.get(name)
            chunk = digest_chunk_size(nbytes) if layout is not None else 0
            zeros = "0" * 16 * chunk_count(nbytes, chunk) if chunk else ""
            sections.append(Section(name, arr.dtype.str, tuple(int(d) for d in arr.shape), offset, nbytes,
                                    layout=layout, chunk=chunk, chunk_xxh3=zeros))
            offset += nbytes
        fields_["data_offset"] = PREAMBLE.size + header_len
        fields_["file_size"] = offset
        raw = encode_header(fields_, sections, header_len)
        if len(raw) == header_len:
            return raw, sections
        header_len = max(len(raw), header_len)


def _preamble(header: bytes) -> bytes:
    return PREAMBLE.pack(MAGIC, VERSION, 0, 0, len(header), xxhash.xxh3_64_intdigest(header))


def _plan_file(arrays: Sequence[tuple[str, np.ndarray]], rank: int, level: int, ckpt_id: int, exec_id: str,
               nranks: int, meta: Mapping[str, Any] | None,
               layouts: Mapping[str, Layout] | None) -> tuple[dict[str, Any], bytes, list[Section]]:
    """The header fields, the placeholder header (zero digests, final length) and the sections of a file."""
    for name, arr in arrays:
        parse_dtype(arr.dtype.str, f"array {name!r}: ")
    fields_ = {"format": "ftkit-checkpoint", "rank": int(rank), "level": int(level), "ckpt_id": int(ckpt_id),
               "exec_id": str(exec_id), "nranks": int(nranks), "meta": dict(meta or {})}
    placeholder, sections = _layout(fields_, arrays, layouts or {})
    return fields_, placeholder, sections


def _stream_sections(arrays: Sequence[tuple[str, np.ndarray]], sections: list[Section],
                     put: Callable[[memoryview, int], object],
                     piece_bytes: Callable[[int], int]) -> list[Section]:
    """Hand each array's bytes to ``put(piece, file_offset)`` in order, in pieces of ``piece_bytes(itemsize)``
    bytes (views of the array: no copy), hashing as they go; return the sections with their digests."""
    final = []
    for (_name, arr), sec in zip(arrays, sections, strict=True):
        h = xxhash.xxh3_64()
        view = array_bytes(arr)
        step = piece_bytes(arr.dtype.itemsize)
        for start in range(0, len(view), step):
            piece = view[start:start + step]
            h.update(piece)
            put(piece, sec.offset + start)
        chunks = "".join(xxhash.xxh3_64_hexdigest(view[i:i + sec.chunk])
                         for i in range(0, len(view), sec.chunk)) if sec.chunk else ""
        final.append(Section(sec.name, sec.dtype, sec.shape, sec.offset, sec.nbytes, digest_hex(h),
                             sec.layout, sec.chunk, chunks))
    return final


def _final_head(fields_: dict[str, Any], final: list[Section], placeholder: bytes) -> bytes:
    """Preamble and header with the real digests (the placeholder's length)."""
    header = encode_header(fields_, final, len(placeholder))
    if len(header) != len(placeholder):  # pragma: no cover - digests are fixed width
        raise StorageError("internal error: header length changed")
    return _preamble(header) + header


def write_file(
    path: str | os.PathLike[str],
    arrays: Sequence[tuple[str, np.ndarray]],
    *,
    rank: int,
    level: int,
    ckpt_id: int,
    exec_id: str,
    nranks: int,
    meta: Mapping[str, Any] | None = None,
    chunk_bytes: int = DEFAULT_CHUNK,
    fsync: bool = True,
    layouts: Mapping[str, Layout] | None = None,
    direct: bool = False,
    recycle: str | os.PathLike[str] | None = None,
) -> FileInfo:
    """Write ``arrays`` to a checkpoint file at ``path`` atomically (temp name, fsync, rename, fsync dir).

    Parameters
    ----------
    path
        Final name of the file (missing directories are created).
    arrays
        ``(name, array)`` pairs, C-contiguous arrays of plain number dtypes, written in this order.
    rank, level, ckpt_id, exec_id, nranks
        Identity recorded in the header.
    meta
        Extra JSON-serialisable header fields (extensions).
    chunk_bytes
        Bytes per write call (no buffer is allocated: writes come straight from the arrays).
    fsync
        fsync the file and its directory (durability); tests of the format may turn it off.
    layouts
        Global layout of some arrays, by name (stored with per-chunk digests; see the module docstring).
    direct
        Write a file of :data:`~ftkit.storage._direct.DIRECT_MIN_BYTES` or more with direct I/O, bypassing
        the page cache (:class:`~ftkit.storage._fsutil.AtomicWriter`'s ``direct``: buffered where the file
        system refuses it). The bytes written are the same.
    recycle
        A file no reader needs any more, taken over and written in place (its page-cache pages reused):
        :class:`~ftkit.storage._fsutil.AtomicWriter`'s ``recycle``. The file written is the same.

    Returns
    -------
    FileInfo
        Size (bytes) and header digest of the file written.

    Raises
    ------
    StorageError
        If the file cannot be written (the temporary file is removed).
    """
    writer, info, _ = write_uncommitted(path, arrays, rank=rank, level=level, ckpt_id=ckpt_id,
                                        exec_id=exec_id, nranks=nranks, meta=meta, chunk_bytes=chunk_bytes,
                                        fsync=fsync, layouts=layouts, direct=direct, recycle=recycle)
    writer.commit()
    return info


def write_uncommitted(
    path: str | os.PathLike[str],
    arrays: Sequence[tuple[str, np.ndarray]],
    *,
    rank: int,
    level: int,
    ckpt_id: int,
    exec_id: str,
    nranks: int,
    meta: Mapping[str, Any] | None = None,
    chunk_bytes: int = DEFAULT_CHUNK,
    fsync: bool = True,
    layouts: Mapping[str, Layout] | None = None,
    writeback: bool | None = None,
    direct: bool = False,
    recycle: str | os.PathLike[str] | None = None,
) -> tuple[AtomicWriter, FileInfo, bytes]:
    """:func:`write_file` up to, not including, the commit: every byte is written under the temporary name.
    ``writeback``: as :class:`AtomicWriter`'s (default: on when ``fsync`` is); ``direct`` and ``recycle``:
    as :func:`write_file`'s.

    Returns the writer (the caller commits or aborts it: see :mod:`ftkit.storage.pending`), the file's
    :class:`FileInfo`, and the file's first ``data_offset`` bytes (preamble and final header): the rest of
    the file is the arrays' bytes, back to back.

    Raises
    ------
    StorageError
        As :func:`write_file` (the temporary file is removed).
    """
    path = Path(path)
    fields_, placeholder, sections = _plan_file(arrays, rank, level, ckpt_id, exec_id, nranks, meta, layouts)
    head_bytes = PREAMBLE.size + len(placeholder)   # kept in memory by a direct writer, to be rewritten
    writer = AtomicWriter(path, fsync=fsync, writeback=writeback,
                          direct=direct and fields_["file_size"] >= DIRECT_MIN_BYTES
                          and head_bytes <= DIRECT_CHUNK, recycle=recycle)
    try:
        writer.pwrite(_preamble(placeholder) + placeholder, 0)
        # Direct: hashed and handed over one staging buffer at a time. xxh3 and the copy hold the GIL, which
        # the direct-write thread needs between two writes: a 16 MiB piece left the device idle meanwhile.
        step = min(chunk_bytes, DIRECT_CHUNK) if writer.direct else chunk_bytes
        final = _stream_sections(arrays, sections, lambda piece, at: writer.pwrite(piece, at),
                                 lambda _item: step)
        head = _final_head(fields_, final, placeholder)
        writer.pwrite(head, 0)
    except OSError as exc:
        writer.abort()
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot write checkpoint file {path}: {exc.strerror or exc}") from exc
    except BaseException:
        writer.abort()
        raise
    header = head[PREAMBLE.size:]
    hdr = decode_header(header, xxhash.xxh3_64_intdigest(header), str(path))
    return writer, FileInfo(hdr.file_size, hdr.digest, hdr), head


def write_compressed(
    path: str | os.PathLike[str],
    arrays: Sequence[tuple[str, np.ndarray]],
    *,
    rank: int,
    level: int,
    ckpt_id: int,
    exec_id: str,
    nranks: int,
    codec: str,
    codec_level: int,
    codecs: Mapping[str, str] | None = None,
    meta: Mapping[str, Any] | None = None,
    fsync: bool = True,
    layouts: Mapping[str, Layout] | None = None,
) -> FileInfo:
    """Write ``arrays`` as a compressed copy (:mod:`ftkit.storage.format.compressed`) of the checkpoint file
    :func:`write_file` would write, straight from the arrays (no plain file first), atomically.

    Each section is compressed in chunks with ``codecs[name]`` or else ``codec`` (lz4, zstd, blosc, none) at
    ``codec_level``; the preamble and header are stored raw. The logical bytes, and so the header digest
    returned, are exactly those of :func:`write_file` with the same arguments. Other parameters as
    :func:`write_file`.

    Raises
    ------
    ConfigError
        If a codec is unknown or its library missing (nothing is written).
    StorageError
        If the file cannot be written (the temporary file is removed).
    """
    codecs = codecs or {}
    fields_, placeholder, sections = _plan_file(arrays, rank, level, ckpt_id, exec_id, nranks, meta, layouts)
    pieces = [(s.offset, s.nbytes, np.dtype(s.dtype).itemsize, codecs.get(s.name, codec)) for s in sections]
    writer = ChunkWriter(path, pieces, codec_level, head_bytes=PREAMBLE.size + len(placeholder), fsync=fsync)
    try:
        final = _stream_sections(arrays, sections, lambda piece, _at: writer.put(piece), chunk_step)
        head = _final_head(fields_, final, placeholder)
        writer.finish(head)
    except OSError as exc:
        writer.abort()
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot write compressed checkpoint file {path}: {exc.strerror or exc}") from exc
    except BaseException:
        writer.abort()
        raise
    header = head[PREAMBLE.size:]
    hdr = decode_header(header, xxhash.xxh3_64_intdigest(header), str(path))
    return FileInfo(hdr.file_size, hdr.digest, hdr)
