"""ftkit's fault matrix on a 4-host virtual cluster (`make test-cluster`; not in `make test`).

4 hosts x 2 ranks of examples/heat.py under Open MPI's mpirun from the login node, no ``--node-size``,
group_size 2 (node sets {node1, node2} and {node3, node4}). Each level is protected alone (``ckpt_lL = 10``);
the fault comes while every rank waits at step 25; the relaunch must recover checkpoint 20 from that level
and print the failure-free run's digest.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from tools.cluster.vcluster import faults

from ftkit.inject import kill_together

from . import _vc
from ._vc import fault_and_finish, fault_and_relaunch, rank_pids

pytestmark = pytest.mark.skipif(not os.environ.get("FTKIT_CLUSTER_MATRIX"),
                                reason="the cluster matrix runs in `make test-cluster`")


def _crash_ranks(host, script="gated_heat.py"):  # type: ignore[no-untyped-def]
    def fault(job):  # type: ignore[no-untyped-def]
        pids = rank_pids(job.cluster, host, script)
        assert len(pids) == 2, job.output()
        kill_together(pids)  # the runtime may end the other as soon as the first dies
    return fault


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


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


def test_slow_link_is_not_a_failure(cluster4):
    """node2's link limited to 5 Mbit/s from step 25 on (L2 copies cross it): same result, nobody dead."""
    c = cluster4
    fault_and_finish(c, {"ckpt_l2": 10}, lambda job: faults.slow(c, "node2", "5mbit"))


def test_short_stall_is_not_a_failure(cluster4):
    """Every process of node3 stopped for 15 s (under the detector's 60 s): same result, nobody dead."""
    c = cluster4
    stall = threading.Thread(target=faults.stall, args=(c, "node3", 15.0))

    def start(job):  # type: ignore[no-untyped-def]
        stall.start()
        pids = rank_pids(c, "node3")
        deadline = time.monotonic() + 30
        while not all(_state(p) == "T" for p in pids):
            assert time.monotonic() < deadline, "node3 did not stop"
            time.sleep(0.02)

    fault_and_finish(c, {"ckpt_l2": 10}, start, undo=lambda job: stall.join(60))


def _written_since(c, t: float) -> list[Path]:  # type: ignore[no-untyped-def]
    """Files of the shared directory modified after ``t``, but the test's gate and the run lock (rank 0, on
    node1, refreshes its heartbeat until the job ends: the live side of the cut)."""
    from ftkit.storage.runactivity import LOCK_NAME

    return [p for p in c.shared.rglob("*") if p.is_file() and p.stat().st_mtime > t
            and "gate" not in p.parts and p.name != LOCK_NAME]


#: Bound for a partitioned host to be declared lost and the job ended, as `ftkit launch` configures the
#: runtime (PRRTE's TCP keepalive on its daemons' links: 20 + 4 x 5 = 40 s after the last traffic; the MPI
#: detector's 60 s comes after it) + 30 s for the job to end; the test's limit is generous: 150 s.
PARTITION_BOUND = 150.0


def test_partition_declared_dead_within_bound_and_nothing_left(cluster4):
    """node4's link cut at step 25 and left down, under `ftkit launch`: the job must end non-zero within the
    bound (mpirun loses node4's daemon and ends the job; node4's daemon loses mpirun and kills its ranks),
    nothing may run on either side of the cut, and after the link heals nothing may have been written."""
    c = cluster4
    before: dict[str, float] = {}

    def cut(job):  # type: ignore[no-untyped-def]
        faults.partition(c, "node4")
        before["t"] = time.time()

    ref, job = _vc._reference_and_faulted_run(c, {"ckpt_l2": 10}, cut, 2, launch=_vc.ftkit_launch_openmpi)
    try:
        rc = job.finish(PARTITION_BOUND)
        assert rc not in (0, -9), f"partitioned host not declared dead within {PARTITION_BOUND} s:\n" \
                                  f"{job.output()}"
        assert "mpirun lost a host" in job.err.text(), job.output()
        _vc.wait_no_job_processes(c, job)  # both sides of the cut, node4 still cut off
        faults.heal(c, "node4")
        written = _written_since(c, before["t"])
        assert not written, f"files written after the cut: {written}"
    finally:
        job.kill()
        for h in c.hosts:   # whatever the outcome, nothing of the job outlives the test
            faults.heal(c, h)
            if _vc.job_processes(c, h):
                faults.reboot(c, h)


#: Bound for SLURM to end a job step one of whose hosts is cut off: slurmctld declares the node down after
#: SlurmdTimeout (30 s in the virtual cluster; ~51 s seen) and cancels the step (KillWait 5 s).
SLURM_CUT_BOUND = 150.0


def test_srun_link_cut_ends_the_step_and_fences_the_cut_host(slurm4):
    """`srun -N 4 -n 8 --mpi=pmix -K`; node4's link cut at step 25 and left down: slurmctld declares node4
    down ("Node failure") and cancels the step: srun ends non-zero within the bound and nothing of the job
    runs on node1-3. node4 cannot be reached while cut, so its ranks (blocked in their halo exchange with
    the other hosts, unable to commit anything: every commit needs its peers) run on until the link
    heals; then its slurmd, back in touch with slurmctld, kills them (the job is over). No file may have
    been written after the cut, on either side."""
    c = slurm4
    before: dict[str, float] = {}

    def cut(job):  # type: ignore[no-untyped-def]
        faults.partition(c, "node4")
        before["t"] = time.time()

    ref, job = _vc._reference_and_faulted_run(c, {"ckpt_l2": 10}, cut, 2, launch=_vc.srun_launch)
    try:
        rc = job.finish(SLURM_CUT_BOUND)
        assert rc not in (0, -9), f"the step did not end within {SLURM_CUT_BOUND} s:\n{job.output()}"
        assert "digest" not in job.out.text(), job.output()
        _vc.wait_no_job_processes(c, job, hosts=["node1", "node2", "node3"])
        faults.heal(c, "node4")
        _vc.wait_no_job_processes(c, job, timeout=120.0, hosts=["node4"])
        written = _written_since(c, before["t"])
        assert not written, f"files written after the cut: {written}"
    finally:
        job.kill()
        for h in c.hosts:
            faults.heal(c, h)
            if _vc.job_processes(c, h):
                faults.reboot(c, h)


def test_srun_host_poweroff_relaunch_recovers_from_l2(slurm4):
    """SLURM: `srun -N 4 -n 8 --mpi=pmix` (slurmd per host); node2 powered off at step 25 (its slurmd and
    slurmstepd with it): the step ends, node2 reboots (slurmd again, back in service), the relaunch under
    srun recovers from L2 bit for bit."""
    out = fault_and_relaunch(slurm4, {"ckpt_l2": 10}, _poweroff("node2"), launch=_vc.srun_launch)
    assert "from level 2 at step 20" in out, out


def test_ftkit_launch_srun_in_salloc_host_poweroff_relaunch_recovers_from_l2(slurm4):
    """`salloc -N 4` + `ftkit launch --launcher srun -n 8` (srun -K: the step ends when node2 dies); node2
    powered off at step 25; the relaunch (a new allocation) recovers from L2 bit for bit."""
    out = fault_and_relaunch(slurm4, {"ckpt_l2": 10}, _poweroff("node2"), launch=_vc.salloc_ftkit_launch)
    assert "from level 2 at step 20" in out, out


@pytest.mark.parametrize("level, hosts, launch", [
    (2, ("node2",), _vc.mpich_launch),
    (3, ("node2", "node4"), _vc.mpich_launch),
    (2, ("node2",), _vc.ftkit_launch_mpich),
], ids=["L2-mpiexec", "L3-mpiexec", "L2-ftkit-launch"])
def test_mpich_host_poweroff_relaunch_recovers(mpich4, level, hosts, launch):
    """MPICH 4.0 (Hydra over the ssh agent, UCX over TCP; `mpiexec.mpich -hosts`, or `ftkit launch
    --launcher mpich` with Hydra's HYDRA_HOST_FILE/LAUNCHER/LAUNCHER_EXEC/IFACE): hosts powered off at step
    25, Hydra ends the job, the relaunch recovers from L2 (one host) / L3 (two node sets) bit for bit."""
    out = fault_and_relaunch(mpich4, {f"ckpt_l{level}": 10}, _poweroff(*hosts), launch=launch)
    assert f"from level {level} at step 20" in out, out


def _online_run(c, fault):  # type: ignore[no-untyped-def]
    """8 ranks on node1-4 + 2 spare ranks on node5 (spare_ranks = 2, the last two processes) under Open MPI,
    faulted at step 25; return (reference digest, the ended job)."""
    ref, job = _vc._reference_and_faulted_run(c, {"ckpt_l2": 10}, fault, 2, run_hosts=c.all_hosts,
                                              spare_ranks=2)
    job.finish()
    return ref, job


def test_slurm_ulfm_spares_replace_crashed_ranks_online(slurm4):
    """Inside `salloc -N 5`, `ftkit launch --launcher openmpi --ulfm --spares 2 -n 8` (PRRTE's daemons started
    by srun, spares on node5); node2's ranks SIGKILLed at step 25: replaced online, exit 0, bit for bit."""
    from ..checkpoint._util import digest_of

    c = slurm4
    ref, job = _vc._reference_and_faulted_run(
        c, {"ckpt_l2": 10}, _crash_ranks("node2"), 2, run_hosts=c.all_hosts,
        launch=lambda *a: _vc.salloc_ftkit_launch(*a, launcher="openmpi",
                                                  spares=2 if len(a[1]) == 5 else 0))
    assert job.finish() == 0, job.output()
    assert digest_of(job.out.text()) == ref, job.output()
    assert "online recovery: ranks [2, 3] replaced" in job.out.text(), job.output()


#: Why a host's power-off ends the job under Open MPI 5.0 whatever is asked (docs/clusters.md).
_PRRTE_DAEMON_LOSS = (
    "PRRTE 3.0.14 (the Open MPI 5.0 wheel) ends every job when it loses a daemon, whatever the options "
    "(--enable-recovery, state_base_recoverable/continuous tried): errmgr_dvm.c aborts on a daemon in state "
    "COMM_FAILED or FAILED_TO_START without reading them; surviving a lost daemon is in PRRTE's master only "
    "(openpmix/prrte#2443)")


def test_spares_on_spare_host_replace_crashed_ranks_online(cluster4):
    """node2's two ranks SIGKILLed at step 25 (node2's PRRTE daemon lives on): the spares on node5 take their
    places online over TCP; the job ends 0 with the reference digest, no relaunch."""
    from ..checkpoint._util import digest_of

    ref, job = _online_run(cluster4, _crash_ranks("node2"))
    assert job.proc.returncode == 0, job.output()
    assert digest_of(job.out.text()) == ref, job.output()


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=_PRRTE_DAEMON_LOSS)
def test_spares_on_spare_host_online_recovery_after_host_poweroff(cluster4):
    """node2 powered off at step 25 (its daemon with it): the spares should take over online; PRRTE instead
    terminates the job ("A daemon failed to report back" when the ssh session ends, "PRTE has lost
    communication with a remote daemon" when the TCP connection drops first): recovery is a relaunch."""
    from ..checkpoint._util import digest_of

    ref, job = _online_run(cluster4, _poweroff("node2"))
    _vc.wait_no_job_processes(cluster4, job)
    assert job.proc.returncode == 0, job.output()
    assert digest_of(job.out.text()) == ref, job.output()


@pytest.mark.parametrize("level", [4, 2])
def test_elastic_restart_on_three_hosts_after_host_poweroff(cluster4, level):
    """node2 powered off at step 25 and left off: the relaunch on node1, node3, node4 (6 ranks instead of 8)
    reshards checkpoint 20 (from L4 on the shared directory; from L2 partner copies on the hosts' disks) and
    ends bit for bit."""
    out = fault_and_relaunch(cluster4, {f"ckpt_l{level}": 10}, _poweroff("node2"),
                             relaunch_hosts=["node1", "node3", "node4"])
    assert "at step 20" in out and "6 ranks" in out, out


def test_relaunch_on_the_spare_host_after_host_poweroff_recovers_from_l2(cluster4):
    """node2 powered off at step 25 and left off: the relaunch of 8 ranks on node1, node3, node4 and the
    spare node5 renumbers the nodes, so node4's ranks find their files on node3 and node5's on node4 (no
    group can rebuild them by itself); each missing file is sent by the rank whose host holds it, and the
    run ends bit for bit."""
    out = fault_and_relaunch(cluster4, {"ckpt_l2": 10}, _poweroff("node2"),
                             relaunch_hosts=["node1", "node3", "node4", "node5"])
    assert "at step 20" in out, out


def _multiply_with_fault(c, fault):  # type: ignore[no-untyped-def]
    """resilient_pdgemm (128 x 128, 8 SUMMA steps) on 8 ranks of node1-4 under Open MPI, ``fault(job)`` at
    SUMMA step 3 while every rank waits at the gate; return the ended job."""
    gate, store = c.shared / "gate", c.shared / "store"
    gate.mkdir()
    store.mkdir()
    prog = [sys.executable, str(_vc.REPO / "tests" / "cluster" / "gated_multiply.py"), "--store", str(store),
            "--gate-dir", str(gate)]
    job = _vc.Job(c, c.hosts, 2, prog, c.shared)
    try:
        job.wait_for("every rank reached the gate", lambda: len(list(gate.glob("held.*"))) == 8)
        fault(job)
        (gate / "open").touch()
        assert job.finish() != -9, f"the multiply did not end:\n{job.output()}"
        _vc.wait_no_job_processes(c, job)
    finally:
        job.kill()
    return job


def test_resilient_pdgemm_survives_a_hosts_ranks_crashing_mid_multiply(cluster4):
    """node2's two ranks SIGKILLed at SUMMA step 3 (its daemon lives on): the six survivors on node1, 3, 4
    read the dead ranks' inputs from the shared store, recompute their part and the product is right."""
    job = _multiply_with_fault(cluster4, _crash_ranks("node2", "gated_multiply.py"))
    out = job.out.text()
    assert "failed [2, 3]" in out and "RESULT ok=True" in out, job.output()


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=_PRRTE_DAEMON_LOSS)
def test_resilient_pdgemm_survives_a_host_poweroff_mid_multiply(cluster4):
    """node2 powered off at SUMMA step 3: PRRTE terminates the job with the lost daemon, so the survivors
    never get to finish the multiply."""
    job = _multiply_with_fault(cluster4, _poweroff("node2"))
    assert "RESULT ok=True" in job.out.text(), job.output()


def test_mpich_online_recovery_is_refused_clearly(mpich4):
    """MPICH 4.0 has no ULFM (no MPIX_Comm_revoke/shrink/agree that survive a dead rank): with spare_ranks = 2
    on the spare host every rank must fail at the start with ULFMUnavailable (no hang, nothing left); under
    MPICH a lost host is recovered by a relaunch (test_mpich_host_poweroff_relaunch_recovers)."""
    c = mpich4
    cfg = _vc.heat_config(c, "online", ckpt_l2=10, spare_ranks=2)
    rc, out = _vc.run(c, c.all_hosts, 2, _vc.heat(*_vc._ARGS), cfg.parent, launch=_vc.mpich_launch)
    assert rc not in (0, -9), out
    # Every rank that reports ends the job with ULFMUnavailable (spares too). Not a count of 10: Hydra kills
    # the ranks left as soon as the first one ends (SIGKILL), so a slow rank may go before it prints.
    ends = re.findall(r"^ftkit: rank (\d+) ends the job \(.*?\): (\w+);", out, re.M)
    assert ends and {e for _, e in ends} == {"ULFMUnavailable"} and "digest" not in out, out
    _vc.wait_no_job_processes(c, out)  # Hydra's proxies end the ranks left after mpiexec returned
