"""The header of an ftkit checkpoint file: its fields, its JSON encoding and its strict parser.

The layout of the whole file and what a reader may assume are stated in :mod:`ftkit.storage.format.container`.
The parser here is strict: any malformed header -- wrong types, a dtype NumPy does not know, numbers too
large, JSON nested too deeply -- is a :class:`~ftkit.errors.FormatError` naming the file and the field; no
other exception escapes it.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import FormatError
from .global_layout import Layout, parse_layout

__all__ = ["MAGIC", "VERSION", "PREAMBLE", "Section", "Header", "FileInfo", "encode_header", "decode_header",
           "parse_dtype", "section_of", "digest_hex", "chunk_count"]

MAGIC = b"FTKITCKP"
VERSION = 1
PREAMBLE = struct.Struct("<8sHHIQQ")
_ZERO_DIGEST = "0" * 16
_DTYPE_RE = re.compile(r"^[<>|][biufc][0-9]{1,2}$")
#: Largest integer accepted in a header field (offsets and sizes are 64-bit).
_MAX_INT = 2**63 - 1


def digest_hex(h: Any) -> str:
    """Return the 16-hex-digit form of an xxh3-64 hasher's digest."""
    return f"{h.intdigest():016x}"


def parse_dtype(text: Any, where: str = "") -> np.dtype:
    """Return the dtype named by ``text`` if it is a plain number type string, else raise FormatError."""
    dt = None
    if isinstance(text, str) and _DTYPE_RE.match(text):
        try:
            dt = np.dtype(text)
        except (TypeError, ValueError):  # e.g. "<f3": well-formed, but no such type
            dt = None
    if dt is None or dt.str[1:] != text[1:] or dt.kind not in "biufc":
        raise FormatError(f"{where}unsupported dtype {text!r}: ftkit stores only bool, integer, float and "
                          "complex arrays")
    return dt


@dataclass(frozen=True)
class Section:
    """One stored array: name, dtype string, shape, byte offset and length in the file, xxh3 digest (hex)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    xxh3: str = _ZERO_DIGEST
    #: Where the array sits in a global array (None: a per-rank array, the format of version 1 files).
    layout: Layout | None = None
    #: With a layout: bytes per digest chunk and the chunks' xxh3 digests (16 hex digits each, concatenated),
    #: so that a reader of a few boxes verifies what it reads without reading the whole section.
    chunk: int = 0
    chunk_xxh3: str = ""

    def to_json(self) -> dict[str, Any]:
        doc = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "offset": self.offset,
               "nbytes": self.nbytes, "xxh3": self.xxh3}
        if self.layout is not None:
            doc.update(layout=self.layout.to_json(), chunk=self.chunk, chunk_xxh3=self.chunk_xxh3)
        return doc

    def chunk_digest(self, i: int) -> str:
        """The digest of digest chunk ``i`` (bytes ``i * chunk`` onward of the section)."""
        return self.chunk_xxh3[16 * i:16 * i + 16]


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


def encode_header(fields_: Mapping[str, Any], sections: Sequence[Section], header_len: int = 0) -> bytes:
    """Encode a header JSON (padded with spaces to at least ``header_len`` bytes)."""
    doc = dict(fields_)
    doc["sections"] = [s.to_json() for s in sections]
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    if len(raw) < header_len:
        raw += b" " * (header_len - len(raw))
    return raw



def decode_header(raw: bytes, digest: int, where: str = "") -> Header:
    """Parse and check header bytes (whose xxh3-64 is ``digest``).

    Raises
    ------
    FormatError
        On any malformed or inconsistent header (no other exception escapes).
    """
    pre = f"{where}: " if where else ""
    try:
        return _decode(raw, digest, pre)
    except FormatError:
        raise
    except Exception as exc:  # RecursionError, MemoryError, ValueError from huge numbers...
        raise FormatError(f"{pre}malformed header ({type(exc).__name__}: {exc})") from exc


def _decode(raw: bytes, digest: int, pre: str) -> Header:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise FormatError(f"{pre}header is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != "ftkit-checkpoint":
        raise FormatError(f"{pre}header is not an ftkit checkpoint header")

    def _int(key: str, d: Mapping[str, Any] = doc) -> int:
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_INT:
            raise FormatError(f"{pre}header field {key!r} = {_short(v)} is not a non-negative 64-bit integer")
        return v

    data_offset, file_size = _int("data_offset"), _int("file_size")
    raw_sections = doc.get("sections")
    if not isinstance(raw_sections, list):
        raise FormatError(f"{pre}header field 'sections' is not a list")
    sections, expect, names = [], data_offset, set()
    for s in raw_sections:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise FormatError(f"{pre}malformed section entry {_short(s)}")
        name = s["name"]
        if name in names:
            raise FormatError(f"{pre}section {name!r} appears twice")
        names.add(name)
        dt = parse_dtype(s.get("dtype"), f"{pre}section {name!r}: ")
        shape = s.get("shape")
        if not isinstance(shape, list) or len(shape) > 64 or any(
                isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= _MAX_INT for d in shape):
            raise FormatError(f"{pre}section {name!r}: bad shape {_short(shape)}")
        offset, nbytes = _int("offset", s), _int("nbytes", s)
        if nbytes != math.prod(shape) * dt.itemsize:
            raise FormatError(f"{pre}section {name!r}: {nbytes} bytes do not match shape {shape} of {dt}")
        if offset != expect:
            raise FormatError(f"{pre}section {name!r}: offset {offset} should be {expect}")
        digest_s = s.get("xxh3")
        if not isinstance(digest_s, str) or not re.fullmatch(r"[0-9a-f]{16}", digest_s):
            raise FormatError(f"{pre}section {name!r}: bad digest {_short(digest_s)}")
        sections.append(Section(name, dt.str, tuple(shape), offset, nbytes, digest_s,
                                *_layout_fields(s, tuple(shape), nbytes, f"{pre}section {name!r}: ")))
        expect += nbytes
    if expect != file_size:
        raise FormatError(f"{pre}sections end at {expect} but file_size is {file_size}")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise FormatError(f"{pre}header field 'meta' is not an object")
    exec_id = doc.get("exec_id")
    if not isinstance(exec_id, str) or not exec_id.isprintable():
        raise FormatError(f"{pre}header field 'exec_id' is not a string")
    return Header(rank=_int("rank"), level=_int("level"), ckpt_id=_int("ckpt_id"), exec_id=exec_id,
                  nranks=_int("nranks"), sections=tuple(sections), data_offset=data_offset,
                  file_size=file_size, digest=f"{digest:016x}", meta=meta)


def chunk_count(nbytes: int, chunk: int) -> int:
    """Number of digest chunks of ``chunk`` bytes in a section of ``nbytes`` bytes."""
    return -(-nbytes // chunk)


def _layout_fields(s: Mapping[str, Any], shape: tuple[int, ...], nbytes: int,
                   pre: str) -> tuple[Layout | None, int, str]:
    """The optional layout of a section and its chunk digests (all three present, or none)."""
    if "layout" not in s:
        return None, 0, ""
    layout = parse_layout(s["layout"], shape, pre)
    chunk, digests = s.get("chunk"), s.get("chunk_xxh3")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 0 < chunk <= _MAX_INT:
        raise FormatError(f"{pre}bad digest chunk size {_short(chunk)}")
    want = 16 * chunk_count(nbytes, chunk)
    if not isinstance(digests, str) or len(digests) != want or not re.fullmatch(r"[0-9a-f]*", digests):
        raise FormatError(f"{pre}chunk digests are not {want} hex digits")
    return layout, chunk, digests


def _short(v: Any, limit: int = 60) -> str:
    """``repr(v)`` cut to ``limit`` characters (a hostile header must not flood the message)."""
    r = repr(v)
    return r if len(r) <= limit else r[:limit] + "..."
