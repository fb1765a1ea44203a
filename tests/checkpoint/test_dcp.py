"""Differential L4 checkpoints: write size, exact reconstruction, crash safety, pruning."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.checkpoint.dcp import DcpWriter, list_dcp_ids, read_dcp_map, restore_dcp
from ftkit.errors import CheckpointNotFoundError, ConfigError, CorruptionError

BS = 4096


def _write(path, data: np.ndarray) -> None:
    path.write_bytes(data.tobytes())


def test_one_percent_change_writes_under_two_percent(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 400 * BS, dtype=np.uint8)
    src, l4 = tmp_path / "ckpt.bin", tmp_path / "l4"
    _write(src, data)
    w = DcpWriter(l4, rank=3, block_size=BS)
    first = w.write(src, 1)
    assert first.full and first.data_bytes == data.nbytes and first.blocks_changed == 400
    blocks = rng.choice(400, 4, replace=False)          # 1 % of the blocks
    for b in blocks:
        data[b * BS + 17] ^= 0xFF
    _write(src, data)
    second = w.write(src, 2)
    assert not second.full and second.blocks_changed == 4
    assert second.data_bytes == 4 * BS
    assert second.data_bytes <= 0.02 * data.nbytes
    assert second.map_bytes < 0.02 * data.nbytes         # metadata: 24 bytes per block + header
    out = tmp_path / "restored"
    restore_dcp(l4, 3, 2, out)
    assert out.read_bytes() == data.tobytes()


def test_unchanged_checkpoint_writes_no_data(tmp_path):
    data = np.arange(50 * BS, dtype=np.uint32).view(np.uint8)
    src = tmp_path / "c"
    _write(src, data)
    w = DcpWriter(tmp_path / "l4", 0, BS)
    w.write(src, 1)
    st_ = w.write(src, 2)
    assert st_.data_bytes == 0 and st_.blocks_changed == 0


def test_sequence_recovers_each_checkpoint_bit_identical(tmp_path):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 37 * BS + 123, dtype=np.uint8)   # partial last block
    src, l4 = tmp_path / "c", tmp_path / "l4"
    w = DcpWriter(l4, 0, BS, compact_factor=1.5)
    history = {}
    for cid in range(1, 12):
        idx = rng.choice(data.size, 5, replace=False)
        data[idx] = rng.integers(0, 256, 5, dtype=np.uint8)
        if cid == 6:                                    # content grows
            data = np.concatenate([data, rng.integers(0, 256, 3 * BS + 5, dtype=np.uint8)])
        if cid == 9:                                    # and shrinks
            data = data[: 20 * BS + 1].copy()
        _write(src, data)
        w.write(src, cid, keep_ids=tuple(history))     # keep every id to check all of them
        history[cid] = data.tobytes()
    gens = {read_dcp_map(l4, 0, c).gen for c in history}
    assert len(gens) > 1                                 # compaction started new generations
    for cid, expect in history.items():
        out = tmp_path / f"r{cid}"
        restore_dcp(l4, 0, cid, out)
        assert out.read_bytes() == expect, cid


def test_restart_continues_differentially_from_loaded_base(tmp_path):
    data = np.random.default_rng(2).integers(0, 256, 64 * BS, dtype=np.uint8)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    _write(src, data)
    DcpWriter(l4, 1, BS).write(src, 5)
    w2 = DcpWriter(l4, 1, BS)                           # a new process after a restart
    assert w2.load_base(5)
    data[0] ^= 1
    _write(src, data)
    st_ = w2.write(src, 6)
    assert st_.blocks_changed == 1 and not st_.full
    out = tmp_path / "o"
    restore_dcp(l4, 1, 6, out)
    assert out.read_bytes() == data.tobytes()
    assert not DcpWriter(l4, 1, BS).load_base(99)


def test_crash_mid_write_keeps_previous_state(tmp_path):
    """Blocks appended without a committed map (a crash before the map rename) never harm earlier maps."""
    data = np.random.default_rng(3).integers(0, 256, 30 * BS, dtype=np.uint8)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    _write(src, data)
    w = DcpWriter(l4, 0, BS)
    w.write(src, 1)
    good = data.tobytes()
    # Simulate the crash: garbage appended to the store (what a killed write leaves), no map for id 2.
    store = next(p for p in l4.iterdir() if p.suffix == ".blocks")
    with open(store, "ab") as f:
        f.write(os.urandom(3 * BS + 11))
    assert list_dcp_ids(l4, 0) == [1]
    out = tmp_path / "o"
    restore_dcp(l4, 0, 1, out)
    assert out.read_bytes() == good
    # A writer restarted from id 1 appends after the garbage and both ids reconstruct.
    w2 = DcpWriter(l4, 0, BS)
    assert w2.load_base(1)
    data[5 * BS] ^= 0x55
    _write(src, data)
    w2.write(src, 2)
    restore_dcp(l4, 0, 1, out)
    assert out.read_bytes() == good
    restore_dcp(l4, 0, 2, out)
    assert out.read_bytes() == data.tobytes()


def test_prune_keeps_base_and_requested(tmp_path):
    data = np.zeros(10 * BS, np.uint8)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    w = DcpWriter(l4, 0, BS)
    for cid in range(1, 6):
        data[cid] = cid
        _write(src, data)
        w.write(src, cid, keep_ids=(1,))
    assert list_dcp_ids(l4, 0) == [1, 4, 5]


def test_corrupt_block_is_detected(tmp_path):
    data = np.random.default_rng(4).integers(0, 256, 8 * BS, dtype=np.uint8)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    _write(src, data)
    DcpWriter(l4, 0, BS).write(src, 1)
    store = next(p for p in l4.iterdir() if p.suffix == ".blocks")
    raw = bytearray(store.read_bytes())
    raw[3 * BS + 9] ^= 0x10
    store.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError, match="block 3"):
        restore_dcp(l4, 0, 1, tmp_path / "o")
    assert not (tmp_path / "o").exists()                # nothing half-written under the final name
    mp = l4 / "dcp-r0-c1.map"
    raw = bytearray(mp.read_bytes())
    raw[20] ^= 1
    mp.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError):
        restore_dcp(l4, 0, 1, tmp_path / "o")
    with pytest.raises(CheckpointNotFoundError):
        restore_dcp(l4, 0, 2, tmp_path / "o")


def test_bad_block_size():
    with pytest.raises(ConfigError, match="dcp_block_size"):
        DcpWriter("/tmp", 0, 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=5),
       st.sampled_from([1, 7, 512]))
def test_any_sequence_reconstructs(tmp_path_factory, contents, bs):
    d = tmp_path_factory.mktemp("dcp")
    w = DcpWriter(d / "l4", 0, bs)
    for cid, c in enumerate(contents):
        (d / "c").write_bytes(c)
        w.write(d / "c", cid)
        restore_dcp(d / "l4", 0, cid, d / "o")
        assert (d / "o").read_bytes() == c


def _resign_map(path, edit) -> None:
    """Rewrite a map's JSON header with ``edit(dict)`` and recompute its checksum (a forged, valid map)."""
    import json
    import struct

    import xxhash

    from ftkit.checkpoint.dcp import MAGIC

    raw = path.read_bytes()
    body = raw[:-8]
    (hlen,) = struct.unpack("<I", body[len(MAGIC):len(MAGIC) + 4])
    start = len(MAGIC) + 4
    hdr = json.loads(body[start:start + hlen])
    new = edit(hdr)
    text = new if isinstance(new, bytes) else json.dumps(hdr).encode()
    body = MAGIC + struct.pack("<I", len(text)) + text + body[start + hlen:]
    path.write_bytes(body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body)))


@pytest.mark.parametrize("edit", [
    lambda h: h.update(block_size=10**15),          # would allocate a petabyte
    lambda h: h.update(nblocks=-1),                 # numpy would read "everything"
    lambda h: h.update(total_size=-5),
    lambda h: h.update(gen="../../x"),
    lambda h: h.update(block_size=None),
    lambda h: h.update(nblocks=10**400),
    lambda h: b"[" * 100000 + b"]" * 100000,        # nested past the recursion limit
    lambda h: b'"just a string"',
    lambda h: b"\xff\xfe not utf-8",
])
def test_forged_map_headers_are_format_errors(tmp_path, edit):
    """Any parse failure of a map (checksum re-signed, so only the parser can catch it) is a FormatError."""
    from ftkit.errors import FormatError

    data = np.arange(10 * BS, dtype=np.uint8)
    src, l4 = tmp_path / "c", tmp_path / "l4"
    _write(src, data)
    DcpWriter(l4, 0, BS).write(src, 1)
    from ftkit.checkpoint.dcp import dcp_map_path

    _resign_map(dcp_map_path(l4, 0, 1), edit)
    with pytest.raises(FormatError):
        read_dcp_map(l4, 0, 1)
    with pytest.raises(FormatError):
        restore_dcp(l4, 0, 1, tmp_path / "out")
    assert not (tmp_path / "out").exists()
