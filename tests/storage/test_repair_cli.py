"""``ftkit ls`` / ``ftkit verify`` understand L2/L3; ``ftkit rebuild`` repairs a lost node offline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftkit.inject import corrupt_file, delete_node_dir

from ..conftest import run_python

PROGRAM = Path(__file__).parents[1] / "programs" / "levels_scenario.py"


def ftkit_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ftkit", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run of 8 ranks on 4 emulated nodes with an L2 checkpoint (id 1) and an L3 one (id 2)."""
    root = tmp_path_factory.mktemp("repair")
    res = run_python(8, PROGRAM, str(root), "ckpt", "--plan", "2@3,3@6", node_size=2, timeout=240,
                     env={"OMPI_MCA_mpi_ft_detector_timeout": "90", "OMPI_MCA_mpi_ft_detector_period": "5"})
    assert "CHECKPOINTED" in res.stdout, res.stdout + res.stderr
    return root


def copy_run(src: Path, dst: Path) -> Path:
    """Copy a run directory and point its manifest's recorded directories at the copy."""
    shutil.copytree(src, dst)
    manifest = dst / "meta" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["dirs"] = {k: str(dst / sub) for k, sub in (("ckpt_dir", "local"), ("glbl_dir", "global"),
                                                     ("meta_dir", "meta"))}
    manifest.write_text(json.dumps(doc))
    return dst


def test_ls_and_verify_see_l2_and_l3(run_dir):
    ls = ftkit_cmd("ls", str(run_dir / "meta"))
    assert ls.returncode == 0, ls.stderr
    assert "L1,L2" in ls.stdout and "L1,L3" in ls.stdout
    ok = ftkit_cmd("verify", str(run_dir / "meta"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verified 32 file(s): 0 damaged" in ok.stdout  # 8 L1 + 8 L2 copies, 8 L1 + 8 parity files


def test_rebuild_repairs_a_lost_node_then_verify_passes(run_dir, tmp_path):
    root = copy_run(run_dir, tmp_path / "run")
    delete_node_dir(root / "local" / "node1")
    parity = sorted(root.glob("local/node2/*/l3/ckpt2/rank4.parity"))[0]
    corrupt_file(parity, offset=-1)
    bad = ftkit_cmd("verify", str(root / "meta"))
    assert bad.returncode == 1, bad.stdout
    assert "L3 rank 4" in bad.stdout and "L2 rank 2" in bad.stdout and "L1 rank 3" in bad.stdout
    rebuilt = ftkit_cmd("rebuild", str(root / "meta"))
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "L3 group 0 (ranks [0, 2, 4, 6] on nodes [0, 1, 2, 3]): rebuilt L1 files of ['rank 2 (node 1)']" \
        in rebuilt.stdout
    assert "re-created parity files of ['rank 2 (node 1)', 'rank 4 (node 2)']" in rebuilt.stdout
    assert "L2 group 1" in rebuilt.stdout
    assert "re-created partner copies of ['rank 3 (node 1)']" in rebuilt.stdout
    again = ftkit_cmd("rebuild", str(root / "meta"))
    assert again.returncode == 0 and again.stdout.count(": intact") == 4, again.stdout
    ok = ftkit_cmd("verify", str(root / "meta"))
    assert ok.returncode == 0 and "verified 32 file(s): 0 damaged" in ok.stdout, ok.stdout


def test_rebuild_reports_an_unrepairable_group(run_dir, tmp_path):
    root = copy_run(run_dir, tmp_path / "run")
    for n in (0, 1, 2):
        delete_node_dir(root / "local" / f"node{n}")
    res = ftkit_cmd("rebuild", str(root / "meta"), "--ckpt-dir", str(root / "local"), "--id", "2")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "CANNOT REPAIR" in res.stdout and "RS(4,4) needs 4 of 8 files, 2 survive" in res.stdout


def _offline_l3_run(root: Path, mib: int) -> tuple[Path, list[str]]:
    """A run of 4 ranks on 4 nodes with one checkpoint complete at L1 and L3 (RS), built without MPI."""
    import numpy as np

    from ftkit.storage.groupcode.offline import assess_group_files, rebuild_group_files
    from ftkit.storage.groupcode.plan import encoding_tag
    from ftkit.storage.levels import make_level
    from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile, write_manifest

    nodes = [0, 1, 2, 3]
    local, glbl, meta = root / "local", root / "global", root / "meta"
    l1, l3 = (make_level(lv, local, glbl, "runk", nodes) for lv in (1, 3))
    files = []
    for r in range(4):
        u = np.random.default_rng(r).standard_normal(mib * 2**17)
        info = l1.write(1, r, [("u", u)], level=1, nranks=4)
        files.append(RankFile(info.size, info.digest))
    data, parity = [l1.path(1, r) for r in range(4)], [l3.path(1, r) for r in range(4)]
    tag = encoding_tag("runk", 1)
    rebuild_group_files(assess_group_files(data, parity, tag=tag), data, parity, tag=tag)
    m = Manifest(exec_id="runk", nranks=4, created=1.0,
                 dirs={"ckpt_dir": str(local), "glbl_dir": str(glbl), "meta_dir": str(meta)})
    m.checkpoints.append(CheckpointEntry(id=1, seq=1, level=1, time=1.0, levels={1: True, 3: True},
                                         nodes=nodes, files=files, extra={"group_size": 4, "l3_code": "rs"}))
    write_manifest(meta, m)
    return data[1], [f.digest for f in files]


def test_kill_during_rebuild_leaves_no_temporary_after_the_next_run(tmp_path):
    import os
    import signal

    from ftkit._wait import deadline_after, poll_until
    from ftkit.storage._fsutil import is_temp_name
    from ftkit.storage.format.container import verify_file

    lost, digests = _offline_l3_run(tmp_path, 24)
    lost.unlink()

    def temps() -> list[Path]:
        return [p for p in (tmp_path / "local").rglob("*") if is_temp_name(p.name)]

    proc = subprocess.Popen([sys.executable, "-m", "ftkit", "rebuild", str(tmp_path / "meta")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        poll_until(lambda: bool(temps()) or proc.poll() is not None, deadline_after(120), "rebuild started")
        os.kill(proc.pid, signal.SIGKILL)  # from outside, in the middle of writing the rebuilt files
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the rebuild ended before it could be killed"
    assert temps() and not lost.exists()  # the kill left a temporary behind, never a half file
    again = ftkit_cmd("rebuild", str(tmp_path / "meta"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert temps() == []  # the next run removed the stale temporaries of the files it wrote
    assert verify_file(lost, expect_digest=digests[1]).rank == 1
    assert ftkit_cmd("verify", str(tmp_path / "meta")).returncode == 0
