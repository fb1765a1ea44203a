"""A fifth level is one module and one table line (issue 34): checkpoint through it, lose every node-local
file, recover from it bit for bit.

The level is ``tests/programs/mirror_level.py`` (a mirror of each rank's file in a second global directory);
``ckpt_app.py --register mirror_level:SPEC`` adds its record to the level table in every rank before the
Checkpointer. Nothing in ftkit names it. ``OBJECT_SPEC`` keeps the same level in a store without local files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ftkit.storage.levels import numbers, recovery_order, spec

from ..conftest import REPO
from ._util import rank_lines, run_app, write_config

pytestmark = pytest.mark.mpi

N = 4  # ranks, in 2 emulated nodes


def _recovered(lines: dict[int, str]) -> dict[int, dict[str, str]]:
    return {r: dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv) for r, line in lines.items()}


@pytest.mark.parametrize("record, where", [("SPEC", "mirror"), ("OBJECT_SPEC", "mirror-objects")])
def test_a_fifth_level_checkpoints_and_recovers_after_every_node_local_file_is_lost(tmp_path, record, where):
    d = tmp_path / "run"
    write_config(d, group_size=2)
    register = ("--register", f"mirror_level:{record}")
    r = run_app(d, N, "--mode", "write", "--levels", "5,1", *register).check()
    assert all(f"R{rank} wrote id=1 level=5" in r.stdout for rank in range(N)), r.stdout + r.stderr
    manifest = json.loads(next((d / "run" / "meta").rglob("manifest.json")).read_text())
    assert [c["levels"] for c in manifest["checkpoints"]] == [{"1": True, "5": True}, {"1": True}]
    mirror = d / "run" / where
    if record == "SPEC":  # a directory tree like L4's, under the second global directory
        assert sorted(p.name for p in mirror.glob("*/l5/ckpt1/*")) == [f"rank{i}.ftk" for i in range(N)]
    else:                 # flat objects: no directory per checkpoint
        assert len([p for p in mirror.iterdir() if "%l5%ckpt1%" in p.name]) == N
        assert not any(p.is_dir() for p in mirror.iterdir())
    assert not list((d / "run" / "global").rglob("*.ftk")), "nothing may go to L4"

    shutil.rmtree(d / "run" / "local")  # every node's local storage lost: checkpoint 2 (L1 only) is gone

    r = run_app(d, N, "--mode", "recover", *register).check()
    got = _recovered(rank_lines(r.stdout, N))
    # data=ok: the arrays equal the written values exactly (np.array_equal), on every rank
    assert all(v["id"] == "1" and v["level"] == "5" and v["step"] == "0" and v["data"] == "ok"
               for v in got.values()), r.stdout + r.stderr


def test_without_its_registration_the_level_does_not_exist(tmp_path):
    d = tmp_path / "run"
    write_config(d)
    r = run_app(d, 2, "--mode", "write", "--levels", "5")
    lines = rank_lines(r.stdout, 2)
    assert all("checkpoint error CheckpointError" in line and "is invalid" in line for line in lines.values())
    assert numbers() == (1, 2, 3, 4)  # this process registered nothing


def test_registration_refuses_clashes_and_places_the_level_in_the_recovery_order():
    code = """
import sys
sys.path.insert(0, sys.argv[1])
import mirror_level
from dataclasses import replace
from ftkit.errors import StorageError
from ftkit.storage import levels
from ftkit.topology import plan_topology
levels.register_level(mirror_level.SPEC)
levels.register_level(mirror_level.SPEC)  # the same record again: fine
spec = mirror_level.SPEC
for bad in (replace(spec, name="pfs"), replace(spec, root=None), replace(spec, number=True)):
    try:
        levels.register_level(bad)
    except StorageError as exc:
        print("refused", exc)
t = plan_topology([0, 1, 2, 3], 0, group_size=2, ckpt_dir="/nonexistent")
print("order", [s.number for s in levels.recovery_order()])
print("survives", levels.survives_loss(5, t, [0, 1, 2, 3], "rs"), levels.survives_loss(1, t, [0], "rs"))
print("local", levels.node_local())
from ftkit.checkpoint.levels import LEVELS, recovery_chain
print("chain", [type(s).__name__ for s in recovery_chain()][-1], LEVELS[5].name)
"""
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "tests" / "programs")], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.count("refused") == 3, out
    assert "order [1, 2, 3, 4, 5]" in out and "survives True False" in out and "local (1, 2, 3)" in out, out
    assert "chain MirrorStep mirror" in out, out
    assert [s.number for s in recovery_order()] == [1, 2, 3, 4] and spec(4).name == "pfs"
