"""The state record: a typed, self-describing binary encoding of small application state (no pickle).

A state record is stored as one section of a checkpoint file (dtype ``|u1``, shape ``(nbytes,)``), so every
level, copy, parity and digest treats it as any other array; only the application side encodes and decodes
it. A reader needs nothing but this specification. All integers are little-endian.

::

    record = magic  b"FTKSTATE" (8 bytes)
             version u8 (= 1)
             kind    u8: b"d" (a dict given to protect()) or b"g" (a random generator: the value is the
                     dict numpy's ``bit_generator.state`` holds)
             value   (one, ending exactly at the end of the section)

    value  = tag u8, then by tag:
      b"N"  None                   (no payload)
      b"F"  False, b"T" True       (no payload)
      b"i"  int                    n u32 (1 <= n), then n bytes: the two's-complement value, shortest form
      b"f"  float                  8 bytes: IEEE 754 binary64 (bit for bit: -0.0, NaN payloads, infinities)
      b"s"  str                    n u64, then n bytes of UTF-8
      b"b"  bytes                  n u64, then n bytes
      b"l"  list, b"t" tuple       n u64, then n values
      b"d"  dict                   n u64, then n (key, value) pairs in insertion order; a key is a value
                                   of tag N F T i f s b or t (of such), and keys are distinct
      b"a"  numpy array            dtype, ndim u8 (<= 32), ndim dimensions u64, then the raw C-order bytes
                                   (product of the dimensions times the item size)
      b"n"  numpy scalar           dtype, then the item size raw bytes
    dtype  = n u8, then n ASCII bytes: a NumPy type string of a plain number type (``<f8``, ``|b1``,
             ``>i4``..., as in the file header)

Rules of a reader: every length is checked against the bytes left before it is used (a count of ``n``
values needs at least ``n`` bytes), values nest at most :data:`MAX_DEPTH` deep, a record is at most
:data:`MAX_RECORD_BYTES` long, and anything else (an unknown tag, trailing bytes, invalid UTF-8, a
duplicate or unhashable key) is a :class:`~ftkit.errors.FormatError`: a damaged copy. Decoding takes time
linear in the record's length; nothing read is executed.

Writers accept exactly these Python types (subclasses other than NumPy scalars are refused, so a value
always comes back with its own type): anything else is an :class:`~ftkit.errors.UnsupportedStateError`
naming its path, raised before any byte is written.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ...errors import FormatError, UnsupportedStateError
from .header import parse_dtype

__all__ = ["MAGIC", "VERSION", "MAX_DEPTH", "MAX_RECORD_BYTES", "KIND_DICT", "KIND_GENERATOR",
           "encode_record", "decode_record"]

MAGIC = b"FTKSTATE"
VERSION = 1
KIND_DICT = b"d"
KIND_GENERATOR = b"g"
#: Deepest nesting of lists, tuples and dicts (the record's top-level value is depth 1).
MAX_DEPTH = 64
#: Longest record, bytes (small state: put big data in protected arrays).
MAX_RECORD_BYTES = 64 * 2**20
_MAX_NDIM = 32
_U8, _U32, _U64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<Q")
_F64 = struct.Struct("<d")
_KEY_TAGS = frozenset(b"NFTifsbt")


def _path_str(root: str, path: list[Any]) -> str:
    return root + "".join(f"[{p!r}]" for p in path)


class _Encoder:
    """Appends the encoding of a value to ``parts``; refuses what the format cannot hold."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.parts: list[bytes] = []
        self.size = 0
        self.path: list[Any] = []

    def fail(self, why: str) -> UnsupportedStateError:
        return UnsupportedStateError(f"{_path_str(self.root, self.path)}: {why}")

    def put(self, b: bytes) -> None:
        self.size += len(b)
        if self.size > MAX_RECORD_BYTES:
            raise UnsupportedStateError(
                f"{self.root}: the encoded state exceeds {MAX_RECORD_BYTES} bytes: protect large data as a "
                "NumPy array instead")
        self.parts.append(b)

    def dtype(self, dt: np.dtype) -> None:
        if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
            raise self.fail(f"numpy dtype {dt} is not supported (only bool, integer, float and complex)")
        text = dt.str.encode("ascii")
        self.put(_U8.pack(len(text)) + text)

    def value(self, v: Any, depth: int) -> None:  # noqa: C901 - one branch per type of the format
        if depth > MAX_DEPTH:
            raise self.fail(f"nested more than {MAX_DEPTH} levels deep (a container holding itself?)")
        t = type(v)
        if isinstance(v, np.generic):
            if not isinstance(v, np.bool_ | np.number):
                raise self.fail(f"{t.__module__}.{t.__name__} is not supported")
            self.put(b"n")
            self.dtype(v.dtype)
            self.put(v.tobytes())
        elif v is None:
            self.put(b"N")
        elif t is bool:
            self.put(b"T" if v else b"F")
        elif t is int:
            raw = v.to_bytes(((v if v >= 0 else ~v).bit_length() + 8) // 8, "little", signed=True)
            self.put(b"i" + _U32.pack(len(raw)) + raw)
        elif t is float:
            self.put(b"f" + _F64.pack(v))
        elif t is str:
            try:
                raw = v.encode("utf-8")
            except UnicodeEncodeError:
                raise self.fail("str with unpaired surrogates is not supported (not valid UTF-8)") from None
            self.put(b"s" + _U64.pack(len(raw)) + raw)
        elif t is bytes:
            self.put(b"b" + _U64.pack(len(v)) + v)
        elif t is list or t is tuple:
            self.put((b"l" if t is list else b"t") + _U64.pack(len(v)))
            for i, item in enumerate(v):
                self.path.append(i)
                self.value(item, depth + 1)
                self.path.pop()
        elif t is dict:
            self.put(b"d" + _U64.pack(len(v)))
            for k, item in v.items():
                self.path.append(k)
                if type(k) not in (type(None), bool, int, float, str, bytes, tuple):
                    raise self.fail(f"a dict key of type {type(k).__name__} is not supported")
                self.value(k, depth + 1)
                self.value(item, depth + 1)
                self.path.pop()
        elif isinstance(v, np.ndarray) and t is np.ndarray:
            self.put(b"a")
            self.dtype(v.dtype)
            if v.ndim > _MAX_NDIM:
                raise self.fail(f"arrays of more than {_MAX_NDIM} dimensions are not supported")
            self.put(_U8.pack(v.ndim) + b"".join(_U64.pack(int(d)) for d in v.shape))
            self.put(np.ascontiguousarray(v).tobytes())
        else:
            raise self.fail(f"{t.__name__} is not supported")


def encode_record(kind: bytes, value: Any, root: str = "state") -> bytes:
    """Encode ``value`` as a state record of ``kind`` (:data:`KIND_DICT` or :data:`KIND_GENERATOR`).

    Parameters
    ----------
    root
        How error messages name ``value`` (the protected name: ``state['history'][3]: ...``).

    Raises
    ------
    UnsupportedStateError
        If ``value`` holds a type the format cannot store (naming its path) or encodes to more than
        :data:`MAX_RECORD_BYTES` bytes.
    """
    enc = _Encoder(root)
    enc.put(MAGIC + _U8.pack(VERSION) + kind)
    enc.value(value, 1)
    return b"".join(enc.parts)


class _Decoder:
    """Reads one value at a time from ``buf``, checking every length against the bytes left."""

    def __init__(self, buf: bytes, where: str) -> None:
        self.buf = buf
        self.pos = 0
        self.where = where

    def fail(self, why: str) -> FormatError:
        return FormatError(f"{self.where}: damaged state record at byte {self.pos}: {why}")

    def take(self, n: int) -> bytes:
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{n} bytes announced, {len(self.buf) - self.pos} left (truncated or forged)")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def count(self, fmt: struct.Struct) -> int:
        (n,) = fmt.unpack(self.take(fmt.size))
        if n > len(self.buf) - self.pos:
            raise self.fail(f"a length of {n} with {len(self.buf) - self.pos} bytes left")
        return int(n)

    def dtype(self) -> np.dtype:
        text = self.take(self.count(_U8))
        try:
            return parse_dtype(text.decode("ascii"), f"{self.where}: state record: ")
        except UnicodeDecodeError:
            raise self.fail("a dtype that is not ASCII") from None

    def value(self, depth: int) -> Any:  # noqa: C901 - one branch per tag of the format
        if depth > MAX_DEPTH:
            raise self.fail(f"values nested more than {MAX_DEPTH} levels deep")
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag in (b"F", b"T"):
            return tag == b"T"
        if tag == b"i":
            n = self.count(_U32)
            if n == 0:
                raise self.fail("an integer of 0 bytes")
            return int.from_bytes(self.take(n), "little", signed=True)
        if tag == b"f":
            return _F64.unpack(self.take(8))[0]
        if tag == b"s":
            try:
                return self.take(self.count(_U64)).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self.fail(f"invalid UTF-8 ({exc.reason})") from None
        if tag == b"b":
            return self.take(self.count(_U64))
        if tag in (b"l", b"t"):
            items = [self.value(depth + 1) for _ in range(self.count(_U64))]
            return items if tag == b"l" else tuple(items)
        if tag == b"d":
            return self.mapping(depth)
        if tag in (b"a", b"n"):
            return self.numpy(tag, depth)
        raise self.fail(f"unknown tag {tag!r}")

    def mapping(self, depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for _ in range(self.count(_U64)):
            if self.pos < len(self.buf) and self.buf[self.pos] not in _KEY_TAGS:
                raise self.fail(f"a dict key of tag {self.buf[self.pos:self.pos + 1]!r}")
            key = self.value(depth + 1)
            try:
                hash(key)
            except TypeError:
                raise self.fail("an unhashable dict key") from None
            if key in out:
                raise self.fail(f"the dict key {key!r} twice")
            out[key] = self.value(depth + 1)
        return out

    def numpy(self, tag: bytes, depth: int) -> Any:
        dt = self.dtype()
        if tag == b"n":
            return np.frombuffer(self.take(dt.itemsize), dtype=dt)[0]
        (ndim,) = _U8.unpack(self.take(1))
        if ndim > _MAX_NDIM:
            raise self.fail(f"an array of {ndim} dimensions")
        shape = tuple(int(_U64.unpack(self.take(8))[0]) for _ in range(ndim))
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes > len(self.buf) - self.pos:
            raise self.fail(f"an array of shape {shape} ({nbytes} bytes) in {len(self.buf) - self.pos} bytes")
        return np.frombuffer(self.take(nbytes), dtype=dt).reshape(shape).copy()


def decode_record(data: bytes | bytearray | memoryview | np.ndarray,
                  where: str = "state") -> tuple[bytes, Any]:
    """Decode a state record; return its kind and value.

    Raises
    ------
    FormatError
        If ``data`` is not a well-formed record (see the module docstring): the copy is damaged.
    """
    buf = bytes(np.asarray(data, dtype=np.uint8).reshape(-1)) if isinstance(data, np.ndarray) else bytes(data)
    if len(buf) > MAX_RECORD_BYTES + 10:
        raise FormatError(f"{where}: state record of {len(buf)} bytes exceeds {MAX_RECORD_BYTES}")
    dec = _Decoder(buf, where)
    if dec.take(len(MAGIC)) != MAGIC:
        raise FormatError(f"{where}: not a state record (bad magic)")
    (version,) = _U8.unpack(dec.take(1))
    if version != VERSION:
        raise FormatError(f"{where}: state record version {version} is not supported (this ftkit reads "
                          f"{VERSION})")
    kind = dec.take(1)
    if kind not in (KIND_DICT, KIND_GENERATOR):
        raise dec.fail(f"unknown record kind {kind!r}")
    value = dec.value(1)
    if dec.pos != len(buf):
        raise dec.fail(f"{len(buf) - dec.pos} trailing bytes")
    return kind, value
