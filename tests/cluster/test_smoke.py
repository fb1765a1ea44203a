"""Smoke slice of the virtual-cluster matrix (in `make test`): a real host lost mid-run, L2 recovery.

Two hosts (network namespaces, TCP between them, a node-local disk each), 4 ranks of examples/heat.py under
Open MPI's mpirun started from the login node, no ``--node-size``: ftkit sees two real nodes. Host 2 is
powered off (every process SIGKILLed, its disk discarded) while every rank waits between two checkpoints,
then rebooted with an empty disk; the relaunch must recover from level 2 (the partner copies on host 1) and
end bit-identical to the failure-free run.
"""

from __future__ import annotations

from tools.cluster.vcluster import faults

from ._vc import fault_and_relaunch


def test_host_poweroff_then_relaunch_recovers_from_l2(cluster2):
    c = cluster2

    def poweroff(job):  # type: ignore[no-untyped-def]
        # ftkit saw two real nodes: checkpoint files on each host's own disk, none on the login node's
        for h in c.hosts:
            assert [p for p in (c.disk(h) / "run").rglob("*") if p.is_file()], f"no checkpoint file on {h}"
        assert not (c.local / "run").exists()
        assert faults.poweroff(c, "node2") >= 3  # the holder, the daemon, two ranks

    out = fault_and_relaunch(c, {"ckpt_l2": 10}, poweroff)
    assert "from level 2 at step 20" in out, out
