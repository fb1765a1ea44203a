"""Reading a differential L4 checkpoint in place (``DcpSource``): any byte range equals the checkpoint.

Checkpoint 2 of a rank is a differential write over checkpoint 1 (some blocks changed, the file one partial
block longer), so its blocks lie in several extents of the block store; reads are compared with the file
written, over random ranges (property test). A truncated store or a read past the end is a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.checkpoint.dcp import DcpWriter
from ftkit.errors import CheckpointNotFoundError, CorruptionError, StorageError
from ftkit.storage.format.dcpstore import DcpSource, store_path

BS = 512
RNG = np.random.default_rng(7)
V1 = RNG.integers(0, 256, 40 * BS + 100, dtype=np.uint8)
V2 = np.concatenate([V1, RNG.integers(0, 256, 300, dtype=np.uint8)])
V2[[5, 3 * BS + 1, 17 * BS, 40 * BS + 50]] ^= 0xFF


def _store(root):
    l4, src = root / "l4dcp", root / "file"
    w = DcpWriter(l4, rank=2, block_size=BS)
    src.write_bytes(V1.tobytes())
    assert w.write(src, 1).full
    src.write_bytes(V2.tobytes())
    stats = w.write(src, 2)
    assert not stats.full and 0 < stats.blocks_changed < 10
    return l4


@settings(max_examples=40, deadline=None)
@given(st.integers(0, V2.size - 1), st.integers(1, V2.size))
def test_any_range_reads_back(tmp_path_factory, start, n):
    l4 = _store(tmp_path_factory.mktemp("d"))
    n = min(n, V2.size - start)
    with DcpSource(l4, 2, 2) as src, DcpSource(l4, 2, 1) as old:
        assert (src.size, old.size) == (V2.size, V1.size)
        out = bytearray(n)
        src.read_into(start, memoryview(out))
        assert out == V2[start:start + n].tobytes()
        if start + n <= V1.size:
            old.read_into(start, memoryview(out))
            assert out == V1[start:start + n].tobytes()


def test_truncated_store_and_reads_past_the_end(tmp_path):
    l4 = _store(tmp_path)
    with DcpSource(l4, 2, 2) as src, pytest.raises(StorageError, match="bytes asked"):
        src.read_into(V2.size - 10, memoryview(bytearray(11)))
    with pytest.raises(CheckpointNotFoundError, match="never flushed"):
        DcpSource(l4, 2, 3)
    store = store_path(l4, 2, 0)
    with open(store, "r+b") as f:
        f.truncate(store.stat().st_size - 1)
    with pytest.raises(CorruptionError, match="truncated"):
        DcpSource(l4, 2, 2)
