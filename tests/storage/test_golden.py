"""Golden files of the parity file, the manifest and the state table: every later ftkit reads them bit-exactly
and writes the same bytes (the checkpoint container's golden file is tested in test_format.py)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import xxhash

from ftkit.failure.state import load_state_table, save_state_table
from ftkit.storage.groupcode.offline import assess_group_files, rebuild_group_files
from ftkit.storage.groupcode.parity import payload_offset_for, verify_parity
from ftkit.storage.manifest import Manifest

GOLDEN = Path(__file__).parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
gen = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(gen)  # type: ignore[union-attr]


@pytest.mark.parametrize("code", ["rs", "xor"])
def test_parity_golden_reads_bit_exactly(code):
    data, parity = gen.group_paths(GOLDEN / f"parity_{code}")
    blobs = gen.group_data()
    assert [p.read_bytes() for p in data] == blobs
    seg = 301 if code == "rs" else 152  # xor: ceil(301 / 2) rounded up to 8 bytes
    for m, p in enumerate(parity):
        h = verify_parity(p)
        assert (h.code, h.k, h.index, h.tag) == (code, 3, m, gen.GROUP_TAG)
        assert h.sizes == (301, 177, 0)
        assert h.digests == tuple(xxhash.xxh3_64_hexdigest(b) for b in blobs)
        assert (h.payload_offset, h.payload_length) == (payload_offset_for(3), seg)
    assert assess_group_files(data, parity, code=code, tag=gen.GROUP_TAG).intact


@pytest.mark.parametrize("code", ["rs", "xor"])
def test_parity_golden_is_reproduced_byte_for_byte(tmp_path, code):
    gen.write_group(tmp_path, code)
    for name in sorted(p.name for p in (GOLDEN / f"parity_{code}").iterdir()):
        assert (tmp_path / name).read_bytes() == (GOLDEN / f"parity_{code}" / name).read_bytes(), name


@pytest.mark.parametrize("code, lost", [("rs", ["data0.bin", "data1.bin", "rank2.parity"]),
                                        ("xor", ["data1.bin", "rank1.parity"])])
def test_golden_group_rebuilds_lost_files_bit_exactly(tmp_path, code, lost):
    src = GOLDEN / f"parity_{code}"
    shutil.copytree(src, tmp_path / "g")
    for name in lost:
        (tmp_path / "g" / name).unlink()
    data, parity = gen.group_paths(tmp_path / "g")
    plan = assess_group_files(data, parity, code=code, tag=gen.GROUP_TAG)
    assert not plan.intact and plan.recoverable
    rebuild_group_files(plan, data, parity, tag=gen.GROUP_TAG)
    for name in lost:
        assert (tmp_path / "g" / name).read_bytes() == (src / name).read_bytes(), name


def test_manifest_golden_reads_and_writes_bit_exactly():
    text = (GOLDEN / "golden_manifest_v1.json").read_text()
    m = Manifest.loads(text, "golden manifest")
    assert m == gen.golden_manifest()
    assert m.entry(1).complete_levels == [1, 4] and m.entry(2).extra == {"l3_code": "rs"}
    assert m.dumps() == text


def test_state_table_golden_reads_and_writes_bit_exactly(tmp_path):
    golden = GOLDEN / "golden_state_v1.json"
    table = load_state_table(golden, install=False)
    assert table.dtype == np.int8 and table.tolist() == gen.golden_state_table().tolist()
    save_state_table(tmp_path / "s.json", table)
    assert (tmp_path / "s.json").read_bytes() == golden.read_bytes()


def test_compressed_dcp_golden_reads_bit_exactly(tmp_path):
    pytest.importorskip("numcodecs")
    from ftkit.checkpoint.dcp import read_dcp_map, restore_dcp
    from ftkit.storage.format.dcpstore import DcpSource

    expected = gen.dcp_golden_files(tmp_path / "plain.ftk")
    store = GOLDEN / "dcp_zstd_v2"
    for cid, content in enumerate(expected, 1):
        m = read_dcp_map(store, 0, cid)
        assert m.codecs is not None and m.block_size == gen.DCP_BLOCK and m.total_size == len(content)
        restore_dcp(store, 0, cid, tmp_path / f"c{cid}")
        assert (tmp_path / f"c{cid}").read_bytes() == content
        with DcpSource(store, 0, cid) as src:
            out = bytearray(len(content))
            src.read_into(0, memoryview(out))
            assert bytes(out) == content
    first, second = (read_dcp_map(store, 0, c) for c in (1, 2))
    shared = first.offsets == second.offsets
    assert 0 < int((~shared).sum()) <= 3 and shared.sum() > 10   # checkpoint 2 reuses checkpoint 1's blocks
