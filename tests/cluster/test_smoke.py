"""Smoke slice of the virtual-cluster matrix (in `make test`): a real host lost mid-run, L2 recovery.

Two hosts (network namespaces, TCP between them, a node-local disk each), 4 ranks of examples/heat.py under
Open MPI's mpirun started from the login node, no ``--node-size``: ftkit sees two real nodes. Host 2 is
powered off (every process SIGKILLed, its disk discarded) while every rank waits between two checkpoints,
then rebooted with an empty disk; the relaunch must recover from level 2 (the partner copies on host 1) and
end bit-identical to the failure-free run.
"""

from __future__ import annotations

from pathlib import Path

from tools.cluster.vcluster import faults

from ..checkpoint._util import digest_of, write_config
from ._vc import Job, heat, run

STEPS, SIZE, GATE = 40, 48, 25


def _config(c, name: str) -> Path:  # type: ignore[no-untyped-def]
    d = c.shared / name
    return write_config(d, ckpt_dir=c.local / name, glbl_dir=d / "global", meta_dir=d / "meta", group_size=2,
                        ckpt_l2=10, failure_timeout=60)


def test_host_poweroff_then_relaunch_recovers_from_l2(cluster2):
    c = cluster2
    args = ("--steps", str(STEPS), "--size", str(SIZE), "--config", "ftkit.ini")
    ref_cfg = _config(c, "ref")
    rc, out = run(c, c.hosts, 2, heat(*args), ref_cfg.parent)
    assert rc == 0, out
    ref = digest_of(out)
    assert ref, out
    # ftkit saw two real nodes: rank-local files on each host's own disk, none on the login node's
    for h in c.hosts:
        assert list((c.disk(h) / "ref").rglob("*")), f"nothing on {h}'s local disk"
    assert not (c.local / "ref").exists()

    cfg = _config(c, "run")
    gate = c.shared / "gate"
    gate.mkdir()
    job = Job(c, c.hosts, 2, heat(*args, "--gate-at", str(GATE), "--gate-dir", str(gate)), cfg.parent)
    job.wait_for("every rank reached the gate", lambda: len(list(gate.glob("held.*"))) == 4)
    assert faults.poweroff(c, "node2") >= 3  # the holder, the daemon, two ranks
    (gate / "open").touch()  # host 1's ranks go on into the halo exchange with the dead host
    rc = job.finish()
    assert rc != 0, job.output()
    assert "digest" not in job.out.text(), job.output()
    assert c.processes("node1") == [c.holder("node1")], "ranks left running on the surviving host"

    faults.reboot(c, "node2")
    assert not list(c.disk("node2").iterdir()) or [p.name for p in c.disk("node2").iterdir()] == ["tmp"]
    rc, out = run(c, c.hosts, 2, heat(*args), cfg.parent)
    assert rc == 0, out
    assert "from level 2 at step 20" in out, out
    assert digest_of(out) == ref, out
