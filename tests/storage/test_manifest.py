"""The manifest: round trip, strict parsing, atomic commit, pruning rules."""

from __future__ import annotations

import pytest

from ftkit.errors import FormatError
from ftkit.storage.manifest import (
    CheckpointEntry,
    Manifest,
    ManifestStore,
    RankFile,
    manifest_path,
    plan_prune,
    read_manifest,
    write_manifest,
)


def _entry(cid, seq, levels, n=2):
    return CheckpointEntry(id=cid, seq=seq, level=max(levels), time=1.0, levels=dict(levels), nodes=[0] * n,
                           files=[RankFile(100 + r, f"{r:016x}") for r in range(n)], extra={"snapshots": seq})


def test_round_trip_and_atomic_commit(tmp_path):
    m = Manifest(exec_id="run1", nranks=2, created=5.0, dirs={"ckpt_dir": "/x"})
    m.checkpoints = [_entry(1, 1, {1: True}), _entry(3, 2, {1: True, 4: False})]
    write_manifest(tmp_path, m)
    back = read_manifest(tmp_path)
    assert back.to_json() == m.to_json()
    assert back.entry(3).levels == {1: True, 4: False} and back.entry(3).complete_levels == [1]
    assert back.next_id == 4 and back.next_seq == 3
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"], "no temporary file may remain"
    assert read_manifest(tmp_path / "missing") is None


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(format="other"),
    lambda d: d.update(version=99),
    lambda d: d.update(nranks=-1),
    lambda d: d["checkpoints"][0].update(files=[]),
    lambda d: d["checkpoints"][0]["files"][0].update(digest="zz"),
    lambda d: d["checkpoints"][0].pop("levels"),
    lambda d: d.update(status="weird"),
    lambda d: d["checkpoints"][0]["extra"].update(unsynced=2),
    lambda d: d["checkpoints"][0]["extra"].update(unsynced=[7]),
    lambda d: d["checkpoints"][0]["extra"].update(unsynced=[True]),
])
def test_malformed_manifests_are_refused(tmp_path, mutate):
    m = Manifest(exec_id="r", nranks=2, created=1.0, checkpoints=[_entry(1, 1, {1: True})])
    doc = m.to_json()
    mutate(doc)
    import json

    manifest_path(tmp_path).write_text(json.dumps(doc))
    with pytest.raises(FormatError):
        read_manifest(tmp_path)


def test_damaged_json_is_a_format_error(tmp_path):
    manifest_path(tmp_path).write_text('{"format": "ftkit-manifest", ')
    with pytest.raises(FormatError, match="not valid JSON"):
        read_manifest(tmp_path)


def test_prune_keeps_newest_and_newest_per_level():
    m = Manifest(exec_id="r", nranks=2, created=1.0)
    m.checkpoints = [_entry(1, 1, {4: True}), _entry(2, 2, {1: True}), _entry(3, 3, {4: True}),
                     _entry(4, 4, {1: True}), _entry(5, 5, {1: True}), _entry(6, 6, {1: True, 4: False})]
    assert plan_prune(m) == [1, 2, 4, 5]       # keep 6 (newest, complete at L1) and 3 (newest at L4)
    assert plan_prune(m, keep_all_l4=True) == [2, 4, 5]
    m.checkpoints[-1].levels = {1: False, 4: False}   # newest still in flight: keep 5 as newest complete L1
    assert plan_prune(m) == [1, 2, 4]


def test_prune_keeps_the_previous_checkpoint_while_the_newest_is_unsynced_at_a_level():
    m = Manifest(exec_id="r", nranks=2, created=1.0)
    m.checkpoints = [_entry(1, 1, {1: True, 2: True}), _entry(2, 2, {1: True, 2: True}),
                     _entry(3, 3, {1: True, 2: True})]
    m.checkpoints[2].extra["unsynced"] = [2]
    assert m.checkpoints[2].unsynced_levels == {2} and m.checkpoints[1].unsynced_levels == set()
    assert plan_prune(m) == [1]           # 3: newest and L1; 2: newest durable at L2
    m.checkpoints[2].extra.pop("unsynced")
    assert plan_prune(m) == [1, 2]
    # A newer L1-only checkpoint: the unsynced L2 one is not needed for anything (2 covers L2).
    m.checkpoints[2].extra["unsynced"] = [2]
    m.checkpoints.append(_entry(4, 4, {1: True}))
    assert plan_prune(m) == [1, 3]
    back = Manifest.loads(m.dumps())
    assert back.entry(3).unsynced_levels == {2} and plan_prune(back) == [1, 3]


def test_store_updates(tmp_path):
    m = Manifest(exec_id="r", nranks=2, created=1.0)
    store = ManifestStore(tmp_path, m, writer=True)
    store.add(_entry(1, 1, {1: True, 4: False}))
    store.set_levels(1, {4: True})
    store.commit()
    assert read_manifest(tmp_path).entry(1).complete_levels == [1, 4]
    store.drop([1])
    store.commit()
    assert read_manifest(tmp_path).checkpoints == []
    reader = ManifestStore(tmp_path / "other", Manifest(exec_id="r", nranks=2, created=1.0), writer=False)
    reader.commit()
    assert not (tmp_path / "other").exists()
