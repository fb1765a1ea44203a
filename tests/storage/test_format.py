"""The checkpoint file container: round trips, golden file, 64-bit layout, damage detection, memory."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.errors import CheckpointNotFoundError, CorruptionError, FormatError, ShapeMismatchError
from ftkit.inject import corrupt_file, truncate_file
from ftkit.storage.format import container as fmt

GOLDEN = Path(__file__).parent / "golden" / "golden_v1.ftk"


def _write(path, arrays, **kw):
    ident = {"rank": 0, "level": 1, "ckpt_id": 1, "exec_id": "t", "nranks": 1, "fsync": False}
    ident.update(kw)
    return fmt.write_file(path, arrays, **ident)


def test_golden_file_reads_bit_exactly():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN.with_name("make_golden.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    expected = mod.golden_arrays()
    h = fmt.verify_file(GOLDEN)
    assert (h.rank, h.level, h.ckpt_id, h.exec_id, h.nranks) == (3, 4, 17, "golden", 8)
    assert h.meta == {"note": "ftkit format v1 golden file"}
    assert h.digest == "0e0106d8b461a139"
    got = fmt.read_arrays(GOLDEN)
    assert list(got) == [n for n, _ in expected]
    for name, arr in expected:
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
        assert got[name].tobytes() == arr.tobytes(), name
    # Writing the same arrays today gives the same bytes: the format has not drifted.
    assert GOLDEN.read_bytes()[:8] == fmt.MAGIC


def test_golden_file_is_reproduced_byte_for_byte(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN.with_name("make_golden.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "g.ftk"
    fmt.write_file(out, mod.golden_arrays(), rank=3, level=4, ckpt_id=17, exec_id="golden", nranks=8,
                   meta={"note": "ftkit format v1 golden file"}, fsync=False)
    assert out.read_bytes() == GOLDEN.read_bytes()


_dtypes = st.sampled_from(["<f8", "<f4", ">f8", "<i8", "<i2", "|u1", "<u4", "|b1", "<c8", "<c16"])
_shapes = st.lists(st.integers(0, 7), min_size=0, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_dtypes, _shapes), min_size=1, max_size=4), st.integers(1, 64))
def test_round_trip_any_arrays_any_chunk(tmp_path_factory, specs, chunk):
    rng = np.random.default_rng(0)
    arrays = []
    for i, (dt, shape) in enumerate(specs):
        raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dt).itemsize, dtype=np.uint8)
        arrays.append((f"a{i}", raw.view(dt).reshape(shape)))
    path = tmp_path_factory.mktemp("rt") / "f.ftk"
    info = _write(path, arrays, chunk_bytes=chunk)
    assert info.size == path.stat().st_size
    got = fmt.read_arrays(path, chunk_bytes=chunk)
    for name, arr in arrays:
        assert got[name].tobytes() == arr.tobytes() and got[name].dtype == arr.dtype
        assert got[name].shape == arr.shape


def test_section_digests_are_xxh3_of_raw_bytes(tmp_path):
    a = np.arange(1000, dtype=np.float64)
    info = _write(tmp_path / "f.ftk", [("a", a)])
    assert info.header.section("a").xxh3 == xxhash.xxh3_64_hexdigest(a.tobytes())


def test_header_layout_handles_offsets_beyond_4_gib(tmp_path):
    # A 5 GiB section followed by a small one, as a sparse file: nothing near 5 GiB is written or allocated.
    big = 5 * 2**30 + 3
    fields = {"format": "ftkit-checkpoint", "rank": 0, "level": 4, "ckpt_id": 1, "exec_id": "big",
              "nranks": 1,
              "meta": {}}
    tail = np.array([1.5, -2.25])
    header_len = 0
    for _ in range(5):
        data_offset = fmt.PREAMBLE.size + header_len
        sections = [fmt.Section("big", "|u1", (big,), data_offset, big),
                    fmt.Section("tail", "<f8", (2,), data_offset + big, 16,
                                xxhash.xxh3_64_hexdigest(tail.tobytes()))]
        fields.update(data_offset=data_offset, file_size=data_offset + big + 16)
        raw = fmt.encode_header(fields, sections, header_len)
        if len(raw) == header_len:
            break
        header_len = len(raw)
    import struct

    path = tmp_path / "sparse.ftk"
    with open(path, "wb") as f:
        f.write(struct.pack("<8sHHIQQ", fmt.MAGIC, fmt.VERSION, 0, 0, len(raw),
                            xxhash.xxh3_64_intdigest(raw)))
        f.write(raw)
        f.seek(data_offset + big)
        f.write(tail.tobytes())
    h = fmt.read_header(path)
    assert h.section("tail").offset > 2**32 and h.file_size > 2**32
    out = np.zeros(2)
    fmt.read_into(path, {"tail": out}, h)
    assert out.tobytes() == tail.tobytes()


def test_write_uses_no_buffer_proportional_to_the_data(tmp_path):
    a = np.ones(8 * 2**20 // 8)    # 8 MiB
    tracemalloc.start()
    _write(tmp_path / "m.ftk", [("a", a)], chunk_bytes=2**20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2**20, f"write_file allocated {peak} bytes for an 8 MiB array"


def test_every_damaged_byte_is_detected(tmp_path):
    a = np.arange(300, dtype=np.int32)
    path = tmp_path / "f.ftk"
    _write(path, [("a", a), ("b", a * 2)])
    clean = path.read_bytes()
    for offset in [*range(0, 32), *range(32, len(clean), 37)]:
        path.write_bytes(clean)
        corrupt_file(path, offset, mask=0x10)
        with pytest.raises(FormatError):
            fmt.verify_file(path)


def test_read_into_detects_corruption_and_mismatch(tmp_path):
    a = np.arange(10.0)
    path = tmp_path / "f.ftk"
    _write(path, [("a", a)])
    target = np.full(10, 7.0)
    with pytest.raises(ShapeMismatchError):
        fmt.read_into(path, {"a": np.zeros(11)})
    with pytest.raises(ShapeMismatchError):
        fmt.read_into(path, {"a": np.zeros(10, dtype=np.float32)})
    corrupt_file(path, -1)
    with pytest.raises(CorruptionError, match="section 'a'"):
        fmt.read_into(path, {"a": target})


def test_truncated_missing_and_foreign_files(tmp_path):
    path = tmp_path / "f.ftk"
    _write(path, [("a", np.arange(100.0))])
    truncate_file(path, path.stat().st_size - 1)
    with pytest.raises(FormatError, match="truncated"):
        fmt.read_header(path)
    truncate_file(path, 10)
    with pytest.raises(FormatError, match="truncated"):
        fmt.read_header(path)
    with pytest.raises(CheckpointNotFoundError):
        fmt.read_header(tmp_path / "nope.ftk")
    other = tmp_path / "other.bin"
    other.write_bytes(b"\x80\x04K\x01." + b"\0" * 64)   # a pickle: never executed, just refused
    with pytest.raises(FormatError, match="not an ftkit checkpoint file"):
        fmt.read_header(other)


def test_unsafe_or_unknown_dtypes_are_refused(tmp_path):
    for bad in ("O", "|O", "<U4", "[('a','<f8')]", "<M8", "eval('1')"):
        with pytest.raises(FormatError):
            fmt.parse_dtype(bad)
    with pytest.raises(FormatError):
        _write(tmp_path / "o.ftk", [("o", np.array([object()]))])


def test_version_mismatch_names_both_versions(tmp_path):
    path = tmp_path / "f.ftk"
    _write(path, [("a", np.arange(3.0))])
    data = bytearray(path.read_bytes())
    data[8] = 9
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="version 9 is not supported"):
        fmt.read_header(path)


def test_failed_write_leaves_no_temporary_file(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    path = d / "f.ftk"
    with pytest.raises(FormatError, match="unsupported dtype"):
        _write(path, [("a", np.arange(3.0)), ("b", np.array([object()]))])
    assert list(d.iterdir()) == []


def test_copy_file_is_identical(tmp_path):
    src = tmp_path / "a.ftk"
    _write(src, [("a", np.arange(5000.0))])
    n = fmt.copy_file(src, tmp_path / "b.ftk", chunk_bytes=1000, fsync=False)
    assert n == src.stat().st_size and (tmp_path / "b.ftk").read_bytes() == src.read_bytes()
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
    assert os.path.getsize(tmp_path / "b.ftk") == n


def test_copy_onto_a_full_disk_is_atomic(tmp_path, small_disk):
    # The L4 flush copies with copy_file: a full disk must leave the previous file and no temporary.
    from ftkit.errors import StorageError

    disk = small_disk(128 << 10)
    src = tmp_path / "src.ftk"
    _write(src, [("u", np.arange(64 << 10, dtype=np.float64))])  # 512 KiB
    dst = disk / "l4" / "rank0.ftk"
    _write(tmp_path / "small.ftk", [("u", np.ones(8))])
    fmt.copy_file(tmp_path / "small.ftk", dst)
    before = dst.read_bytes()
    with pytest.raises(StorageError, match="No space left on device"):
        fmt.copy_file(src, dst)
    assert dst.read_bytes() == before
    assert [p.name for p in dst.parent.iterdir()] == ["rank0.ftk"]
