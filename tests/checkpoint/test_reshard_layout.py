"""Layouts and partial verified reads, without MPI: the arithmetic elastic recovery and export rest on.

Property test: a global array written as the boxes of one random decomposition and read back as the boxes
of another equals the original, and every byte read is checked (a flipped byte in a needed chunk is caught,
bytes read stay within two digest chunks per run of the bytes needed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.errors import CorruptionError, FormatError
from ftkit.inject import corrupt_file
from ftkit.storage.format import boxread
from ftkit.storage.format.container import read_header, write_file
from ftkit.storage.format.global_layout import Box, Layout, box_runs, coverage_problem, parse_layout
from ftkit.storage.format.source import FileSource

G = (37, 29)
FULL = np.arange(G[0] * G[1], dtype=np.float64).reshape(G) * 0.5


def _grid(rows: list[int], cols: list[int]) -> list[Layout]:
    """Box decomposition of G by row and column cut points."""
    r = [0, *rows, G[0]]
    c = [0, *cols, G[1]]
    return [Layout.of_box(G, (r[i], c[j]), (r[i + 1] - r[i], c[j + 1] - c[j]))
            for i in range(len(r) - 1) for j in range(len(c) - 1)]


def read_runs(path, sec, runs, dest):
    with FileSource(path) as src:
        return boxread.read_runs(src, sec, runs, dest)


def _write(tmp, layouts):
    paths = []
    for rank, lay in enumerate(layouts):
        (b,) = lay.boxes
        local = np.ascontiguousarray(FULL[b.start[0]:b.stop[0], b.start[1]:b.stop[1]])
        p = tmp / f"r{rank}.ftk"
        write_file(p, [("a", local)], rank=rank, level=1, ckpt_id=1, exec_id="e", nranks=len(layouts),
                   layouts={"a": lay}, fsync=False)
        paths.append(p)
    return paths


def _read(paths, new: Layout) -> tuple[np.ndarray, int, int, int]:
    (b,) = new.boxes
    out = np.full(b.shape, -1.0)
    read = need = runs_n = 0
    for p in paths:
        sec = read_header(p).section("a")
        runs = box_runs(sec.layout, sec.shape, new, out.shape, 8)
        need += runs.total
        runs_n += len(runs.src)
        read += read_runs(p, sec, runs, memoryview(out.reshape(-1).view(np.uint8)))
    return out, read, need, runs_n


cuts = st.lists(st.integers(1, 28), max_size=3, unique=True).map(sorted)


@settings(max_examples=25, deadline=None)
@given(cuts, cuts, st.integers(0, 36), st.integers(1, 37), st.integers(0, 28), st.integers(1, 29))
def test_any_decomposition_reads_back(tmp_path_factory, rows, cols, r0, nr, c0, nc):
    tmp = tmp_path_factory.mktemp("d")
    paths = _write(tmp, _grid([x for x in rows if x < G[0]], cols))
    nr, nc = min(nr, G[0] - r0), min(nc, G[1] - c0)
    new = Layout.of_box(G, (r0, c0), (nr, nc))
    out, read, need, nruns = _read(paths, new)
    assert np.array_equal(out, FULL[r0:r0 + nr, c0:c0 + nc])
    assert need == nr * nc * 8 and need <= read <= need + 2 * 65536 * nruns


def test_damaged_chunk_is_caught_and_bytes_read_are_bounded(tmp_path):
    big = (1024, 64)                                # 512 KiB per array: 8 digest chunks of 64 KiB
    data = np.arange(big[0] * big[1], dtype=np.float64).reshape(big)
    p = tmp_path / "r.ftk"
    write_file(p, [("a", data)], rank=0, level=1, ckpt_id=1, exec_id="e", nranks=1,
               layouts={"a": Layout.of_box(big, (0, 0), big)}, fsync=False)
    sec = read_header(p).section("a")
    assert sec.chunk == 65536 and len(sec.chunk_xxh3) == 16 * 8
    new = Layout.of_box(big, (300, 0), (200, 64))   # 100 KiB from the middle
    out = np.zeros((200, 64))
    runs = box_runs(sec.layout, sec.shape, new, out.shape, 8)
    got = read_runs(p, sec, runs, memoryview(out.reshape(-1).view(np.uint8)))
    assert np.array_equal(out, data[300:500]) and got <= runs.total + 2 * 65536
    with FileSource(p) as src:                      # the same bytes mapped instead of read (export)
        mapped = boxread.map_run(src, sec, runs)
        assert mapped is not None
        assert np.array_equal(np.frombuffer(mapped.verified(0, runs.total), np.float64), out.reshape(-1))
    corrupt_file(p, sec.offset + 700 * 64 * 8)      # a chunk this read does not need: not read, no error
    read_runs(p, sec, runs, memoryview(out.reshape(-1).view(np.uint8)))
    corrupt_file(p, sec.offset + 400 * 64 * 8)      # a needed chunk
    with pytest.raises(CorruptionError, match="digest chunk"):
        read_runs(p, sec, runs, memoryview(out.reshape(-1).view(np.uint8)))
    with FileSource(p) as src:                      # mapped: checked when the damaged chunk is asked for
        mapped = boxread.map_run(src, sec, runs)
        assert mapped is not None
        mapped.verified(0, 40000)                   # chunk 2 only
        with pytest.raises(CorruptionError, match="digest chunk 3"):
            mapped.verified(40000, runs.total)


def test_coverage_rules():
    tiles = _grid([10, 20], [5])
    assert coverage_problem("a", tiles) is None
    assert "holes" in coverage_problem("a", tiles[:-1])
    assert "overlap" in coverage_problem("a", [*tiles, Layout.of_box(G, (3, 3), (2, 2))])
    assert coverage_problem("a", [Layout.of_box(G, (0, 0), G)] * 3) is None          # replicated
    assert "global shapes" in coverage_problem("a", [*tiles[:-1], Layout.of_box((40, 29), (0, 0), (1, 1))])
    many = [Layout(G, tuple(Box((i, 0), (i, 0), (1, G[1])) for i in range(G[0])))]  # one box per row
    assert coverage_problem("a", many) is None


@pytest.mark.parametrize("doc, match", [
    ({"global_shape": [4], "boxes": [[[0], [3], [2]]]}, "outside the global"),
    ({"global_shape": [4], "boxes": [[[1], [0], [3]]]}, "outside the local"),
    ({"global_shape": [4, 4], "boxes": []}, "dimensions"),
    ({"global_shape": [4], "boxes": [[[0], [-1], [2]]]}, "non-negative"),
    ({"global_shape": [4], "boxes": [[[0], [0]]]}, "local, start, shape"),
    ({"global_shape": [4], "boxes": [], "order": "X"}, "order"),
    ({"global_shape": [4], "boxes": [], "code": "x"}, "layout is not"),
])
def test_hostile_layout_documents_are_format_errors(doc, match):
    with pytest.raises(FormatError, match=match):
        parse_layout(doc, (3,))
