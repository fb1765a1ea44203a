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
the 16-hex-digit xxh3-64 digest of those bytes.

What a reader may assume once :func:`read_header` returned: the magic, version and header digest matched; the
sections are laid out back to back from ``data_offset`` without overlap; ``nbytes`` equals the product of the
shape times the item size; the file is exactly ``file_size`` bytes long. Section *contents* are only trusted
after :func:`verify_file` or while :func:`read_into` checks them. Nothing read is ever executed or unpickled:
dtypes are parsed from a short allow-listed string.

Writing streams each protected buffer straight to the file in chunks (memoryviews: no copy of the data),
hashing as it goes; the header is written first with zero digests and rewritten in place with the real
ones (same length), so one pass over memory suffices and ftkit's extra memory stays near zero whatever the
size.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..errors import CheckpointNotFoundError, CorruptionError, FormatError, StorageError
from ._fsutil import fsync_dir, tmp_path_for, write_all

__all__ = ["MAGIC", "VERSION", "PREAMBLE", "Section", "Header", "FileInfo", "DEFAULT_CHUNK",
           "encode_header", "decode_header", "write_file", "read_header", "verify_file", "read_into",
           "read_arrays", "copy_file", "parse_dtype", "section_of", "digest_hex"]

MAGIC = b"FTKITCKP"
VERSION = 1
PREAMBLE = struct.Struct("<8sHHIQQ")
DEFAULT_CHUNK = 16 * 2**20
_ZERO_DIGEST = "0" * 16
_DTYPE_RE = re.compile(r"^[<>|][biufc][0-9]{1,2}$")
_MAX_HEADER = 64 * 2**20


def digest_hex(h: Any) -> str:
    """Return the 16-hex-digit form of an xxh3-64 hasher's digest."""
    return f"{h.intdigest():016x}"


def parse_dtype(text: Any, where: str = "") -> np.dtype:
    """Return the dtype named by ``text`` if it is a plain number type string, else raise FormatError."""
    if not isinstance(text, str) or not _DTYPE_RE.match(text):
        raise FormatError(f"{where}unsupported dtype {text!r}: ftkit stores only bool, integer, float and "
                          "complex arrays")
    return np.dtype(text)


@dataclass(frozen=True)
class Section:
    """One stored array: name, dtype string, shape, byte offset and length in the file, xxh3 digest (hex)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    xxh3: str = _ZERO_DIGEST

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "offset": self.offset,
                "nbytes": self.nbytes, "xxh3": self.xxh3}


@dataclass(frozen=True)
class Header:
    """The parsed header of a checkpoint file."""

    rank: int
    level: int
    ckpt_id: int
    exec_id: str
    nranks: int
    sections: tuple[Section, ...]
    data_offset: int
    file_size: int
    digest: str                      # xxh3-64 (hex) of the header bytes: the file's fingerprint
    meta: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> Section:
        """Return the section called ``name``; raise FormatError if there is none."""
        return section_of(self.sections, name)


@dataclass(frozen=True)
class FileInfo:
    """What a writer learned about the file it wrote: its size (bytes) and header digest (its fingerprint)."""

    size: int
    digest: str
    header: Header | None = None


def section_of(sections: Sequence[Section], name: str) -> Section:
    """Return the section called ``name`` from ``sections``; raise FormatError if there is none."""
    for s in sections:
        if s.name == name:
            return s
    raise FormatError(f"no section named {name!r} (the file holds {[s.name for s in sections]})")


def _array_bytes(array: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array, without copying."""
    if not array.flags.c_contiguous:
        raise StorageError("ftkit writes C-contiguous arrays only")
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def encode_header(fields_: Mapping[str, Any], sections: Sequence[Section], header_len: int = 0) -> bytes:
    """Encode a header JSON (padded with spaces to at least ``header_len`` bytes)."""
    doc = dict(fields_)
    doc["sections"] = [s.to_json() for s in sections]
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    if len(raw) < header_len:
        raw += b" " * (header_len - len(raw))
    return raw


def _layout(fields_: dict[str, Any], arrays: Sequence[tuple[str, np.ndarray]]) -> tuple[bytes, list[Section]]:
    """Fix the header length and section offsets (the header's length depends on the offsets' digits)."""
    header_len = 0
    while True:
        offset = PREAMBLE.size + header_len
        sections = []
        for name, arr in arrays:
            sections.append(Section(name, arr.dtype.str, tuple(int(d) for d in arr.shape), offset,
                                    int(arr.nbytes)))
            offset += int(arr.nbytes)
        fields_["data_offset"] = PREAMBLE.size + header_len
        fields_["file_size"] = offset
        raw = encode_header(fields_, sections, header_len)
        if len(raw) == header_len:
            return raw, sections
        header_len = max(len(raw), header_len)


def _preamble(header: bytes) -> bytes:
    return PREAMBLE.pack(MAGIC, VERSION, 0, 0, len(header), xxhash.xxh3_64_intdigest(header))


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
) -> FileInfo:
    """Write ``arrays`` to a checkpoint file at ``path`` atomically (temp name, fsync, rename, fsync dir).

    Parameters
    ----------
    path
        Final name of the file; its directory must exist.
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

    Returns
    -------
    FileInfo
        Size (bytes) and header digest of the file written.

    Raises
    ------
    StorageError
        If the file cannot be written (the temporary file is removed).
    """
    path = Path(path)
    for name, arr in arrays:
        parse_dtype(arr.dtype.str, f"array {name!r}: ")
    fields_ = {"format": "ftkit-checkpoint", "rank": int(rank), "level": int(level), "ckpt_id": int(ckpt_id),
               "exec_id": str(exec_id), "nranks": int(nranks), "meta": dict(meta or {})}
    placeholder, sections = _layout(fields_, arrays)
    tmp = tmp_path_for(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot create checkpoint file {tmp}: {exc.strerror or exc}") from exc
    try:
        write_all(fd, _preamble(placeholder) + placeholder)
        final = []
        for (_name, arr), sec in zip(arrays, sections, strict=True):
            h = xxhash.xxh3_64()
            view = _array_bytes(arr)
            for start in range(0, len(view), chunk_bytes):
                piece = view[start:start + chunk_bytes]
                h.update(piece)
                write_all(fd, piece)
            final.append(Section(sec.name, sec.dtype, sec.shape, sec.offset, sec.nbytes, digest_hex(h)))
        header = encode_header(fields_, final, len(placeholder))
        if len(header) != len(placeholder):  # pragma: no cover - digests are fixed width
            raise StorageError("internal error: header length changed")
        write_all(fd, _preamble(header) + header, offset=0)
        if fsync:
            os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write checkpoint file {path}: {exc.strerror or exc}") from exc
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
    hdr = decode_header(header, xxhash.xxh3_64_intdigest(header), str(path))
    return FileInfo(hdr.file_size, hdr.digest, hdr)


def decode_header(raw: bytes, digest: int, where: str = "") -> Header:
    """Parse and check header bytes (whose xxh3-64 is ``digest``); raise FormatError on any inconsistency."""
    pre = f"{where}: " if where else ""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{pre}header is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != "ftkit-checkpoint":
        raise FormatError(f"{pre}header is not an ftkit checkpoint header")

    def _int(key: str, d: Mapping[str, Any] = doc) -> int:
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise FormatError(f"{pre}header field {key!r} = {v!r} is not a non-negative integer")
        return v

    data_offset, file_size = _int("data_offset"), _int("file_size")
    raw_sections = doc.get("sections")
    if not isinstance(raw_sections, list):
        raise FormatError(f"{pre}header field 'sections' is not a list")
    sections, expect, names = [], data_offset, set()
    for s in raw_sections:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise FormatError(f"{pre}malformed section entry {s!r}")
        name = s["name"]
        if name in names:
            raise FormatError(f"{pre}section {name!r} appears twice")
        names.add(name)
        dt = parse_dtype(s.get("dtype"), f"{pre}section {name!r}: ")
        shape = s.get("shape")
        if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0
                                              for d in shape):
            raise FormatError(f"{pre}section {name!r}: bad shape {shape!r}")
        offset, nbytes = _int("offset", s), _int("nbytes", s)
        if nbytes != math.prod(shape) * dt.itemsize:
            raise FormatError(f"{pre}section {name!r}: {nbytes} bytes do not match shape {shape} of {dt}")
        if offset != expect:
            raise FormatError(f"{pre}section {name!r}: offset {offset} should be {expect}")
        digest_s = s.get("xxh3")
        if not isinstance(digest_s, str) or not re.fullmatch(r"[0-9a-f]{16}", digest_s):
            raise FormatError(f"{pre}section {name!r}: bad digest {digest_s!r}")
        sections.append(Section(name, dt.str, tuple(shape), offset, nbytes, digest_s))
        expect += nbytes
    if expect != file_size:
        raise FormatError(f"{pre}sections end at {expect} but file_size is {file_size}")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise FormatError(f"{pre}header field 'meta' is not an object")
    exec_id = doc.get("exec_id")
    if not isinstance(exec_id, str):
        raise FormatError(f"{pre}header field 'exec_id' is not a string")
    return Header(rank=_int("rank"), level=_int("level"), ckpt_id=_int("ckpt_id"), exec_id=exec_id,
                  nranks=_int("nranks"), sections=tuple(sections), data_offset=data_offset,
                  file_size=file_size, digest=f"{digest:016x}", meta=meta)


def read_header(path: str | os.PathLike[str]) -> Header:
    """Read and check the header of the checkpoint file at ``path`` (not the section contents).

    Raises
    ------
    CheckpointNotFoundError
        If the file does not exist.
    FormatError
        If it is not an ftkit file, has an unsupported version, a damaged header, or is truncated.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            pre = f.read(PREAMBLE.size)
            if len(pre) < PREAMBLE.size:
                raise FormatError(f"{path}: truncated ({size} bytes): too short for an ftkit checkpoint file")
            magic, version, flags, reserved, header_len, hdigest = PREAMBLE.unpack(pre)
            if magic != MAGIC:
                raise FormatError(f"{path}: not an ftkit checkpoint file (bad magic {magic!r})")
            if version != VERSION:
                raise FormatError(f"{path}: format version {version} is not supported (this ftkit reads "
                                  f"version {VERSION}): use a matching ftkit")
            if flags or reserved:
                raise FormatError(f"{path}: unknown flags {flags:#x}/{reserved:#x} in the preamble: damaged, "
                                  "or written by a newer ftkit")
            if header_len > min(_MAX_HEADER, size - PREAMBLE.size):
                raise FormatError(f"{path}: truncated or damaged: header of {header_len} bytes does not fit "
                                  f"in {size} bytes")
            raw = f.read(header_len)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"{path}: checkpoint file is missing") from exc
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    actual = xxhash.xxh3_64_intdigest(raw)
    if actual != hdigest:
        raise CorruptionError(f"{path}: header checksum mismatch (stored {hdigest:016x}, computed "
                              f"{actual:016x}): the file is damaged")
    header = decode_header(raw, actual, str(path))
    if size != header.file_size:
        what = "truncated" if size < header.file_size else "has trailing bytes"
        raise FormatError(f"{path}: {what}: {size} bytes on disk, header says {header.file_size}")
    return header


def _hash_range(fd: int, offset: int, nbytes: int, buf: bytearray, path: Path) -> str:
    """xxh3 (hex) of ``nbytes`` bytes at ``offset``, read through ``buf``."""
    h = xxhash.xxh3_64()
    done = 0
    view = memoryview(buf)
    while done < nbytes:
        n = min(len(buf), nbytes - done)
        got = os.preadv(fd, [view[:n]], offset + done)
        if got <= 0:
            raise FormatError(f"{path}: truncated while reading at offset {offset + done}")
        h.update(view[:got])
        done += got
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
    fd = os.open(path, os.O_RDONLY)
    try:
        for s in header.sections:
            got = _hash_range(fd, s.offset, s.nbytes, buf, path)
            if got != s.xxh3:
                raise CorruptionError(f"{path}: checksum mismatch in section {s.name!r} (stored {s.xxh3}, "
                                      f"computed {got}): the file is damaged")
    finally:
        os.close(fd)
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
    from ..errors import ShapeMismatchError

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
    fd = os.open(path, os.O_RDONLY)
    try:
        for name, arr in targets.items():
            s = header.section(name)
            view = _array_bytes(arr)
            got = _read_direct(fd, s, view, path, chunk_bytes)
            if got != s.xxh3:
                raise CorruptionError(f"{path}: checksum mismatch in section {name!r} while reading (stored "
                                      f"{s.xxh3}, computed {got})")
    finally:
        os.close(fd)
    return header


def _read_direct(fd: int, s: Section, view: memoryview, path: Path, chunk_bytes: int) -> str:
    h = xxhash.xxh3_64()
    done = 0
    while done < s.nbytes:
        n = min(chunk_bytes, s.nbytes - done)
        got = os.preadv(fd, [view[done:done + n]], s.offset + done)
        if got <= 0:
            raise FormatError(f"{path}: truncated while reading section {s.name!r}")
        h.update(view[done:done + got])
        done += got
    return digest_hex(h)


def read_arrays(path: str | os.PathLike[str], *, chunk_bytes: int = DEFAULT_CHUNK) -> dict[str, np.ndarray]:
    """Read every section of ``path`` into new arrays (checking digests); return name → array."""
    header = read_header(path)
    out = {s.name: np.empty(s.shape, dtype=np.dtype(s.dtype)) for s in header.sections}
    read_into(path, out, header, chunk_bytes=chunk_bytes)
    return out


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, chunk_bytes: int = DEFAULT_CHUNK,
              fsync: bool = True) -> int:
    """Copy ``src`` to ``dst`` atomically (temporary name, fsync, rename, fsync dir) with one chunk buffer.

    Returns the number of bytes copied. The destination's directory must exist.

    Raises
    ------
    CheckpointNotFoundError
        If ``src`` is missing.
    StorageError
        If the copy fails (the temporary file is removed).
    """
    src, dst = Path(src), Path(dst)
    tmp = tmp_path_for(dst)
    try:
        sfd = os.open(src, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(f"{src}: file to copy is missing") from exc
    try:
        dfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            buf = bytearray(chunk_bytes)
            view = memoryview(buf)
            total = 0
            while True:
                n = os.readv(sfd, [view])
                if n == 0:
                    break
                write_all(dfd, view[:n])
                total += n
            if fsync:
                os.fsync(dfd)
        except BaseException:
            os.close(dfd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(dfd)
    except OSError as exc:
        raise StorageError(f"cannot copy {src} to {dst}: {exc.strerror or exc}") from exc
    finally:
        os.close(sfd)
    os.replace(tmp, dst)
    if fsync:
        fsync_dir(dst.parent)
    return total
