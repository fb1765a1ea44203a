"""Asynchronous post-processing in the Checkpointer (thread and head executors): node loss, kill in flight.

Every scenario compares the recovered run's final field bit for bit with a serial recomputation of the heat
example, and checks which checkpoint and level the recovery used.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ftkit.inject import delete_node_dir

from ..conftest import REPO, run_python

pytestmark = pytest.mark.mpi

APP = REPO / "tests" / "programs" / "async_app.py"
TIMEOUT = 240.0
#: executor -> (processes, emulated node size): 4 application ranks on 2 nodes either way.
LAYOUT = {"thread": (4, 2), "head": (6, 3)}


def write_config(d: Path, executor: str, **keys: object) -> None:
    basic = {"ckpt_dir": "run/local", "glbl_dir": "run/global", "meta_dir": "run/meta", "keep_last_ckpt": 1,
             "inline_l2": 0, "inline_l3": 0, "inline_l4": 0, "head": 1 if executor == "head" else 0,
             "group_size": 2, **keys}
    d.mkdir(parents=True, exist_ok=True)
    (d / "ftkit.ini").write_text("[basic]\n" + "".join(f"{k} = {v}\n" for k, v in basic.items())
                                 + "[ftkit]\nfailure_timeout = 120\n")


def run_app(d: Path, executor: str, *args: str):
    n, node_size = LAYOUT[executor]
    return run_python(n, APP, *args, node_size=node_size, cwd=d, timeout=TIMEOUT)


def ranks(stdout: str) -> dict[int, dict[str, int]]:
    out = {}
    for m in re.finditer(r"^R(\d+) size=(\d+) world=(\d+) node=(\d+)$", stdout, re.M):
        out[int(m.group(1))] = {"size": int(m.group(2)), "world": int(m.group(3)), "node": int(m.group(4))}
    return out


def recovered(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"^recovered (\d+) (\d+) at step (\d+)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def assert_bit_identical(stdout: str) -> None:
    d = re.search(r"^digest (\w+)$", stdout, re.M)
    r = re.search(r"^reference (\w+)$", stdout, re.M)
    assert d and r and d.group(1) == r.group(1), stdout


def check_layout(stdout: str, executor: str, stderr: str = "") -> None:
    """The application sees 4 ranks; in head mode world ranks 0 and 3 (the heads) are never among them."""
    seen = ranks(stdout)
    assert sorted(seen) == [0, 1, 2, 3], stdout + stderr
    assert all(v["size"] == 4 for v in seen.values())
    worlds = sorted(v["world"] for v in seen.values())
    assert worlds == ([1, 2, 4, 5] if executor == "head" else [0, 1, 2, 3])
    assert [seen[r]["node"] for r in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize("level", [2, 3, 4])
@pytest.mark.parametrize("executor", ["thread", "head"])
def test_async_checkpoints_then_node_loss_recover_bit_identical(tmp_path, executor, level):
    """Asynchronous L2/L3/L4 checkpoints, then the job dies and node storage is lost."""
    write_config(tmp_path, executor)
    args = ("--steps", "16", "--ckpt", f"5:{level}", "--ckpt", f"10:{level}")
    r = run_app(tmp_path, executor, *args, "--crash-at", "13")
    check_layout(r.stdout, executor, r.stderr)
    assert "digest" not in r.stdout, r.stdout
    # L2/L3 survive the loss of one node (node 1: its ranks' files, copies and parity); L4 the loss of all.
    lost = ["node1"] if level < 4 else ["node0", "node1"]
    for name in lost:
        delete_node_dir(tmp_path / "run" / "local" / name)
    r = run_app(tmp_path, executor, *args).check()
    check_layout(r.stdout, executor, r.stderr)
    assert recovered(r.stdout) == (2, level, 10)
    assert_bit_identical(r.stdout)


@pytest.mark.parametrize("executor", ["thread", "head"])
def test_kill_while_post_processing_in_flight_uses_previous_checkpoint(tmp_path, executor):
    write_config(tmp_path, executor)
    args = ("--steps", "16", "--ckpt", "5:4", "--ckpt", "10:4")
    r = run_app(tmp_path, executor, *args, "--kill-in-flight", "2")
    assert "digest" not in r.stdout, r.stdout
    # Checkpoint 2's L4 files were all written (the kill came just before it was recorded complete) ...
    assert len(list((tmp_path / "run" / "global").glob("*/l4/ckpt2/rank*.ftk"))) == 4
    manifest = (tmp_path / "run" / "meta" / "manifest.json").read_text()
    assert re.search(r'"id": 2,\s*"level": 4,\s*"levels": \{\s*"1": true,\s*"4": false', manifest), manifest
    # ... but with the node-local copies gone, recovery must use checkpoint 1, complete at L4.
    for d in (tmp_path / "run" / "local").glob("node*"):
        delete_node_dir(d)
    r = run_app(tmp_path, executor, *args).check()
    assert recovered(r.stdout) == (1, 4, 5)
    assert_bit_identical(r.stdout)


def test_without_thread_multiple_falls_back_to_inline_with_a_warning(tmp_path):
    write_config(tmp_path, "thread")
    args = ("--steps", "8", "--ckpt", "3:4", "--ckpt", "6:4", "--thread-level", "serialized")
    r = run_app(tmp_path, "thread", *args, "--kill-in-flight", "2")
    # No background thread exists, so the kill hook never fires: the run finishes, warning on every rank.
    r.check()
    assert r.stderr.count("falls back to inline") == 4, r.stderr
    assert_bit_identical(r.stdout)
