"""The state record (typed encoding of small application state, no pickle): round trips of every supported
type and generator family, unsupported values refused with their path, hostile records (truncated, forged
lengths, deep nesting, wrong tags, random damage) refused as FormatError and nothing else; the golden file.
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.errors import FormatError, UnsupportedStateError
from ftkit.storage.format.container import read_arrays, verify_file
from ftkit.storage.format.staterecord import (
    KIND_DICT,
    KIND_GENERATOR,
    MAGIC,
    MAX_DEPTH,
    MAX_RECORD_BYTES,
    decode_record,
    encode_record,
)

GOLDEN = Path(__file__).parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
gen = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(gen)  # type: ignore[union-attr]

FAMILIES = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")
HEAD = MAGIC + b"\x01" + KIND_DICT
U64 = struct.Struct("<Q")


def same(a, b) -> bool:
    """Equal values of equal types (arrays: dtype, shape and bytes; floats: bit for bit)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray | np.generic):
        return a.dtype == b.dtype and np.shape(a) == np.shape(b) and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


VALUES = {
    "ints": [0, 1, -1, 127, 128, -128, -129, 255, 2**63 - 1, -(2**63), 2**64, 2**4000 + 3, -(2**4000)],
    "floats": [0.0, -0.0, 1e-320, float("inf"), -float("inf"),
               struct.unpack("<d", b"\x01" + b"\0" * 5 + b"\xf8\x7f")[0]],  # a NaN with a payload
    "text": ["", "é", "東京 ✓ \U0001f600", "a\x00b"],
    "bytes": [b"", b"\x00\xff" * 100, bytes(range(256))],
    "nested": [[], (), {}, [[[]]], ((1,),), {"a": {"b": {"c": [None, True, False]}}}],
    "keys": {0: 1, -5: 2, 2.5: 3, "s": 4, b"b": 5, (1, ("x", None)): 6, None: 7, True: 8},
    "arrays": [np.arange(12, dtype=dt).reshape(3, 4) for dt in ("<f8", ">f4", "<i2", ">u8", "<c16", "|u1")]
              + [np.array(5.5), np.zeros((0, 3)), np.array([True, False]), np.arange(10)[::2]],
    "scalars": [np.float16(1.5), np.int8(-3), np.uint64(2**64 - 1), np.complex64(1 + 2j), np.bool_(True)],
}


def test_every_supported_type_round_trips_exactly():
    kind, got = decode_record(encode_record(KIND_DICT, VALUES))
    assert kind == KIND_DICT
    want = dict(VALUES)
    want["arrays"] = [a.copy() for a in VALUES["arrays"]]  # C order
    assert same(got, want)
    assert list(got["keys"]) == list(VALUES["keys"])  # insertion order kept


@pytest.mark.parametrize("family", FAMILIES)
def test_generator_states_round_trip_bit_for_bit(family):
    rng = np.random.Generator(getattr(np.random, family)(7))
    rng.random(13)
    rng.integers(0, 10, size=1, dtype=np.uint32)  # PCG64 keeps a half-used 64-bit word: has_uint32
    kind, state = decode_record(encode_record(KIND_GENERATOR, rng.bit_generator.state))
    assert kind == KIND_GENERATOR
    other = np.random.Generator(getattr(np.random, family)(99))
    other.bit_generator.state = state
    assert np.array_equal(other.random(1000), rng.random(1000))
    assert np.array_equal(other.integers(0, 2**62, 100), rng.integers(0, 2**62, 100))


class Custom:
    pass


class IntSub(int):
    pass


@pytest.mark.parametrize("value, path, what", [
    ({"history": [1, 2, 3, {1}]}, "state['history'][3]", "set is not supported"),
    ({"a": {"b": (1, Custom())}}, "state['a']['b'][1]", "Custom is not supported"),
    ({"x": np.array([object()])}, "state['x']", "numpy dtype object is not supported"),
    ({"x": np.str_("s")}, "state['x']", "numpy.str_ is not supported"),
    ({"x": np.datetime64("2026-01-01")}, "state['x']", "numpy.datetime64 is not supported"),
    ({frozenset(): 1}, "state[frozenset()]", "a dict key of type frozenset is not supported"),
    ({"s": "\ud800"}, "state['s']", "str with unpaired surrogates"),
    ({"i": IntSub(3)}, "state['i']", "IntSub is not supported"),
])
def test_unsupported_values_name_their_path(value, path, what):
    with pytest.raises(UnsupportedStateError) as err:
        encode_record(KIND_DICT, value)
    assert str(err.value).startswith(f"{path}: {what}")
    assert isinstance(err.value, TypeError)


def test_containers_holding_themselves_and_oversized_state_are_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(UnsupportedStateError, match=r"nested more than 64 levels deep"):
        encode_record(KIND_DICT, {"l": loop})
    with pytest.raises(UnsupportedStateError, match=rf"exceeds {MAX_RECORD_BYTES} bytes"):
        encode_record(KIND_DICT, {"b": b"\x00" * (MAX_RECORD_BYTES + 1)})


def _damaged(blob: bytes, match: str | None = None) -> None:
    with pytest.raises(FormatError, match=match):
        decode_record(blob)


def test_every_truncation_is_a_damaged_record():
    blob = encode_record(KIND_DICT, {"a": [1, 2.5, "x", b"y", (None,)], "n": np.arange(3), "s": np.int8(1)})
    for n in range(len(blob)):
        _damaged(blob[:n])
    _damaged(blob + b"\x00", "trailing bytes")


@pytest.mark.parametrize("blob, match", [
    (b"NOTSTATE\x01d", "bad magic"),
    (MAGIC + b"\x02dN", "version 2"),
    (MAGIC + b"\x01zN", "unknown record kind"),
    (HEAD + b"?", "unknown tag"),
    (HEAD + b"l" + U64.pack(2**64 - 1), "a length of 18446744073709551615"),
    (HEAD + b"s" + U64.pack(2**62) + b"abc", "a length of"),
    (HEAD + b"b" + U64.pack(5) + b"abc", "a length of 5"),
    (HEAD + b"i" + struct.pack("<I", 0), "an integer of 0 bytes"),
    (HEAD + b"i" + struct.pack("<I", 2**32 - 1) + b"\x01", "a length of"),
    (HEAD + b"s" + U64.pack(2) + b"\xff\xfe", "invalid UTF-8"),
    (HEAD + b"d" + U64.pack(1) + b"l" + U64.pack(0) + b"N", "a dict key of tag b'l'"),
    (HEAD + b"d" + U64.pack(1) + b"t" + U64.pack(1) + b"l" + U64.pack(0) + b"N", "unhashable dict key"),
    (HEAD + b"d" + U64.pack(2) + b"NTNF", "the dict key None twice"),
    (HEAD + b"a\x03<f3\x00" + b"\x00" * 8, "unsupported dtype '<f3'"),
    (HEAD + b"a\x02|O\x00", "unsupported dtype"),
    (HEAD + b"a\x03<f8\xc8", "an array of 200 dimensions"),
    (HEAD + b"a\x03<f8\x02" + U64.pack(2**40) + U64.pack(2**40), "an array of shape"),
    (HEAD + b"n\x03<f8\x00", "announced"),
    (HEAD + b"a\x03\xff\xfe\xfd\x00", "not ASCII"),
])
def test_forged_records_are_damaged(blob, match):
    _damaged(blob, match)


@pytest.mark.parametrize("tag", [b"l", b"t", b"d"])
def test_deep_nesting_is_refused_without_recursion(tag):
    depth = 10**5  # far past the interpreter's recursion limit: refused at MAX_DEPTH, not by a RecursionError
    inner = b"N" if tag != b"d" else b""
    blob = HEAD + (tag + U64.pack(1) + (b"N" if tag == b"d" else b"")) * depth + inner
    _damaged(blob, f"nested more than {MAX_DEPTH} levels deep")
    ok = HEAD + (b"l" + U64.pack(1)) * (MAX_DEPTH - 1) + b"N"
    assert decode_record(ok)[1] is not None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 255), st.integers(1, 8))
def test_random_damage_is_a_format_error_or_a_value(where, byte, width):
    blob = bytearray(encode_record(KIND_GENERATOR, np.random.MT19937(3).state))
    pos = where % len(blob)
    blob[pos:pos + width] = bytes([byte]) * min(width, len(blob) - pos)
    try:
        decode_record(bytes(blob))
    except FormatError:
        pass


def test_golden_app_state_file_reads_bit_exactly(tmp_path):
    path = GOLDEN / "golden_appstate_v1.ftk"
    header = verify_file(path)
    assert [(s.name, s.dtype) for s in header.sections] == [("p", "<f8"), ("rng", "|u1"), ("state", "|u1")]
    arrays = read_arrays(path)
    state, rng_state = gen.golden_app_state()
    assert same(arrays["p"], np.arange(7, dtype="<f8") * 0.5)
    assert decode_record(arrays["rng"]) == (KIND_GENERATOR, rng_state)
    kind, got = decode_record(arrays["state"])
    assert kind == KIND_DICT and same(got, state)
    gen.write_app_state(tmp_path / "again.ftk")
    assert (tmp_path / "again.ftk").read_bytes() == path.read_bytes()
