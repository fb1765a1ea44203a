"""L2 partner copies: streamed ring copy, rebuild after file/node loss, clear refusal when unrecoverable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAM = Path(__file__).parents[1] / "programs" / "levels_partner.py"


@pytest.mark.parametrize("scenario, lost", [("node1", [1]), ("corrupt2", [2]), ("node1~off", [1])])
def test_partner_rebuild_restores_bytes(tmp_path, scenario, lost):
    res = run_python(4, PROGRAM, str(tmp_path), scenario).check()
    oks = [line for line in res.stdout.splitlines() if line.startswith("OK ")]
    assert len(oks) == 4, res.stdout + res.stderr
    assert all(f"lost={lost}" in line for line in oks)


@pytest.mark.parametrize("scenario", ["ring12", "ring12~off"])
def test_partner_neighbour_loss_is_refused_on_every_member(tmp_path, scenario):
    res = run_python(4, PROGRAM, str(tmp_path), scenario).check()
    errs = [line for line in res.stdout.splitlines() if line.startswith("RECOVERYERROR ")]
    assert len(errs) == 4, res.stdout + res.stderr
    assert all("rank 1 on node 1 lost its file and its partner copy on rank 2 on node 2" in e for e in errs)


def test_encoded_level_paths_and_verify(tmp_path):
    from ftkit.errors import CheckpointNotFoundError
    from ftkit.storage.levels import make_level

    lv = make_level(3, tmp_path / "local", tmp_path / "global", "run1", [0, 0, 1, 1])
    assert lv.path(5, 3) == tmp_path / "local" / "node1" / "run1" / "l3" / "ckpt5" / "rank3.parity"
    with pytest.raises(CheckpointNotFoundError):
        lv.verify(5, 3)


def test_full_disk_during_partner_copy_fails_on_every_member_with_the_cause(tmp_path, small_disk):
    # Member 1's copy goes to a 256 KiB disk; the files are 1 MiB, sent in 64 KiB chunks: the disk fills up
    # in the middle of the transfer. Before the fix the receiver left the loop and its sender waited forever.
    disk = small_disk(256 << 10)
    res = run_python(4, PROGRAM.with_name("partner_enospc.py"), str(tmp_path / "run"), str(disk),
                     str(1 << 20), timeout=120).check()
    errs = [line for line in res.stdout.splitlines() if line.startswith("STORAGEERROR ")]
    assert len(errs) == 4, res.stdout + res.stderr
    assert all("No space left on device" in e and "rank 1 on node 1" in e for e in errs), errs
    assert sorted(line for line in res.stdout.splitlines() if line.startswith("DONE ")) == \
        [f"DONE {r}" for r in range(4)]
    assert list(disk.iterdir()) == []  # no partial copy, no temporary file left on the full disk
    for r in (0, 2, 3):  # the other copies completed: the group's files are all there, byte for byte
        src = (r - 1) % 4
        assert (tmp_path / "run" / f"node{r}" / "copy.bin").read_bytes() == \
            (tmp_path / "run" / f"node{src}" / "data.bin").read_bytes()


def test_missing_data_file_fails_the_ring_on_every_member_without_waiting(tmp_path):
    # Member 2 has no file: before, it raised at once while member 1 kept streaming to it (a hang until
    # the launcher's timeout for files larger than MPI's eager limit).
    res = run_python(4, PROGRAM.with_name("partner_enospc.py"), str(tmp_path / "run"), str(tmp_path / "disk"),
                     str(1 << 20), "missing", timeout=120).check()
    errs = [line for line in res.stdout.splitlines() if line.startswith("STORAGEERROR ")]
    assert len(errs) == 4, res.stdout + res.stderr
    assert all("data.bin: file is missing" in e and "rank 2 on node 2" in e for e in errs), errs
