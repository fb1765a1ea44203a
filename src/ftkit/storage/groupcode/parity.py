"""The parity file of an encoded (L3) group: a self-describing header and the parity bytes.

Layout (little endian)::

    magic  b"FTKPRTY1"          8 bytes
    length uint32               byte length of the JSON header that follows
    header JSON (UTF-8)         see ParityHeader; zero-padded up to ``payload_offset``
    payload                     ``payload_length`` parity bytes, from ``payload_offset`` (a multiple of 4096)

What a reader may assume: a parity file whose header parses, whose fields have the types below and
whose payload hashes to ``payload_digest`` (xxh3-64) holds row ``index`` of the group's code computed from
data files of exactly ``sizes`` bytes hashing to ``digests``; parity files of one encoding carry the
same ``tag``, ``code``, ``sizes`` and ``digests``. Only JSON is parsed; nothing read is ever executed.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ...errors import FormatError
from .._stream import AtomicWriter, byte_view, read_into

__all__ = ["MAGIC", "ParityHeader", "payload_offset_for", "write_parity_header", "read_parity_header",
           "verify_parity"]

MAGIC = b"FTKPRTY1"
_FORMAT = 1
_MAX_INT = 2**63 - 1
_MAX_PAD = 1 << 20


@dataclass(frozen=True)
class ParityHeader:
    """Header of one parity file.

    Attributes
    ----------
    code : ``"rs"`` (Reed-Solomon, ``k`` data -> ``k`` parity, one row per member) or ``"xor"``.
    k : members (= data files) of the group.
    index : member that stores this file (= the parity row for ``rs``, the stripe column for ``xor``).
    sizes : byte size of each member's data file (the code treats them as zero-padded to the largest).
    digests : xxh3-64 (hex) of each member's data file.
    payload_offset, payload_length : where the parity bytes start, and how many there are.
    payload_digest : xxh3-64 (hex) of the parity bytes.
    tag : identity of the encoding given by the caller (e.g. the checkpoint id).
    """

    code: str
    k: int
    index: int
    sizes: tuple[int, ...]
    digests: tuple[str, ...]
    payload_offset: int
    payload_length: int
    payload_digest: str
    tag: str

    def same_encoding(self, other: ParityHeader) -> bool:
        """True when both headers come from the same encoding of the same data files."""
        return (self.code, self.k, self.sizes, self.digests, self.tag, self.payload_length) == \
            (other.code, other.k, other.sizes, other.digests, other.tag, other.payload_length)


def payload_offset_for(k: int) -> int:
    """Return the payload offset (bytes) reserved for the header of a ``k``-member group."""
    need = 1024 + 96 * k
    return -(-need // 4096) * 4096


def write_parity_header(writer: AtomicWriter, header: ParityHeader) -> None:
    """Write ``header`` at the start of a parity file being written.

    Raises
    ------
    FormatError
        If the header does not fit before ``payload_offset`` (a tag far too long).
    """
    blob = json.dumps({"format": _FORMAT, **asdict(header)}, separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<I", len(blob)) + blob
    if len(head) > header.payload_offset:
        raise FormatError(f"parity header of {len(head)} bytes does not fit in {header.payload_offset}: "
                          "use a shorter tag")
    writer.pwrite(head, 0)


def read_parity_header(path: str | os.PathLike[str]) -> ParityHeader:
    """Read and check the header of parity file ``path`` (the payload is not read).

    Raises
    ------
    FormatError
        If the file is missing, unreadable, not an ftkit parity file, truncated, or its header is malformed
        in any way (no other exception escapes).
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            start = f.read(12)
            if len(start) < 12 or start[:8] != MAGIC:
                raise FormatError(f"{p} is not an ftkit parity file (bad magic)")
            (n,) = struct.unpack("<I", start[8:])
            if n > 1 << 20:
                raise FormatError(f"{p}: header length {n} is implausible")
            blob = f.read(n)
            size = os.fstat(f.fileno()).st_size
            padding = f.read(_MAX_PAD)
    except OSError as exc:
        raise FormatError(f"{p}: unreadable parity file ({exc.strerror or exc})") from exc
    try:
        h = _parse(blob, p)
    except FormatError:
        raise
    except Exception as exc:  # RecursionError, ValueError from huge numbers, ...
        raise FormatError(f"{p}: malformed parity header ({type(exc).__name__})") from exc
    if size != h.payload_offset + h.payload_length:
        raise FormatError(f"{p}: {size} bytes, expected {h.payload_offset + h.payload_length} (truncated?)")
    pad = h.payload_offset - 12 - n
    if not 0 <= pad <= _MAX_PAD or padding[:pad].count(0) != pad:
        raise FormatError(f"{p}: the header's zero padding up to byte {h.payload_offset} is damaged")
    return h


def _int(raw: dict[str, Any], key: str, p: Path, lo: int = 0) -> int:
    v = raw.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= _MAX_INT:
        raise FormatError(f"{p}: parity header field {key!r} is not an integer >= {lo}")
    return v


def _parse(blob: bytes, p: Path) -> ParityHeader:
    try:
        raw = json.loads(blob.decode())
    except ValueError as exc:
        raise FormatError(f"{p}: unreadable parity header ({exc})") from exc
    if not isinstance(raw, dict):
        raise FormatError(f"{p}: parity header is not a JSON object")
    if type(raw.get("format")) is not int or raw.get("format") != _FORMAT:
        raise FormatError(f"{p}: unsupported parity format version")
    k = _int(raw, "k", p, lo=1)
    sizes, digests = raw.get("sizes"), raw.get("digests")
    if not isinstance(sizes, list) or len(sizes) != k or any(
            isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= _MAX_INT for x in sizes):
        raise FormatError(f"{p}: parity header field 'sizes' is not {k} byte counts")
    if not isinstance(digests, list) or len(digests) != k or not all(_is_digest(d) for d in digests):
        raise FormatError(f"{p}: parity header field 'digests' is not {k} xxh3 digests")
    code, tag, payload_digest = raw.get("code"), raw.get("tag"), raw.get("payload_digest")
    if code not in ("rs", "xor") or not isinstance(tag, str) or not _is_digest(payload_digest):
        raise FormatError(f"{p}: parity header fields 'code', 'tag' or 'payload_digest' are malformed")
    index = _int(raw, "index", p)
    if index >= k:
        raise FormatError(f"{p}: inconsistent parity header (index {index} of a {k}-member group)")
    return ParityHeader(code=code, k=k, index=index, sizes=tuple(sizes), digests=tuple(digests),
                        payload_offset=_int(raw, "payload_offset", p),
                        payload_length=_int(raw, "payload_length", p), payload_digest=str(payload_digest),
                        tag=tag)


def _is_digest(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 16 and all(c in "0123456789abcdef" for c in v)


def verify_parity(path: str | os.PathLike[str], chunk_size: int = 4 << 20) -> ParityHeader:
    """Read parity file ``path`` whole and check its payload digest; return its header.

    Raises
    ------
    FormatError
        If the header is bad (see :func:`read_parity_header`).
    CorruptionError
        If the payload does not match its digest.
    """
    from ...errors import CorruptionError

    h = read_parity_header(path)
    hasher = xxhash.xxh3_64()
    buf = np.empty(min(chunk_size, max(h.payload_length, 1)), np.uint8)
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            for off in range(0, h.payload_length, buf.size):
                n = min(buf.size, h.payload_length - off)
                read_into(fd, h.payload_offset + off, buf[:n], h.payload_offset + h.payload_length)
                hasher.update(byte_view(buf)[:n])
        finally:
            os.close(fd)
    except OSError as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"{path}: unreadable parity payload ({exc.strerror or exc})") from exc
    if hasher.hexdigest() != h.payload_digest:
        raise CorruptionError(f"{path}: parity payload does not match its checksum (damaged file)")
    return h
