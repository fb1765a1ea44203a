"""Post-processing executors under MPI: asynchrony, one job in flight, failures reported everywhere, heads."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, run_python

PROG = REPO / "tests" / "programs" / "async_exec.py"


def _reports(out: str) -> tuple[list[dict], list[dict]]:
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return [x for x in lines if "rank" in x], [x for x in lines if "head" in x]


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["inline", "thread", "head"])
def test_executor_contract(tmp_path, mode):
    res = run_python(6, PROG, "--mode", mode, "--dir", str(tmp_path), "--fail-rank", "1", "--fail-id", "2",
                     "--work-seconds", "0.2", node_size=3, timeout=150).check()
    apps, heads = _reports(res.stdout)
    napp = 4 if mode == "head" else 6
    assert len(apps) == napp, res.stdout + res.stderr
    for r in apps:
        assert r["size"] == napp
        if mode == "inline":
            # Inline: submit returns once the checkpoint is complete (except the failed one).
            assert r["complete_after_submit"] == [1, 1, 3]
        else:
            # Asynchronous: checkpoint 1 was not complete when submit returned; each later submit first
            # waited for the previous job (one in flight), and checkpoint 2 never became complete.
            assert r["complete_after_submit"] == [0, 1, 1]
        assert r["complete_at_end"] == 3
        # The failure of checkpoint 2 is reported on every rank, exactly once, by the next call.
        assert len(r["errors"]) == 1, r
        cid, where, msg = r["errors"][0]
        assert "checkpoint 2" in msg
        assert (cid, where) == ((2, "submit") if mode == "inline" else (3, "submit"))
        if r["rank"] == 1 or mode == "head":
            assert "injected flush failure" in msg or "head(s) of node(s) [0]" in msg
    root = next(r for r in apps if r["rank"] == 0)
    expect = sorted(f"c{c}-r{k}" for c in (1, 2, 3) for k in range(napp) if (c, k) != (2, 1))
    assert root["l4_files"] == expect
    if mode == "head":
        # Heads are world ranks 0 and 3 (first of each node); the application never sees them.
        assert sorted(r["world"] for r in apps) == [1, 2, 4, 5]
        assert sorted(h["head"] for h in heads) == [0, 3] and all(h["served"] == 3 for h in heads)
    else:
        assert heads == []
