"""``ftkit launch --restarts 3`` on the 4-host virtual cluster (the cluster matrix, `make test-cluster`).

8 ranks of examples/heat.py (2 per host), L2 every 10 steps, group_size 2; ``relaunch_heat.py`` holds every
rank of whichever run is current at steps 15 and 30. node2 is powered off at step 15 of the first run, node3
at step 30 of the first relaunch: the command must end 0 with the failure-free run's digest, each relaunch
line naming the hosts excluded and the checkpoint it recovers; with ``--spare-nodes 1`` node5 takes node2's
place (the first relaunch runs on 4 hosts again). Under Open MPI (``--host``), MPICH (``-hosts``) and SLURM
(``srun --nodelist/--exclude`` inside ``salloc --no-kill``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from tools.cluster.vcluster import faults, mpich

from ._vc import _ARGS, Job, heat, heat_config, run

pytestmark = pytest.mark.skipif(not os.environ.get("FTKIT_CLUSTER_MATRIX"),
                                reason="the cluster matrix runs in `make test-cluster`")

RELAUNCH_HEAT = Path(__file__).with_name("relaunch_heat.py")
FTKIT = str(Path(sys.executable).with_name("ftkit"))
WHOLE_RUN = 900.0  # bound for the three runs of one command


def _launch_opts(spare_nodes: int) -> list[str]:
    return ["--restarts", "3", "--spare-nodes", str(spare_nodes), "--config", "ftkit.ini"]


def openmpi_restarts(spare_nodes: int):  # type: ignore[no-untyped-def]
    def launch(c, hosts: Sequence[str], per_host: int, program: Sequence[str], env):  # type: ignore[no-untyped-def]
        n = (len(hosts) - spare_nodes) * per_host
        return [FTKIT, "launch", "--launcher", "openmpi", "--hosts", ",".join(hosts), "-n", str(n),
                *_launch_opts(spare_nodes), "--", *program]
    return launch


def mpich_restarts(spare_nodes: int):  # type: ignore[no-untyped-def]
    def launch(c, hosts: Sequence[str], per_host: int, program: Sequence[str], env):  # type: ignore[no-untyped-def]
        n = (len(hosts) - spare_nodes) * per_host
        hydra = {k: v for k, v in mpich.hydra_env(c, hosts, per_host).items() if k != "HYDRA_HOST_FILE"}
        return ["env", *(f"{k}={v}" for k, v in hydra.items()), FTKIT, "launch", "--launcher", "mpich",
                "--hosts", ",".join(hosts), "-n", str(n), *_launch_opts(spare_nodes), "--", *program]
    return launch


def srun_restarts(spare_nodes: int):  # type: ignore[no-untyped-def]
    def launch(c, hosts: Sequence[str], per_host: int, program: Sequence[str], env):  # type: ignore[no-untyped-def]
        n = (len(hosts) - spare_nodes) * per_host
        # --no-kill: the allocation survives the loss of one of its nodes (the relaunch runs in it).
        return ["env", "-u", "PRTE_MCA_plm_ssh_agent", "salloc", "-p", "all", "--no-kill", "-N",
                str(len(hosts)), "-n", str(len(hosts) * per_host), "-w", ",".join(hosts), "--", FTKIT,
                "launch", "--launcher", "srun", "-n", str(n), *_launch_opts(spare_nodes), "--", *program]
    return launch


def _two_hosts_lost(c, launch, spare_nodes: int) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Reference digest, then the faulted command's output (asserted: rc 0, same digest)."""
    from ..checkpoint._util import digest_of

    ref_cfg = heat_config(c, "ref", ckpt_l2=10)
    rc, out = run(c, c.hosts, 2, heat(*_ARGS), ref_cfg.parent)
    assert rc == 0, out
    ref = digest_of(out)
    cfg = heat_config(c, "run", ckpt_l2=10)
    gate = c.shared / "gate"
    gate.mkdir()
    hosts = c.hosts + c.spares[:spare_nodes]
    program = [sys.executable, str(RELAUNCH_HEAT), *_ARGS, "--gates", "15,30", "--gate-dir", str(gate)]
    job = Job(c, hosts, 2, program, cfg.parent, launch=launch)
    try:
        job.wait_for("8 ranks held at step 15", lambda: len(list(gate.glob("held.15.*"))) == 8)
        faults.poweroff(c, "node2")
        (gate / "open.15").touch()
        second = 8 if spare_nodes else 6
        job.wait_for(f"{second} ranks of the relaunch held at step 30",
                     lambda: len(list(gate.glob("held.30.*"))) == second, timeout=WHOLE_RUN)
        faults.poweroff(c, "node3")
        (gate / "open.30").touch()
        rc = job.finish(WHOLE_RUN)
    finally:
        job.kill()
    assert rc == 0, job.output()
    assert digest_of(job.out.text()) == ref, job.output()
    return ref, job.err.text()


def _relaunch_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("ftkit launch: relaunch ")]


@pytest.mark.parametrize("make_launch", [openmpi_restarts, mpich_restarts], ids=["openmpi", "mpich"])
def test_two_hosts_powered_off_excluded_and_run_completes(request, cluster4, make_launch):
    if make_launch is mpich_restarts:
        request.getfixturevalue("mpich4")
    _, err = _two_hosts_lost(cluster4, make_launch(0), 0)
    first, second = _relaunch_lines(err)
    assert "relaunch 1/3" in first and "on 3 host(s) node1,node3,node4" in first, err
    assert "excluded: node2 (no answer" in first and "recovering checkpoint" in first, err
    assert "relaunch 2/3" in second and "on 2 host(s) node1,node4" in second, err
    assert "node2 (no answer" in second and "node3 (no answer" in second, err
    assert "the run completed after 2 relaunch(es)" in err


def test_spare_host_takes_the_place_of_the_lost_one(cluster4):
    _, err = _two_hosts_lost(cluster4, openmpi_restarts(1), 1)
    first, second = _relaunch_lines(err)
    assert "on 4 host(s) node1,node5,node3,node4" in first and "excluded: node2 (" in first, err
    assert "on 3 host(s) node1,node5,node4" in second, err


def test_srun_in_allocation_excludes_the_lost_hosts(slurm4):
    _, err = _two_hosts_lost(slurm4, srun_restarts(1), 1)
    first, second = _relaunch_lines(err)
    assert "on 4 host(s) node1,node5,node3,node4" in first and "excluded: node2 (" in first, err
    assert "on 3 host(s) node1,node5,node4" in second, err
