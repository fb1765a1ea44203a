"""`ftkit export`: a checkpoint's arrays to HDF5 / .npy, assembled from the ranks' boxes (issue 18).

The run is built without MPI through the storage API (real files, real manifest), as a 4-rank run would
write it: a 2-D array in 2 x 2 boxes, a 1-D array in uneven bands, a block-cyclic matrix (column-major local
arrays stored as their transposes, layout order "F"), a replicated step counter, and per-rank arrays without
a layout (one dataset per rank). The exported contents must equal the global arrays element for element,
from L1, from L4 when an L1 file is cut short, and from differential L4 checkpoints read in place; a damaged
copy, a truncated block store or a full disk (a real 4 MiB tmpfs) is a clear error that leaves nothing.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ftkit.checkpoint.dcp import DcpWriter
from ftkit.cli import main
from ftkit.errors import CheckpointNotFoundError, CorruptionError, StorageError
from ftkit.inject import corrupt_file
from ftkit.storage.export import export_checkpoint
from ftkit.storage.format.dcpstore import dcp_dir
from ftkit.storage.format.global_layout import Box, Layout
from ftkit.storage.levels import make_level
from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile, write_manifest

h5py = pytest.importorskip("h5py")  # in the 'test' extra; skipped only in a venv without it

NODES = [0, 0, 1, 1]
U = np.arange(30 * 22, dtype=np.float64).reshape(30, 22) * 0.5 - 7
V = np.arange(101, dtype=np.int32) * 3 - 50
A = np.arange(13 * 10, dtype=np.float64).reshape(13, 10) / 7     # the matrix, M x N
BANDS = [(0, 10), (10, 40), (40, 41), (41, 101)]
MB, NB = 3, 4                                                        # matrix blocks on a 2 x 2 grid


def _matrix_piece(pr: int, pc: int) -> tuple[np.ndarray, Layout]:
    """Rank (pr, pc)'s F-order local array of A and its layout, as protect_matrix stores it."""
    rows = [i for i in range(A.shape[0]) if (i // MB) % 2 == pr]
    cols = [j for j in range(A.shape[1]) if (j // NB) % 2 == pc]
    local = np.asfortranarray(A[np.ix_(rows, cols)])
    boxes = []
    for li in range(0, len(rows), MB):
        for lj in range(0, len(cols), NB):
            nr, nc = min(MB, len(rows) - li), min(NB, len(cols) - lj)
            boxes.append(Box((lj, li), (cols[lj], rows[li]), (nc, nr)))
    return local.T, Layout(A.shape[::-1], tuple(boxes), "F")


def _arrays(rank: int, cid: int) -> tuple[list, dict]:
    r0, c0 = (rank // 2) * 15, (rank % 2) * 11
    u = np.ascontiguousarray(U[r0:r0 + 15, c0:c0 + 11]) + cid
    b0, b1 = BANDS[rank]
    mat, mlay = _matrix_piece(rank // 2, rank % 2)
    arrays = [("u", u), ("v", V[b0:b1].copy()), ("A", mat), ("step", np.array([cid * 10], np.int64)),
              ("own", np.full((2, 3), rank + 0.5j)), ("scalar", np.array(rank * 2.0))]
    layouts = {"u": Layout((30, 22), (Box((0, 0), (r0, c0), (15, 11)),)),
               "v": Layout((101,), (Box((0,), (b0,), (b1 - b0,)),)), "A": mlay,
               "step": Layout((1,), (Box((0,), (0,), (1,)),))}
    return arrays, layouts


def _make_run(root, dcp: bool = False, arrays_of=None):
    """A 4-rank run with checkpoints 1 and 2 at L1 and L4 (``dcp``: L4 as differential checkpoints)."""
    local, glbl, meta = root / "local", root / "global", root / "meta"
    meta.mkdir(parents=True)
    m = Manifest(exec_id="run7", nranks=4, created=1.0,
                 dirs={"ckpt_dir": str(local), "glbl_dir": str(glbl), "meta_dir": str(meta)})
    writers: dict[int, DcpWriter] = {}
    for cid in (1, 2):
        files = []
        for r in range(4):
            arrays, layouts = (arrays_of or _arrays)(r, cid)
            info = None
            for level in (1,) if dcp else (1, 4):
                info = make_level(level, local, glbl, "run7", NODES).write(cid, r, arrays, level=4, nranks=4,
                                                                           layouts=layouts)
            if dcp:
                l1 = make_level(1, local, glbl, "run7", NODES).path(cid, r)
                stats = writers.setdefault(r, DcpWriter(dcp_dir(glbl, "run7"), r, 512)).write(l1, cid, (1,))
                assert stats.full == (cid == 1)
            files.append(RankFile(info.size, info.digest))
        m.checkpoints.append(CheckpointEntry(id=cid, seq=cid, level=4, time=1.0, levels={1: True, 4: True},
                                             nodes=NODES, files=files, extra={"dcp": True} if dcp else {}))
    write_manifest(meta, m)
    return root


def _check(get, cid: int) -> None:
    assert np.array_equal(get("u"), U + cid)
    assert np.array_equal(get("v"), V) and get("v").dtype == np.int32
    assert np.array_equal(get("A"), A)
    assert np.array_equal(get("step"), [cid * 10])
    for r in range(4):
        assert np.array_equal(get(f"own/rank{r}"), np.full((2, 3), r + 0.5j))
        assert get(f"scalar/rank{r}") == r * 2.0


def test_hdf5_and_npy_round_trip(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    out = tmp_path / "out.h5"
    assert main(["export", str(root), "--to", "hdf5", str(out)]) == 0
    assert "exported checkpoint 2" in capsys.readouterr().out
    with h5py.File(out) as f:
        _check(lambda k: f[k][()], 2)
        assert (f.attrs["checkpoint_id"], f.attrs["level"], f.attrs["run_id"]) == (2, 4, "run7")
        assert list(f.attrs["step"]) == [20]
    npy = tmp_path / "npy"
    assert main(["export", str(root / "meta"), "--to", "npy", str(npy), "--id", "1"]) == 0
    _check(lambda k: np.load(npy / (k.replace("/", ".") + ".npy")), 1)
    attrs = json.loads((npy / "attributes.json").read_text())
    assert attrs["checkpoint_id"] == 1 and attrs["run_id"] == "run7" and attrs["step"] == [10]


def test_small_slabs_and_l4_fallback(tmp_path):
    """Piece by piece (slabs of 64 bytes, smaller than one row): the same contents; lost L1 files -> L4."""
    root = _make_run(tmp_path / "r")
    for f in root.glob("local/node1/run7/l1/ckpt2/*.ftk"):
        f.unlink()
    out = tmp_path / "o.h5"
    export_checkpoint(root, "hdf5", out, chunk_bytes=64)
    with h5py.File(out) as f:
        _check(lambda k: f[k][()], 2)


def test_truncated_l1_file_falls_back_to_l4(tmp_path):
    root = _make_run(tmp_path / "r")
    f = next(root.glob("local/node0/run7/l1/ckpt2/rank1.ftk"))
    f.write_bytes(f.read_bytes()[:-100])
    out = tmp_path / "t.h5"
    export_checkpoint(root, "hdf5", out)
    with h5py.File(out) as fh:
        _check(lambda k: fh[k][()], 2)


def test_differential_l4_is_exported_in_place(tmp_path):
    """Checkpoints flushed with dCP (checkpoint 2 differential): with every L1 file lost, both export from
    the block stores; a truncated block store is a clear error and leaves nothing."""
    root = _make_run(tmp_path / "r", dcp=True)
    assert not list(root.glob("global/run7/l4/*/*.ftk"))
    assert len(list(root.glob("global/run7/l4dcp/*.map"))) == 8
    for f in root.glob("local/*/run7/l1/*/*.ftk"):
        f.unlink()
    for cid in (1, 2):
        out = tmp_path / f"d{cid}.h5"
        export_checkpoint(root, "hdf5", out, ckpt_id=cid, chunk_bytes=1000)
        with h5py.File(out) as fh:
            _check(lambda k: fh[k][()], cid)
    (store,) = root.glob("global/run7/l4dcp/dcp-r2-g*.blocks")
    with open(store, "r+b") as fh:
        fh.truncate(store.stat().st_size - 10)
    with pytest.raises(CheckpointNotFoundError, match=r"rank 2's file.*truncated"):
        export_checkpoint(root, "npy", tmp_path / "x")
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x*"))


def _big(rank: int, cid: int) -> tuple[list, dict]:
    """A 2 MiB band of a 8 MiB array per rank."""
    band = np.full((64, 4096), rank + cid, dtype=np.float64)
    return [("big", band)], {"big": Layout((256, 4096), (Box((0, 0), (64 * rank, 0), (64, 4096)),))}


def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path, small_disk):
    root = _make_run(tmp_path / "r", arrays_of=_big)
    disk = small_disk(4 * 2**20)
    for fmt, name in (("hdf5", "big.h5"), ("npy", "big")):
        with pytest.raises(StorageError, match="disk full"):
            export_checkpoint(root, fmt, disk / name)
        assert list(disk.iterdir()) == [], f"{fmt}: a failed export must leave nothing"
    out = tmp_path / "ok.h5"    # the same export where there is room
    export_checkpoint(root, "hdf5", out)
    with h5py.File(out) as fh:
        assert np.array_equal(fh["big"][()], np.repeat(np.arange(4) + 2.0, 64)[:, None] * np.ones(4096))


def test_damaged_file_leaves_nothing(tmp_path):
    root = _make_run(tmp_path / "r")
    corrupt_file(next(root.glob("local/node0/run7/l1/ckpt2/rank1.ftk")), -30)   # in a section's bytes
    for fmt, name in (("hdf5", "d.h5"), ("npy", "d")):
        with pytest.raises(CorruptionError, match="checksum mismatch"):
            export_checkpoint(root, fmt, tmp_path / name)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r"], "a failed export must leave nothing"


def test_refusals(tmp_path):
    root = _make_run(tmp_path / "r")
    (tmp_path / "x.h5").write_text("mine")
    with pytest.raises(StorageError, match="exists"):
        export_checkpoint(root, "hdf5", tmp_path / "x.h5")
    assert (tmp_path / "x.h5").read_text() == "mine"
    with pytest.raises(CheckpointNotFoundError, match="id 5"):
        export_checkpoint(root, "npy", tmp_path / "n", ckpt_id=5)
    with pytest.raises(CheckpointNotFoundError, match="manifest"):
        export_checkpoint(tmp_path / "nothing", "npy", tmp_path / "n")


def _bands(rank: int, cid: int) -> tuple[list, dict]:
    """Uneven bands of a 601 x 4096 float64 array (about 4.7 MiB per rank: more than one mapped slab), every
    element distinct, so a slab written at a wrong place changes the export."""
    b0, b1 = (0, 150, 301, 452, 601)[rank:rank + 2]
    band = (np.arange(b0, b1)[:, None] * 4096 + np.arange(4096)[None, :] + cid * 0.5).astype(np.float64)
    return [("w", band)], {"w": Layout((601, 4096), (Box((0, 0), (b0, 0), (b1 - b0, 4096)),))}


def _want_bands(cid: int) -> np.ndarray:
    return (np.arange(601)[:, None] * 4096 + np.arange(4096)[None, :] + cid * 0.5).astype(np.float64)


def test_boxes_of_several_slabs_land_in_place(tmp_path):
    """Each rank's band is mapped and written in several slabs (the last one short): both formats hold
    every element where it belongs."""
    root = _make_run(tmp_path / "r", arrays_of=_bands)
    export_checkpoint(root, "hdf5", tmp_path / "w.h5")
    with h5py.File(tmp_path / "w.h5") as fh:
        assert np.array_equal(fh["w"][()], _want_bands(2))
    export_checkpoint(root, "npy", tmp_path / "w", ckpt_id=1)
    assert np.array_equal(np.load(tmp_path / "w" / "w.npy"), _want_bands(1))


def test_small_mappings_and_slabs(tmp_path, monkeypatch):
    """Mappings and slabs far smaller than a digest chunk and not a whole number of rows of it (a mapping
    starting inside a chunk): the same contents, from L1 and (lost L1 files) L4."""
    import ftkit.storage.export as export_mod

    monkeypatch.setattr(export_mod, "_MAP_BYTES", 100)
    monkeypatch.setattr(export_mod, "_SLAB_BYTES", 36)
    root = _make_run(tmp_path / "r")
    export_checkpoint(root, "hdf5", tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5") as fh:
        _check(lambda k: fh[k][()], 2)
    for f in root.glob("local/node0/run7/l1/ckpt1/*.ftk"):
        f.unlink()
    export_checkpoint(root, "npy", tmp_path / "b", ckpt_id=1)
    _check(lambda k: np.load(tmp_path / "b" / (k.replace("/", ".") + ".npy")), 1)


# -- issue 30 (X1-X5): names that would overwrite each other, attributes, planted and leftover temp names ---

def _named(*names_with_layout: tuple[str, bool]):
    """arrays_of for _make_run: small arrays of the given names, with a 1-D band layout or kept per rank;
    every element says its array, rank and checkpoint."""
    def arrays_of(rank: int, cid: int) -> tuple[list, dict]:
        arrays, layouts = [], {}
        for i, (name, laid) in enumerate(names_with_layout):
            arrays.append((name, np.arange(3, dtype=np.float64) + 100 * i + 10 * rank + cid))
            if laid:
                layouts[name] = Layout((12,), (Box((0,), (3 * rank,), (3,)),))
        return arrays, layouts
    return arrays_of


def _global(i: int, cid: int) -> np.ndarray:
    return np.concatenate([np.arange(3, dtype=np.float64) + 100 * i + 10 * r + cid for r in range(4)])


def _nothing_left(where, *keep: str) -> None:
    assert sorted(p.name for p in where.iterdir()) == sorted(keep), "a refused export must leave nothing"


@pytest.mark.parametrize("names", [(("x", False), ("x.rank0", True)), (("a/b", True), ("a.b", True)),
                                   (("x.rank2", True), ("x", False))])
def test_npy_names_that_would_collide_are_refused_naming_both(tmp_path, names):
    root = _make_run(tmp_path / "r", arrays_of=_named(*names))
    with pytest.raises(StorageError) as err:
        export_checkpoint(root, "npy", tmp_path / "n")
    msg = str(err.value)
    assert all(repr(n) in msg for n, _ in names) and "--to hdf5" in msg and "nothing was written" in msg, msg
    _nothing_left(tmp_path, "r")
    export_checkpoint(root, "hdf5", tmp_path / "x.h5")   # HDF5 keeps them apart, every value in its place
    with h5py.File(tmp_path / "x.h5") as fh:
        for i, (name, laid) in enumerate(names):
            if laid:
                assert np.array_equal(fh[name][()], _global(i, 2)), name
            else:
                for r in range(4):
                    assert np.array_equal(fh[f"{name}/rank{r}"][()], _global(i, 2)[3 * r:3 * r + 3]), name


@pytest.mark.parametrize("names", [(("a", True), ("a/b", True)), (("a/b", True), ("a", True)),
                                   (("x", False), ("x/rank1", True)), (("a/b", True), ("a/b/", True)),
                                   (("u/./v", True),)])
def test_hdf5_names_that_would_collide_are_a_clear_error(tmp_path, names):
    root = _make_run(tmp_path / "r", arrays_of=_named(*names))
    with pytest.raises(StorageError) as err:   # not h5py's ValueError ("name already exists")
        export_checkpoint(root, "hdf5", tmp_path / "o.h5")
    msg = str(err.value)
    assert all(repr(n) in msg for n, _ in names) and "--to npy" in msg and "nothing was written" in msg, msg
    _nothing_left(tmp_path, "r")
    rc = main(["export", str(root / "meta"), "--to", "hdf5", str(tmp_path / "o.h5")])
    assert rc != 0
    _nothing_left(tmp_path, "r")


def test_array_names_cannot_replace_the_exports_attributes(tmp_path, capsys):
    names = [(n, True) for n in ("checkpoint_id", "level", "nranks", "run_id", "complete_levels", "step")]
    root = _make_run(tmp_path / "r", arrays_of=lambda rank, cid: (
        [(n, np.array([-5 - i], np.int64)) for i, (n, _) in enumerate(names)],
        {n: Layout((1,), (Box((0,), (0,), (1,)),)) for n, _ in names}))
    want = {"checkpoint_id": 2, "level": 4, "nranks": 4, "run_id": "run7", "complete_levels": [1, 4]}
    assert main(["export", str(root / "meta"), "--to", "hdf5", str(tmp_path / "o.h5")]) == 0
    assert "exported checkpoint 2 (level 4) of run run7" in capsys.readouterr().out
    with h5py.File(tmp_path / "o.h5") as fh:
        got = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in fh.attrs.items()}
        assert {k: (list(got[k]) if k == "complete_levels" else got[k]) for k in want} == want, got
        assert list(got["step"]) == [-10], "a small replicated array is still an attribute"
        for i, (n, _) in enumerate(names):
            assert fh[n][()].tolist() == [-5 - i], n   # the arrays themselves are exported as datasets
    assert main(["export", str(root / "meta"), "--to", "npy", str(tmp_path / "n")]) == 0
    attrs = json.loads((tmp_path / "n" / "attributes.json").read_text())
    assert {k: attrs[k] for k in want} == want and attrs["step"] == [-10], attrs
    assert np.load(tmp_path / "n" / "run_id.npy").tolist() == [-8]


@pytest.mark.parametrize("fmt,name", [("hdf5", "o.h5"), ("npy", "o")])
def test_symlink_planted_at_the_temporary_name_is_never_followed(tmp_path, fmt, name):
    root = _make_run(tmp_path / "r")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / f".{name}.partial").symlink_to(victim)
    with pytest.raises(StorageError, match=r"\.partial exists.*remove it"):
        export_checkpoint(root, fmt, tmp_path / name)
    assert victim.read_text() == "precious" and (tmp_path / f".{name}.partial").is_symlink()
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("fmt,name", [("hdf5", "o.h5"), ("npy", "o")])
def test_leftover_of_a_killed_export_is_named_with_what_to_do(tmp_path, fmt, name):
    root = _make_run(tmp_path / "r")
    export_checkpoint(root, fmt, tmp_path / "whole")
    leftover = tmp_path / f".{name}.partial"
    leftover.mkdir()          # what an export killed in the middle leaves: its directory, part written
    (tmp_path / "whole").rename(leftover / name)
    with pytest.raises(StorageError) as err:
        export_checkpoint(root, fmt, tmp_path / name)
    msg = str(err.value)
    assert str(leftover) in msg and "interrupted" in msg and f"rm -r '{leftover}'" in msg, msg
    assert "disk full" not in msg, msg
    assert (leftover / name).exists(), "the leftover is the user's to remove"
    shutil.rmtree(leftover)
    export_checkpoint(root, fmt, tmp_path / name)   # as the message says: removed, the export works
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r", name])
