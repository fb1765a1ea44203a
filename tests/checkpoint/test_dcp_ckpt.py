"""Differential L4 checkpoints through the Checkpointer (plain and compressed block stores): write size and
bit-identical recovery."""

from __future__ import annotations

import re

import pytest

from ftkit.inject import delete_node_dir
from ftkit.storage.format.dcpstore import read_dcp_map

from .test_async_ckpt import recovered, run_app, write_config

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize(("executor", "codec"), [("thread", "none"), ("head", "none"), ("thread", "zstd"),
                                                  ("head", "lz4")])
def test_dcp_writes_changed_blocks_and_recovers_exactly(tmp_path, executor, codec):
    write_config(tmp_path, executor, enable_dcp=1, dcp_block_size=4096)
    with open(tmp_path / "ftkit.ini", "a") as ini:  # the [ftkit] section ends the file
        ini.write(f"compression = {codec}\n")
    args = ("--dcp", "--steps", "8", "--dcp-bytes", str(1 << 21), "--dcp-block", "4096",
            *(a for s in (2, 3, 4, 5, 6, 8) for a in ("--ckpt", f"{s}:4")))
    r = run_app(tmp_path, executor, *args, "--crash-at", "7")
    stats = [tuple(map(int, m.groups())) for m in
             re.finditer(r"^R(\d+) dcp id=(\d+) data=(\d+) map=(\d+) full=(\d+)$", r.stdout, re.M)]
    assert len(stats) == 4 * 5, r.stdout + r.stderr
    for rank, cid, data, meta, full in stats:
        if cid == 1:
            assert data >= full                          # the first L4 checkpoint is a full write
        else:
            # 1% of the blocks changed (plus the file header's block): at most 2% of the full size ...
            assert data <= 0.02 * full, (rank, cid, data, full)
            assert meta <= 0.01 * full                   # ... plus the block map (24 bytes per block)
    maps = sorted((tmp_path / "run" / "global").glob("*/l4dcp/dcp-r*-c*.map"))
    assert maps, "no differential L4 maps were written"
    for path in maps:  # block stores compressed block by block (map version 2) exactly when a codec is set
        rank, cid = map(int, re.match(r"dcp-r(\d+)-c(\d+)\.map", path.name).groups())
        assert (read_dcp_map(path.parent, rank, cid).codecs is not None) == (codec != "none"), path
    for d in (tmp_path / "run" / "local").glob("node*"):
        delete_node_dir(d)
    r = run_app(tmp_path, executor, *args).check()
    assert recovered(r.stdout) == (5, 4, 6)             # rebuilt from five layers of differential writes
    after = [tuple(map(int, m.groups())) for m in
             re.finditer(r"^R(\d+) dcp id=(\d+) data=(\d+) map=(\d+) full=(\d+)$", r.stdout, re.M)]
    assert sorted(a[:2] for a in after) == [(k, 6) for k in range(4)], r.stdout
    if executor == "thread":
        # The restarted ranks continue differentially from the map they recovered from: two steps of 1%
        # changes (steps 7 and 8) since that map, not a full write.
        assert all(data <= 0.03 * full for _, _, data, _, full in after), after
    matches = re.findall(r"^R\d+ final match=(\w+)$", r.stdout, re.M)
    assert matches == ["True"] * 4, r.stdout
