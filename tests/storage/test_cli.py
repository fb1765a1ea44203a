"""`ftkit ls` and `ftkit verify` on a run's directories (built without MPI through the storage API)."""

from __future__ import annotations

import numpy as np

from ftkit.cli import main
from ftkit.inject import corrupt_file
from ftkit.storage.levels import make_level
from ftkit.storage.manifest import CheckpointEntry, Manifest, RankFile, write_manifest

NODES = [0, 0, 1, 1]


def _make_run(root):
    local, glbl, meta = root / "local", root / "global", root / "meta"
    meta.mkdir(parents=True)
    m = Manifest(exec_id="run9", nranks=4, created=1.0,
                 dirs={"ckpt_dir": str(local), "glbl_dir": str(glbl), "meta_dir": str(meta)})
    for cid, level in ((1, 4), (2, 1)):
        lv = make_level(level, local, glbl, "run9", NODES)
        files = []
        for r in range(4):
            info = lv.write(cid, r, [("u", np.full(1000, float(r + cid)))], level=level, nranks=4)
            files.append(RankFile(info.size, info.digest))
        m.checkpoints.append(CheckpointEntry(id=cid, seq=cid, level=level, time=1.0, levels={level: True},
                                             nodes=NODES, files=files))
    write_manifest(meta, m)
    return root


def test_ls_lists_checkpoints(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    assert main(["ls", str(root / "meta")]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [(x[0], x[1], x[2], x[3]) for x in lines] == [("1", "4", "L4", "4"), ("2", "1", "L1", "4")]
    assert all("yes" in line for line in out.splitlines()[2:4])
    # the parent directory works too, and a missing file shows as incomplete (exit code 1: damage found)
    next(root.glob("local/node1/run9/l1/ckpt2/rank3.ftk")).unlink()
    assert main(["ls", str(root)]) == 1
    out = capsys.readouterr().out
    assert "no (1 file problem(s)" in out and "rank 3" in out


def test_verify_reports_damage_with_exit_code(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    assert main(["verify", str(root)]) == 0
    assert "verified 8 file(s): 0 damaged" in capsys.readouterr().out
    corrupt_file(next(root.glob("global/run9/l4/ckpt1/rank2.ftk")), -3)
    assert main(["verify", str(root / "meta")]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "rank2.ftk" in out and "checksum mismatch" in out and "1 damaged" in out


def test_moved_run_and_no_manifest(tmp_path, capsys):
    root = _make_run(tmp_path / "r")
    moved = tmp_path / "moved"
    root.rename(moved)
    assert main(["verify", str(moved)]) == 0
    (moved / "meta" / "manifest.json").unlink()
    assert main(["ls", str(moved)]) == 0
    out = capsys.readouterr().out
    assert "no manifest" in out and "run9" in out
    corrupt_file(next(moved.glob("local/node0/run9/l1/ckpt2/rank0.ftk")), -1)
    assert main(["verify", str(moved)]) == 1


def _forge_dtype(path, dtype):
    """Rewrite the first section's dtype in the header and re-sign it (the checksum still matches)."""
    import json

    import xxhash

    from ftkit.storage.format import container as fmt

    blob = path.read_bytes()
    hlen = fmt.PREAMBLE.unpack(blob[:fmt.PREAMBLE.size])[4]
    doc = json.loads(blob[fmt.PREAMBLE.size:fmt.PREAMBLE.size + hlen])
    doc["sections"][0]["dtype"] = dtype
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode().ljust(hlen)
    pre = fmt.PREAMBLE.pack(fmt.MAGIC, fmt.VERSION, 0, 0, hlen, xxhash.xxh3_64_intdigest(raw))
    path.write_bytes(pre + raw + blob[fmt.PREAMBLE.size + hlen:])


def test_forged_header_is_one_damaged_line_never_a_traceback(tmp_path, capsys):
    # A re-signed header with dtype "<f3" (well-formed, no such type) made numpy raise TypeError before.
    root = _make_run(tmp_path)
    bad = make_level(1, root / "local", root / "global", "run9", NODES).path(2, 1)
    _forge_dtype(bad, "<f3")
    assert main(["verify", str(root)]) == 1
    out = capsys.readouterr().out
    damaged = [line for line in out.splitlines() if line.startswith("DAMAGED")]
    assert len(damaged) == 1 and "rank1.ftk" in damaged[0] and "unsupported dtype '<f3'" in damaged[0], out
    (root / "meta" / "manifest.json").unlink()  # without a manifest: the files are checked on their own
    assert main(["verify", str(root)]) == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("DAMAGED")] == \
        [line for line in out.splitlines() if "unsupported dtype" in line]
    assert main(["ls", str(root)]) == 1   # damage found
    assert "1 file(s) have unreadable headers" in capsys.readouterr().out


def test_damaged_manifest_is_one_error_line_for_every_command(tmp_path, capsys):
    root = _make_run(tmp_path)
    nested = '{"format": "ftkit-manifest", "version": 1, "nranks": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (root / "meta" / "manifest.json").write_text(nested)
    for cmd in ("ls", "verify", "rebuild"):
        assert main([cmd, str(root / "meta")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "manifest" in err[0] and "damaged" in err[0], err
