"""Compressed L4 copies (issue 35) on the elastic paths: a checkpoint of 4 ranks whose node-local directories
are lost is recovered by 2 ranks from its compressed L4 copies (range reads of the old ranks' boxes), and
exported element for element."""

from __future__ import annotations

import numpy as np
import pytest

from ftkit.inject import delete_node_dir
from ftkit.storage.export import export_checkpoint

from ._util import node_dirs, write_config
from .test_reshard import _recovered, _run

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("codec", ["blosc"])
def test_elastic_recovery_and_export_read_compressed_l4(tmp_path, codec):
    d = tmp_path / "a"
    write_config(d, compression=codec)
    r = _run(d, 4, "--mode", "write", "--grid", "2x2", "--levels", "4")
    assert r.returncode == 0 and r.stdout.count("wrote") == 4, r.stdout + r.stderr
    files = sorted((d / "run" / "global").glob("*/l4/ckpt1/rank*.ftk"))
    assert len(files) == 4 and all(f.read_bytes()[:8] == b"FTKITCZ1" for f in files)
    for node in node_dirs(d):
        delete_node_dir(node)
    out = tmp_path / "npy"
    assert export_checkpoint(d / "run" / "meta", "npy", out)["checkpoint_id"] == 1
    i, j = np.meshgrid(np.arange(48), np.arange(40), indexing="ij")
    assert np.array_equal(np.load(out / "u.npy"), i * 1000.0 + j + 0.5)
    assert np.array_equal(np.load(out / "z.npy"), (i * 1000.0 + j + 0.5) * (1 - 2j))
    r = _run(d, 2, "--mode", "recover", "--grid", "1x2")
    _recovered(r, 2, "4444", 1)
