"""The checkpoint package's level table (issue 14): one module per level, a static table, the contract
importing no level and no level importing an executor or another level.

The package-wide checks (no import circle, layers, sizes) are in ``tests/test_structure.py``.
"""

from __future__ import annotations

import re

from ftkit.checkpoint.levels import LEVELS, recovery_chain

from ..conftest import REPO
from ..test_structure import import_graph

PKG = REPO / "src" / "ftkit" / "checkpoint"


def test_contract_imports_no_level_and_levels_import_no_executor():
    graph = import_graph()
    assert not any(i.startswith("ftkit.checkpoint.levels") for i in graph["ftkit.checkpoint.contract"])
    executors = {"ftkit.checkpoint.post", "ftkit.checkpoint.head", "ftkit.checkpoint.offload",
                 "ftkit.checkpoint.pipeline", "ftkit.checkpoint.recovery", "ftkit.checkpoint.checkpointer"}
    for m, deps in graph.items():
        if m.startswith("ftkit.checkpoint.levels"):
            assert not deps & executors, f"{m} imports {deps & executors}"
    for level in ("local", "partner", "encoded", "pfs"):
        others = {f"ftkit.checkpoint.levels.{o}" for o in ("local", "partner", "encoded", "pfs")
                  if o != level}
        assert not graph[f"ftkit.checkpoint.levels.{level}"] & others, f"level {level} imports another level"


def test_the_level_table_is_static_and_complete():
    assert sorted(LEVELS) == [1, 2, 3, 4]
    assert [LEVELS[n].name for n in (1, 2, 3, 4)] == ["local", "partner", "encoded", "pfs"]
    assert LEVELS[1].post is None and all(LEVELS[n].post is not None for n in (2, 3, 4))
    assert [(type(s).__name__, s.level) for s in recovery_chain()] == [
        ("LocalStep", 1), ("PartnerStep", 2), ("EncodedStep", 3), ("DcpStep", 4), ("PFSStep", 4)]
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        assert "POST_STEPS" not in text and "install_recovery_steps" not in text, path


#: Level numbers left where the meaning is one level's own. None is left: this set stays empty.
_STILL_NUMBERED: set[str] = set()
_DISPATCH = re.compile(r"\(1, 2, 3, 4\)|range\(1, ?5\)|level ?[=!]= ?[1-4]|in \(1")


def test_no_module_dispatches_on_level_numbers_but_through_the_level_table():
    src = REPO / "src" / "ftkit"
    found = {str(p.relative_to(src)) for p in src.rglob("*.py") if _DISPATCH.search(p.read_text())}
    assert found <= _STILL_NUMBERED, f"level numbers tested in {sorted(found - _STILL_NUMBERED)}: ask the " \
                                     "level table (ftkit.storage.levels) instead"
