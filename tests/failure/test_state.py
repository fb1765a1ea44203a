"""The process-state table: round trip, persistence, reset, validation (in-process)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ftkit.errors import FormatError, GridError, StorageError
from ftkit.failure import state


@pytest.fixture(autouse=True)
def _fresh_table():
    state.persist_state_table(None)
    state._table = None
    yield
    state.persist_state_table(None)
    state._table = None


def test_no_table_until_one_is_known():
    assert state.get_state_table() is None
    state.reset_state()
    assert state.get_state_table() is None


def test_set_get_round_trip_is_a_copy():
    t = np.array([[1, 0, 1], [1, 1, 0]])
    state.set_state_table(t)
    got = state.get_state_table()
    assert got.dtype == np.int8 and got.tolist() == t.tolist()
    got[0, 0] = 0  # the caller's copy, not the table
    assert state.get_state_table()[0, 0] == 1


def test_reset_marks_everyone_alive_and_keeps_shape():
    state.set_state_table([[1, 0], [0, 1]])
    state.reset_state()
    assert state.get_state_table().tolist() == [[1, 1], [1, 1]]
    state.reset_state(shape=(3, 1))
    assert state.get_state_table().tolist() == [[1], [1], [1]]


def test_record_failures_marks_exactly_the_dead():
    out = state.record_failures((3, 3), {(1, 2)})
    expected = np.ones((3, 3), np.int8)
    expected[1, 2] = 0
    assert (out == expected).all() and (state.get_state_table() == expected).all()


@pytest.mark.parametrize("bad", [[1, 0, 1], [[2, 1]], [[1, 0], [0, -1]], np.ones((0, 2)), [[[1]]]])
def test_bad_tables_are_rejected(bad):
    with pytest.raises(GridError, match="state table"):
        state.set_state_table(bad)


def test_persistence_writes_atomically_and_loads(tmp_path):
    path = tmp_path / "shared" / "state.json"
    state.persist_state_table(path)
    state.set_state_table([[1, 1], [0, 1]])
    assert json.loads(path.read_text())["alive"] == [[1, 1], [0, 1]]
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary left behind
    state.reset_state()
    assert json.loads(path.read_text())["alive"] == [[1, 1], [1, 1]]
    state.record_failures((2, 2), {(0, 1)})
    state.persist_state_table(None)
    state._table = None  # a later job starts empty ...
    table = state.load_state_table(path)  # ... and learns what this one knew
    assert table.tolist() == [[1, 0], [1, 1]] and state.get_state_table().tolist() == [[1, 0], [1, 1]]


def test_load_rejects_foreign_and_inconsistent_files(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("not json")
    with pytest.raises(FormatError, match="bad JSON"):
        state.load_state_table(p)
    p.write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(FormatError, match="not an ftkit state-table"):
        state.load_state_table(p)
    p.write_text(
        json.dumps({"format": "ftkit-state-table", "version": 1, "shape": [1, 2], "alive": [[1, 7]]})
    )
    with pytest.raises(FormatError, match="invalid"):
        state.load_state_table(p)
    p.write_text(
        json.dumps({"format": "ftkit-state-table", "version": 1, "shape": [2, 1], "alive": [[1, 1]]})
    )
    with pytest.raises(FormatError, match="shape"):
        state.load_state_table(p)
    with pytest.raises(StorageError):
        state.load_state_table(tmp_path / "missing.json")
    with pytest.raises(StorageError, match="no state table"):
        state.save_state_table(tmp_path / "x.json")
