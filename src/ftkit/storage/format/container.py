"""The ftkit checkpoint file container: one file per rank per checkpoint.

Layout (all integers little-endian, all sizes and offsets 64-bit)::

    offset 0   preamble (32 bytes): magic b"FTKITCKP", version u16, flags u16, reserved u32,
               header_len u64, header_xxh3 u64 (xxh3-64 of the header bytes)
    offset 32  header: UTF-8 JSON object, right-padded with spaces to header_len bytes
    data_offset = 32 + header_len: the sections' raw bytes, back to back, in header order

Header keys: ``format`` ("ftkit-checkpoint"), ``rank``, ``level`` (the level the checkpoint was taken at; a
copy of the file at another level is byte-identical), ``ckpt_id``, ``exec_id``, ``nranks``, ``data_offset``,
``file_size``, ``meta`` (a JSON object free for extensions) and ``sections``: a list of
``{"name", "dtype", "shape", "offset", "nbytes", "xxh3"}`` where ``dtype`` is a NumPy type string of a plain
number type (``<f8``, ``|b1``, ``>i4``...), ``offset``/``nbytes`` locate the raw C-order bytes and ``xxh3`` is
the 16-hex-digit xxh3-64 digest of those bytes. A section protected with a global layout also has ``layout``
(``{"global_shape", "boxes": [[local, start, shape], ...]}``, see :mod:`ftkit.storage.format.global_layout`),
``chunk`` (bytes per digest chunk) and ``chunk_xxh3`` (the xxh3-64 of every chunk, 16 hex digits each,
concatenated): a reader of a few boxes verifies every byte it reads by reading whole chunks only. Sections
without a layout carry none of the three keys (files written before layouts existed are read unchanged).
A generator or dict is a ``|u1`` section of shape ``(n,)`` holding a *state record*
(:mod:`ftkit.storage.format.staterecord`), unmarked in the header: such files are plain version 1 files.

What a reader may assume once :func:`read_header` returned: the magic, version and header digest matched; the
sections are laid out back to back from ``data_offset`` without overlap; ``nbytes`` equals the product of the
shape times the item size; the file is exactly ``file_size`` bytes long. Section *contents* are only trusted
after :func:`verify_file` or while :func:`read_into` checks them. Nothing read is ever executed or unpickled:
dtypes are parsed from a short allow-listed string.

The header's fields and its strict parser live in :mod:`ftkit.storage.format.header` (re-exported here).

Writing lives in :mod:`ftkit.storage.format.filewrite` (re-exported here): each protected buffer is streamed
straight to the file, plain or compressed, hashing as it goes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xxhash

from ...errors import CheckpointNotFoundError, CorruptionError, FormatError, StorageError
from .._direct import DIRECT_CHUNK, DIRECT_MIN_BYTES
from .._fsutil import AtomicWriter
from .compressed import open_source
from .filewrite import (
    DEFAULT_CHUNK,
    array_bytes,
    digest_chunk_size,
    write_compressed,
    write_file,
    write_uncommitted,
)
from .header import (
    MAGIC,
    PREAMBLE,
    VERSION,
    FileInfo,
    Header,
    Section,
    decode_header,
    digest_hex,
    encode_header,
    parse_dtype,
    section_of,
)
from .source import ByteSource

__all__ = ["MAGIC", "VERSION", "PREAMBLE", "Section", "Header", "FileInfo", "DEFAULT_CHUNK",
           "encode_header", "decode_header", "write_file", "write_uncommitted", "read_header",
           "read_header_bytes",
           "read_source_header", "verify_file",
           "read_into", "read_arrays", "copy_file", "parse_dtype", "section_of", "digest_hex",
           "digest_chunk_size", "write_compressed"]

_MAX_HEADER = 64 * 2**20

def read_header(path: str | os.PathLike[str]) -> Header:
    """Read and check the header of the checkpoint file at ``path`` (not the section contents).

    Raises
    ------
    CheckpointNotFoundError
        If the file does not exist.
    FormatError
        If it is not an ftkit file, has an unsupported version, a damaged header, or is truncated.
    """
    return read_header_bytes(path)[0]


def read_header_bytes(path: str | os.PathLike[str]) -> tuple[Header, bytes]:
    """:func:`read_header`, also returning the header's bytes (to send to a peer, which parses them with
    :func:`decode_header` and checks their digest itself)."""
    with open_source(path) as src:  # a plain file or a compressed copy (see .compressed)
        return read_source_header(src)


def read_source_header(src: ByteSource) -> tuple[Header, bytes]:
    """:func:`read_header_bytes` of any byte source (a plain file, a differential L4 checkpoint...).

    Raises
    ------
    FormatError, CorruptionError, StorageError
        As :func:`read_header` (a source too short for its header or its recorded size is truncated).
    """
    name, size = src.name, src.size
    if size < PREAMBLE.size:
        raise FormatError(f"{name}: truncated ({size} bytes): too short for an ftkit checkpoint file")
    pre = bytearray(PREAMBLE.size)
    src.read_into(0, memoryview(pre))
    magic, version, flags, reserved, header_len, hdigest = PREAMBLE.unpack(pre)
    if magic != MAGIC:
        raise FormatError(f"{name}: not an ftkit checkpoint file (bad magic {magic!r})")
    if version != VERSION:
        raise FormatError(f"{name}: format version {version} is not supported (this ftkit reads "
                          f"version {VERSION}): use a matching ftkit")
    if flags or reserved:
        raise FormatError(f"{name}: unknown flags {flags:#x}/{reserved:#x} in the preamble: damaged, "
                          "or written by a newer ftkit")
    if header_len > min(_MAX_HEADER, size - PREAMBLE.size):
        raise FormatError(f"{name}: truncated or damaged: header of {header_len} bytes does not fit "
                          f"in {size} bytes")
    buf = bytearray(header_len)
    src.read_into(PREAMBLE.size, memoryview(buf))
    raw = bytes(buf)
    actual = xxhash.xxh3_64_intdigest(raw)
    if actual != hdigest:
        raise CorruptionError(f"{name}: header checksum mismatch (stored {hdigest:016x}, computed "
                              f"{actual:016x}): the file is damaged")
    header = decode_header(raw, actual, name)
    if size != header.file_size:
        what = "truncated" if size < header.file_size else "has trailing bytes"
        raise FormatError(f"{name}: {what}: {size} bytes on disk, header says {header.file_size}")
    return header, raw


def _hash_range(src: ByteSource, offset: int, nbytes: int, buf: bytearray) -> str:
    """xxh3 (hex) of ``nbytes`` bytes at ``offset``, read through ``buf``."""
    h = xxhash.xxh3_64()
    done = 0
    view = memoryview(buf)
    while done < nbytes:
        n = min(len(buf), nbytes - done)
        src.read_into(offset + done, view[:n])
        h.update(view[:n])
        done += n
    return digest_hex(h)


def verify_file(path: str | os.PathLike[str], *, expect_digest: str | None = None,
                chunk_bytes: int = DEFAULT_CHUNK) -> Header:
    """Check the file at ``path`` completely: header, size and every section's xxh3 digest.

    Parameters
    ----------
    expect_digest
        If given, the header digest recorded for this file elsewhere (the manifest); a different one means the
        file is not the one that was committed.
    chunk_bytes
        Size (bytes) of the one read buffer used.

    Raises
    ------
    CheckpointNotFoundError, FormatError, CorruptionError
        Naming the file and, for a checksum mismatch, the section.
    """
    path = Path(path)
    header = read_header(path)
    if expect_digest is not None and header.digest != expect_digest:
        raise CorruptionError(f"{path}: header digest {header.digest} differs from the recorded "
                              f"{expect_digest}: not the file that was committed")
    buf = bytearray(max(1, min(chunk_bytes, max((s.nbytes for s in header.sections), default=1))))
    with open_source(path) as src:
        for s in header.sections:
            got = _hash_range(src, s.offset, s.nbytes, buf)
            if got != s.xxh3:
                raise CorruptionError(f"{path}: checksum mismatch in section {s.name!r} (stored {s.xxh3}, "
                                      f"computed {got}): the file is damaged")
    return header


def read_into(path: str | os.PathLike[str], targets: Mapping[str, np.ndarray], header: Header | None = None,
              *, chunk_bytes: int = DEFAULT_CHUNK) -> Header:
    """Read sections of ``path`` straight into ``targets`` (name → C-contiguous array), checking digests.

    Shapes and dtypes are checked for every target before any byte is written into one.

    Raises
    ------
    ShapeMismatchError
        If a target's shape or dtype differs from the stored section (nothing is overwritten).
    FormatError, CorruptionError
        On a damaged file (targets may then hold partial data).
    """
    from ...errors import ShapeMismatchError

    path = Path(path)
    header = header or read_header(path)
    for name, arr in targets.items():
        s = header.section(name)
        if tuple(arr.shape) != s.shape or arr.dtype.str != s.dtype:
            raise ShapeMismatchError(f"array {name!r}: checkpoint holds shape {s.shape} dtype {s.dtype}, the "
                                     f"protected array is shape {tuple(arr.shape)} dtype {arr.dtype.str}; "
                                     "protect an array of the stored shape and dtype before recover()")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise ShapeMismatchError(f"array {name!r} must be C-contiguous and writeable to recover into it")
    with open_source(path) as src:
        for name, arr in targets.items():
            s = header.section(name)
            got = _read_direct(src, s, array_bytes(arr), chunk_bytes)
            if got != s.xxh3:
                raise CorruptionError(f"{path}: checksum mismatch in section {name!r} while reading (stored "
                                      f"{s.xxh3}, computed {got})")
    return header


def _read_direct(src: ByteSource, s: Section, view: memoryview, chunk_bytes: int) -> str:
    h = xxhash.xxh3_64()
    for done in range(0, s.nbytes, chunk_bytes):
        piece = view[done:done + min(chunk_bytes, s.nbytes - done)]
        src.read_into(s.offset + done, piece)
        h.update(piece)
    return digest_hex(h)


def read_arrays(path: str | os.PathLike[str], *, chunk_bytes: int = DEFAULT_CHUNK,
                header: Header | None = None) -> dict[str, np.ndarray]:
    """Read every section of ``path`` into new arrays (checking digests); return name → array.

    ``header`` is the file's :func:`read_header`, if the caller already read it (then it is not read again).
    """
    header = header or read_header(path)
    try:
        out = {s.name: np.empty(s.shape, dtype=np.dtype(s.dtype)) for s in header.sections}
    except (ValueError, MemoryError) as exc:  # dimensions too large for this machine
        raise FormatError(f"{path}: cannot hold the stored arrays ({exc})") from exc
    read_into(path, out, header, chunk_bytes=chunk_bytes)
    return out


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, chunk_bytes: int = DEFAULT_CHUNK,
              fsync: bool = True, direct: bool = False) -> int:
    """Copy ``src`` to ``dst`` atomically (temporary name, fsync, rename, fsync dir) with one chunk buffer.

    With ``direct`` (and ``fsync``), a ``src`` of :data:`~ftkit.storage._direct.DIRECT_MIN_BYTES` or more is
    written with direct I/O, bypassing the page cache, as :func:`write_file`'s ``direct`` (the same
    :class:`~ftkit.storage._fsutil.AtomicWriter`; buffered where the file system refuses it), one staging
    buffer per read. The bytes are the same.

    Returns the number of bytes copied. Missing directories of ``dst`` are created; on any error the
    temporary file is removed and ``dst`` is left as it was.

    Raises
    ------
    CheckpointNotFoundError
        If ``src`` is missing.
    StorageError
        If the copy fails (the temporary file is removed).
    """
    src, dst = Path(src), Path(dst)
    try:
        sfd = os.open(src, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"{src}: file to copy is missing") from exc
    except OSError as exc:
        raise StorageError(f"cannot open {src} to copy it: {exc.strerror or exc}") from exc
    try:
        direct = direct and fsync and os.fstat(sfd).st_size >= DIRECT_MIN_BYTES
        with AtomicWriter(dst, fsync=fsync, direct=direct) as writer:
            # Direct: a read per staging buffer, so the direct-write thread gets the GIL between two (as
            # write_uncommitted hands over its pieces).
            view = memoryview(bytearray(min(chunk_bytes, DIRECT_CHUNK) if writer.direct else chunk_bytes))
            total = 0
            while n := os.readv(sfd, [view]):
                writer.pwrite(view[:n], total)
                total += n
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot copy {src} to {dst}: {exc.strerror or exc}") from exc
    finally:
        os.close(sfd)
    return total
