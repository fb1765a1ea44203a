"""Issue 17, set-up: spare assignment, the launch command with --spares, the spare_ranks setting, and the
refusals at start (no ULFM; spares with dedicated heads) on every rank."""

from __future__ import annotations

import sys

import pytest

from ftkit import Config
from ftkit.checkpoint.online.spares import with_spares
from ftkit.errors import ConfigError, LaunchError
from ftkit.failure.replace import SPARE, plan_roles
from ftkit.launch import SPARES_ENV, build_launch_command

from ..conftest import REPO


def test_each_dead_rank_gets_the_first_idle_spare_in_world_order():
    # world positions 0..5: app ranks 0, 2, 3 alive (1 dead), spares at 3 and 5; rank 4 dead too
    replaced, missing, idle = plan_roles([0, 2, 3, SPARE, SPARE, 5], 6)
    assert replaced == {1: 3, 4: 4} and missing == () and idle == ()
    replaced, missing, idle = plan_roles([0, SPARE, 3, SPARE], 4)
    assert replaced == {1: 1, 2: 3} and missing == () and idle == ()
    assert plan_roles([0, 1, SPARE, SPARE], 3) == ({2: 2}, (), (3,))


def test_more_dead_ranks_than_spares_leaves_the_rest_missing():
    assert plan_roles([0, SPARE], 4) == ({1: 1}, (2, 3), ())


def test_launch_with_spares_starts_them_after_the_ranks_and_tells_the_ranks(monkeypatch):
    monkeypatch.delenv("FTKIT_LAUNCHER", raising=False)
    name, cmd = build_launch_command(8, [sys.executable, "app.py"], launcher="openmpi", node_size=2, spares=2,
                                     ulfm=True)
    assert cmd[cmd.index("-n") + 1] == "10"
    assert f"{SPARES_ENV}=2" in cmd and "FTKIT_NODE_SIZE=2" in cmd and "--with-ft" in cmd
    with pytest.raises(LaunchError, match="node-size 3"):  # node_size divides the application ranks
        build_launch_command(8, [sys.executable, "app.py"], launcher="openmpi", node_size=3, spares=1)


def test_spare_ranks_from_argument_then_launch_then_config(monkeypatch):
    cfg = Config(spare_ranks=1)
    monkeypatch.delenv(SPARES_ENV, raising=False)
    assert with_spares(cfg, None).spare_ranks == 1
    monkeypatch.setenv(SPARES_ENV, "3")
    assert with_spares(cfg, None).spare_ranks == 3
    assert with_spares(cfg, 2).spare_ranks == 2
    monkeypatch.setenv(SPARES_ENV, "two")
    with pytest.raises(ConfigError, match="FTKIT_SPARE_RANKS"):
        with_spares(cfg, None)
    assert Config.from_string("[ftkit]\nspare_ranks = 4\n").spare_ranks == 4
    with pytest.raises(ConfigError, match="spare_ranks"):
        Config(spare_ranks=-1)


PROGRAM = """
import sys
import ftkit
from ftkit import Config
from mpi4py import MPI
base = dict(ckpt_dir=sys.argv[1] + "/l", glbl_dir=sys.argv[1] + "/g", meta_dir=sys.argv[1] + "/m")
for name, cfg in (("head", Config(head=1, node_size=2, **base)), ("plain", Config(**base))):
    try:
        ftkit.Checkpointer(cfg, spare_ranks=1)
        print(f"{name} rank {MPI.COMM_WORLD.rank}: accepted", flush=True)
    except ftkit.FtkitError as exc:
        print(f"{name} rank {MPI.COMM_WORLD.rank}: {type(exc).__name__}: {exc}", flush=True)
"""


@pytest.mark.mpi
def test_spares_are_refused_at_start_without_ulfm_and_with_heads(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    from ftkit.launch import run_mpi

    r = run_mpi(2, [sys.executable, str(prog), str(tmp_path)], timeout=120, ulfm=False, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert f"head rank {rank}: ConfigError" in r.stdout and "head = 1" in r.stdout, r.stdout
        line = next(x for x in r.stdout.splitlines() if x.startswith(f"plain rank {rank}:"))
        assert "ULFMUnavailable" in line and "spare_ranks = 1" in line and "To enable it" in line, line
    assert not (tmp_path / "m").exists() and not (tmp_path / "l").exists()  # refused before any directory
