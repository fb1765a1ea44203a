"""What the OnlineRecoveryError promises about a relaunch (issue 17): only what the checkpoints on disk
can deliver when the dead ranks' node-local files are lost."""

from __future__ import annotations

from types import SimpleNamespace

from ftkit.checkpoint.online.verdict import covers_node_loss, relaunch_verdict
from ftkit.storage.manifest import CheckpointEntry, Manifest
from ftkit.topology import plan_topology


def _topology(nodes: int, group_size: int):  # 4 single-rank nodes, groups (0, 1) and (2, 3) for size 2
    return plan_topology(list(range(nodes)), 0, group_size=group_size, ckpt_dir="/nonexistent")


def test_covers_node_loss_per_level():
    t = _topology(4, 2)
    assert t.groups == ((0, 1), (2, 3))
    assert covers_node_loss(t, 4, [0, 1, 2], "rs")
    assert not covers_node_loss(t, 1, [3], "rs") and covers_node_loss(t, 1, [], "rs")
    assert covers_node_loss(t, 2, [0, 2], "rs") and not covers_node_loss(t, 2, [0, 1], "rs")
    assert covers_node_loss(t, 3, [0, 2], "rs") and not covers_node_loss(t, 3, [2, 3], "rs")
    t4 = _topology(4, 4)
    assert covers_node_loss(t4, 3, [0, 3], "rs") and not covers_node_loss(t4, 3, [0, 3], "xor")
    assert not covers_node_loss(t4, 3, [0, 1, 2], "rs")


def _session(*entries: tuple[int, dict[int, bool]]):
    m = Manifest(exec_id="x", nranks=4, created=0.0)
    m.checkpoints = [CheckpointEntry(id=i, seq=i, level=max(lv), time=0.0, levels=lv, nodes=[0, 1, 2, 3],
                                     files=[], extra={"next_step": 5 * i}) for i, lv in entries]
    return SimpleNamespace(store=SimpleNamespace(manifest=m), topology=_topology(4, 2),
                           config=SimpleNamespace(l3_code="rs"))


def test_relaunch_verdict_tells_the_truth():
    assert "starts from the beginning" in relaunch_verdict(_session(), [0])
    both = _session((1, {1: True, 4: True}), (2, {1: True, 2: True}))
    ok = relaunch_verdict(both, [0, 2])  # partners alive: the newest (L2) serves
    assert ok.startswith("Checkpoint 2 at level 2") and "relaunch the job" in ok, ok
    older = relaunch_verdict(both, [0, 1])  # partners dead together: only the older L4 one serves
    assert older.startswith("Checkpoint 1 at level 4") and "resumes at step 5" in older, older
    l2_only = relaunch_verdict(_session((2, {1: True, 2: True})), [0, 1])
    assert l2_only.startswith("No checkpoint survives") and "only if those files are intact" in l2_only
    assert "relaunch the job" not in l2_only
    assert "beginning" in relaunch_verdict(SimpleNamespace(), [0])  # nothing known: no promise
