"""The halt record (``meta_dir/ftkit.halt``): written atomically, parsed strictly, watched with one stat."""

from __future__ import annotations

import json
import os

import pytest

from ftkit.errors import FormatError
from ftkit.storage.halt import HaltRecord, HaltWatch, halt_path, parse_halt, read_halt, write_halt


def test_round_trip_and_honoured(tmp_path):
    rec = HaltRecord("pending", 100.0, 200.0, "u@h")
    write_halt(tmp_path, rec)
    assert read_halt(tmp_path) == rec
    done = rec.honoured("run-1", 7, now=300.0)
    write_halt(tmp_path, done)
    back = read_halt(tmp_path)
    assert back == done and back.state == "done" and back.done_checkpoint == 7
    assert not back.due(10**10)  # a done record never halts a job again
    assert [p.name for p in tmp_path.iterdir()] == ["ftkit.halt"]  # no temporary file left


def test_due_only_when_pending_and_its_time_has_come():
    assert HaltRecord("pending", 1.0).due(2.0)
    assert not HaltRecord("pending", 1.0, at=50.0).due(49.0)
    assert HaltRecord("pending", 1.0, at=50.0).due(50.0)


@pytest.mark.parametrize("doc", [
    "not json", "[]", json.dumps({"format": "other", "version": 1}),
    json.dumps({"format": "ftkit-halt", "version": 2, "state": "pending", "requested": 1.0}),
    json.dumps({"format": "ftkit-halt", "version": 1, "state": "maybe", "requested": 1.0}),
    json.dumps({"format": "ftkit-halt", "version": 1, "state": "pending", "requested": "soon"}),
    json.dumps({"format": "ftkit-halt", "version": 1, "state": "pending", "requested": 1.0, "at": True}),
    json.dumps({"format": "ftkit-halt", "version": 1, "state": "done", "requested": 1.0, "done": None}),
    json.dumps({"format": "ftkit-halt", "version": 1, "state": "done", "requested": 1.0,
                "done": {"time": 2.0, "exec_id": "r", "checkpoint": "7"}}),
])
def test_damaged_records_are_refused(doc):
    with pytest.raises(FormatError):
        parse_halt(doc, "ftkit.halt")


def test_watch_rereads_only_a_changed_file_and_ignores_a_damaged_one(tmp_path):
    said = []
    watch = HaltWatch(tmp_path, warn=said.append)
    assert not watch.due()
    write_halt(tmp_path, HaltRecord("pending", 1.0))
    assert watch.due()
    first = watch.record
    assert watch.due() and watch.record is first  # unchanged file: not read again
    halt_path(tmp_path).write_text("garbage")
    os.utime(halt_path(tmp_path), ns=(1, 1))
    assert not watch.due() and said and "ignoring the halt record" in said[0]
