"""A checkpoint file committed later (inline L2/L3): same bytes as write_file, served from memory meanwhile,
never under its final name before it is durable, nothing left behind when dropped."""

from __future__ import annotations

import numpy as np
import pytest

from ftkit.errors import StorageError
from ftkit.storage._fsutil import is_temp_name, remove_file
from ftkit.storage.format import container as fmt
from ftkit.storage.format.global_layout import Layout
from ftkit.storage.pending import start_write

IDENT = {"rank": 2, "level": 2, "ckpt_id": 5, "exec_id": "t", "nranks": 4}


def _arrays() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [("a", rng.standard_normal((301, 7))), ("empty", np.zeros(0, np.int32)),
            ("b", rng.integers(0, 2**31, 100_003, dtype=np.int64)), ("c", np.arange(5, dtype=np.uint8))]


def test_same_bytes_as_write_file_and_final_name_only_after_finish(tmp_path):
    arrays = _arrays()
    layouts = {"b": Layout.of_box((200_006,), (0,), (100_003,))}   # a section with per-chunk digests too
    ref = tmp_path / "ref.ftk"
    info_ref = fmt.write_file(ref, arrays, layouts=layouts, **IDENT)
    final = tmp_path / "rank2.ftk"
    pending = start_write(final, arrays, layouts=layouts, chunk_bytes=4096, **IDENT)
    assert not final.exists()                          # not visible before it is durable
    assert any(is_temp_name(p.name, final.name) for p in tmp_path.iterdir())
    src = pending.source()
    expected = ref.read_bytes()
    assert src.size == len(expected) == pending.info.size == info_ref.size
    assert pending.info.digest == info_ref.digest      # the digests computed once, while writing
    got = bytearray(src.size)
    src.read_into(0, memoryview(got))
    assert bytes(got) == expected                      # what L2 sends / L3 encodes is the file, byte for byte
    for off, n in [(0, 1), (10, 5000), (src.size - 3, 3), (1000, src.size - 1000)]:
        piece = bytearray(n)
        src.read_into(off, memoryview(piece))
        assert bytes(piece) == expected[off:off + n]
        view = src.map(off, n)
        assert view is None or bytes(view) == expected[off:off + n]
    assert src.map(len(expected) - 100, 90) is not None   # inside array "b": no copy
    with pytest.raises(StorageError, match="asked"):
        src.read_into(src.size - 2, memoryview(bytearray(4)))
    pending.finish()
    pending.finish()                                   # idempotent
    assert pending.finished
    assert final.read_bytes() == expected
    assert not [p for p in tmp_path.iterdir() if is_temp_name(p.name)]
    fmt.verify_file(final, expect_digest=info_ref.digest)


def test_abort_and_failed_checkpoint_leave_nothing(tmp_path):
    final = tmp_path / "rank2.ftk"
    pending = start_write(final, _arrays(), **IDENT)
    pending.abort()
    assert list(tmp_path.iterdir()) == []
    # A checkpoint that failed before the commit: the pipeline removes the final name (and its temporaries).
    pending = start_write(final, _arrays(), **IDENT)
    remove_file(final)
    assert list(tmp_path.iterdir()) == []
    pending.abort()
    assert not final.exists()
