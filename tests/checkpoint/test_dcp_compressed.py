"""Differential L4 checkpoints with compression (``[ftkit] compression`` and ``enable_dcp``): each changed
block is compressed on its own into the block store (map version 2); reconstruction, range reads in place,
codec changes between writes, and damage are checked against the bytes written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.checkpoint.dcp import DcpWriter, read_dcp_map, restore_dcp
from ftkit.errors import ConfigError, CorruptionError
from ftkit.storage.format.dcpstore import DcpSource, store_path

pytest.importorskip("numcodecs")

BS = 4096


def _field(n_blocks: int, seed: int = 0) -> np.ndarray:
    """A smooth float64 field of whole numbers (compresses well), then random bytes (do not), as bytes."""
    x = np.linspace(0.0, 1.0, n_blocks * BS // 8)
    smooth = np.round(100 * np.sin(6 * x))  # whole numbers: zero low mantissa bytes
    noise = np.random.default_rng(seed).integers(0, 256, BS + 5, dtype=np.uint8)  # a ragged last block
    return np.concatenate([smooth.view(np.uint8), noise])


def _restored(tmp_path, l4, rank, cid) -> bytes:
    out = tmp_path / f"restored-{rank}-{cid}"
    restore_dcp(l4, rank, cid, out)
    return out.read_bytes()


@pytest.mark.parametrize("codec", ["lz4", "zstd", "blosc"])
def test_compressed_blocks_reconstruct_and_take_less_room(tmp_path, codec):
    data = _field(64)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    src.write_bytes(data.tobytes())
    w = DcpWriter(l4, 0, BS, codec=codec)
    first = w.write(src, 1)
    assert first.full and first.blocks_changed == 66
    assert first.data_bytes < 0.6 * data.nbytes            # the smooth blocks shrink ...
    m = read_dcp_map(l4, 0, 1)
    assert m.codecs is not None and m.codecs[-2] == 0       # ... the random block is stored as it is
    assert int(m.stored[-2]) == BS and (m.codecs[:-2] != 0).all()
    data[10 * BS + 3] ^= 0x40                                # one changed block
    src.write_bytes(data.tobytes())
    second = w.write(src, 2)
    assert not second.full and second.blocks_changed == 1 and 0 < second.data_bytes < BS
    assert _restored(tmp_path, l4, 0, 2) == data.tobytes()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 65 * BS + 4), st.integers(1, 65 * BS + 5))
def test_any_range_reads_back_in_place(tmp_path_factory, start, n):
    d = tmp_path_factory.mktemp("z")
    data = _field(64, seed=1)
    (d / "c").write_bytes(data.tobytes())
    DcpWriter(d / "l4", 3, BS, codec="zstd").write(d / "c", 1)
    n = min(n, data.size - start)
    out = bytearray(n)
    with DcpSource(d / "l4", 3, 1) as source:
        source.read_into(start, memoryview(out))
    assert out == data[start:start + n].tobytes()


def test_codec_changes_between_writes(tmp_path):
    """An uncompressed base is continued compressed (its blocks referenced as they are); a compressed base
    followed by an uncompressed writer starts a new, plain generation."""
    data = _field(32, seed=2)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    src.write_bytes(data.tobytes())
    DcpWriter(l4, 0, BS).write(src, 1)
    w = DcpWriter(l4, 0, BS, codec="zstd")
    assert w.load_base(1)
    data[5] ^= 1
    src.write_bytes(data.tobytes())
    st_ = w.write(src, 2, keep_ids=(1,))
    assert not st_.full and st_.blocks_changed == 1
    m = read_dcp_map(l4, 0, 2)
    assert m.codecs is not None and int((m.codecs != 0).sum()) == 1
    plain = DcpWriter(l4, 0, BS)
    assert not plain.load_base(2)                           # shuffled blocks cannot be referenced raw
    data[7 * BS] ^= 2
    src.write_bytes(data.tobytes())
    assert plain.write(src, 3, keep_ids=(1, 2)).full
    assert read_dcp_map(l4, 0, 3).codecs is None            # a version-1 map, as before compression
    for cid, expect in ((1, None), (2, None), (3, data.tobytes())):
        got = _restored(tmp_path, l4, 0, cid)
        if expect is not None:
            assert got == expect


def test_damaged_compressed_block_is_a_corruption_error(tmp_path):
    data = _field(16, seed=3)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    src.write_bytes(data.tobytes())
    DcpWriter(l4, 0, BS, codec="lz4").write(src, 1)
    m = read_dcp_map(l4, 0, 1)
    store = store_path(l4, 0, m.gen)
    raw = bytearray(store.read_bytes())
    at, n = int(m.offsets[4]), int(m.stored[4])
    raw[at + 4:at + n] = np.random.default_rng(9).integers(0, 256, n - 4, dtype=np.uint8).tobytes()
    store.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError, match="block 4"):
        restore_dcp(l4, 0, 1, tmp_path / "o")
    assert not (tmp_path / "o").exists()
    with DcpSource(l4, 0, 1) as source:                      # in place: decoded bytes differ or fail
        out = bytearray(BS)
        try:
            source.read_into(4 * BS, memoryview(out))
        except CorruptionError:
            pass
        else:
            assert out != data[4 * BS:5 * BS].tobytes()


def test_bad_codec_or_shuffle_size_is_refused():
    with pytest.raises(ConfigError, match="compression"):
        DcpWriter("/tmp", 0, BS, codec="gzip")
    with pytest.raises(ConfigError, match="divide"):
        DcpWriter("/tmp", 0, 1000, codec="zstd", typesize=16)
    assert DcpWriter("/tmp", 0, 1002, codec="zstd").typesize == 2   # the largest of 8, 4, 2, 1 dividing it


def test_forged_map_with_an_oversized_block_is_refused_before_any_read(tmp_path):
    """A map (checksum recomputed) that gives a block more stored bytes than the block holds is a damaged
    map: nothing is allocated or read after what it says."""
    import struct

    import xxhash

    from ftkit.checkpoint.dcp import MAGIC
    from ftkit.errors import FormatError
    from ftkit.storage.format.dcpstore import dcp_map_path

    data = _field(8, seed=4)
    (tmp_path / "c").write_bytes(data.tobytes())
    DcpWriter(tmp_path / "l4", 0, BS, codec="zstd").write(tmp_path / "c", 1)
    path = dcp_map_path(tmp_path / "l4", 0, 1)
    body = bytearray(path.read_bytes()[:-8])
    (hlen,) = struct.unpack("<I", body[len(MAGIC):len(MAGIC) + 4])
    n = read_dcp_map(tmp_path / "l4", 0, 1).nblocks
    at = len(MAGIC) + 4 + hlen + 24 * n + 4 * 2          # block 2's stored length
    body[at:at + 4] = struct.pack("<I", 2**32 - 1)
    path.write_bytes(bytes(body) + struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(body))))
    with pytest.raises(FormatError, match="more stored bytes"):
        read_dcp_map(tmp_path / "l4", 0, 1)
    with pytest.raises(FormatError):
        restore_dcp(tmp_path / "l4", 0, 1, tmp_path / "o")
    assert not (tmp_path / "o").exists()
