"""`ftkit ls` and `ftkit verify` on a run's directories (built without MPI through the storage API)."""

from __future__ import annotations

import numpy as np

from ftkit.cli import main
from ftkit.inject import corrupt_file
from ftkit.storage.levels import make_level
from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile, write_manifest

NODES = [0, 0, 1, 1]


def _make_run(root):
    local, glbl, meta = root / "local", root / "global", root / "meta"
    meta.mkdir(parents=True)
    m = Manifest(exec_id="run9", nranks=4, created=1.0,
                 dirs={"ckpt_dir": str(local), "glbl_dir": str(glbl), "meta_dir": str(meta)})
    for cid, level in ((1, 4), (2, 1)):
        lv = make_level(level, local, glbl, "run9", NODES)
        files = []
        for r in range(4):
            info = lv.write(cid, r, [("u", np.full(1000, float(r + cid)))], level=level, nranks=4)
            files.append(RankFile(info.size, info.digest))
        m.checkpoints.append(CheckpointEntry(id=cid, seq=cid, level=level, time=1.0, levels={level: True},
                                             nodes=NODES, files=files))
    write_manifest(meta, m)
    return root


def test_ls_lists_checkpoints(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    assert main(["ls", str(root / "meta")]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [(x[0], x[1], x[2], x[3]) for x in lines] == [("1", "4", "L4", "4"), ("2", "1", "L1", "4")]
    assert all("yes" in line for line in out.splitlines()[2:4])
    # the parent directory works too, and a missing file shows as incomplete
    next(root.glob("local/node1/run9/l1/ckpt2/rank3.ftk")).unlink()
    assert main(["ls", str(root)]) == 0
    out = capsys.readouterr().out
    assert "no (1 file problem(s)" in out and "rank 3" in out


def test_verify_reports_damage_with_exit_code(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    assert main(["verify", str(root)]) == 0
    assert "verified 8 file(s): 0 damaged" in capsys.readouterr().out
    corrupt_file(next(root.glob("global/run9/l4/ckpt1/rank2.ftk")), -3)
    assert main(["verify", str(root / "meta")]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "rank2.ftk" in out and "checksum mismatch" in out and "1 damaged" in out


def test_moved_run_and_no_manifest(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    moved = tmp_path / "moved"
    root.rename(moved)
    assert main(["verify", str(moved)]) == 0
    (moved / "meta" / "manifest.json").unlink()
    assert main(["ls", str(moved)]) == 0
    out = capsys.readouterr().out
    assert "no manifest" in out and "run9" in out
    corrupt_file(next(moved.glob("local/node0/run9/l1/ckpt2/rank0.ftk")), -1)
    assert main(["verify", str(moved)]) == 1
