"""ftkit's fault matrix on a 4-host virtual cluster (`make test-cluster`; not in `make test`).

4 hosts x 2 ranks of examples/heat.py under Open MPI's mpirun from the login node, no ``--node-size``,
group_size 2 (node sets {node1, node2} and {node3, node4}). Each level is protected alone (``ckpt_lL = 10``);
the fault comes while every rank waits at step 25; the relaunch must recover checkpoint 20 from that level
and print the failure-free run's digest.
"""

from __future__ import annotations

import os
import signal

import pytest

from tools.cluster.vcluster import faults

from ._vc import fault_and_relaunch, rank_pids

pytestmark = pytest.mark.skipif(not os.environ.get("FTKIT_CLUSTER_MATRIX"),
                                reason="the cluster matrix runs in `make test-cluster` (FTKIT_CLUSTER_MATRIX=1)")


def _crash_ranks(host):  # type: ignore[no-untyped-def]
    def fault(job):  # type: ignore[no-untyped-def]
        pids = rank_pids(job.cluster, host)
        assert len(pids) == 2, job.output()
        for p in pids:
            os.kill(p, signal.SIGKILL)
    return fault


def _poweroff(*hosts):  # type: ignore[no-untyped-def]
    def fault(job):  # type: ignore[no-untyped-def]
        for h in hosts:
            faults.poweroff(job.cluster, h)
    return fault


@pytest.mark.parametrize("level, fault, what", [
    (1, _crash_ranks("node2"), "node2's ranks crash (disks intact)"),
    (2, _poweroff("node2"), "node2 powered off"),
    (3, _poweroff("node2", "node4"), "node2 and node4 (two node sets) powered off"),
    (4, _poweroff("node1", "node2", "node3", "node4"), "every host powered off: every local disk lost"),
])
def test_relaunch_recovers_from_level(cluster4, level, fault, what):
    out = fault_and_relaunch(cluster4, {f"ckpt_l{level}": 10}, fault)
    assert f"from level {level} at step 20" in out, f"{what}:\n{out}"
