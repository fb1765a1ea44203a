"""L2 partner copies: streamed ring copy, rebuild after file/node loss, clear refusal when unrecoverable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import run_python
from .test_levels import LevelTests

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


class TestPartnerLevel(LevelTests):
    """L2 storage passes the storage-level conformance kit (a partner copy is a checkpoint file)."""

    level = 2

    def test_copies_are_held_on_the_holders_node(self, tmp_path):
        lv = self.make(tmp_path)
        assert lv.path(3, 2) == tmp_path / "local" / "node1" / "run1" / "l2" / "ckpt3" / "rank2.ftk"
        assert not lv.supports_read


def test_encoded_level_paths_and_verify(tmp_path):
    from ftkit.errors import CheckpointNotFoundError
    from ftkit.storage.levels import make_level

    lv = make_level(3, tmp_path / "local", tmp_path / "global", "run1", [0, 0, 1, 1])
    assert lv.path(5, 3) == tmp_path / "local" / "node1" / "run1" / "l3" / "ckpt5" / "rank3.parity"
    with pytest.raises(CheckpointNotFoundError):
        lv.verify(5, 3)
