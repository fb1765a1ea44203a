"""Helpers for the virtual-cluster tests: a cluster per test, MPI jobs started from its login node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from tools.cluster.vcluster import Cluster, ClusterUnavailable, down, faults, mpich, slurm, up
from tools.cluster.vcluster._sys import check_capable

from ftkit._jobproc import PipeReader
from ftkit.launch import build_mpirun_command

from ..conftest import REPO

HEAT = REPO / "tests" / "cluster" / "gated_heat.py"
JOB_TIMEOUT = float(os.environ.get("FTKIT_TEST_MPI_TIMEOUT", "180"))


def cluster_or_skip(hosts: int, spares: int = 0, disk_mb: int = 64):  # type: ignore[no-untyped-def]
    """Yield a new virtual cluster (own prefix and state directory); always removed afterwards."""
    try:
        check_capable()
    except ClusterUnavailable as exc:
        pytest.skip(f"no virtual cluster on this machine: {exc}")
    tag = f"ft{os.getpid() % 100000}"
    base = Path(f"/var/tmp/ftkit-vcluster-{tag}")
    down(base, tag)  # what a killed earlier run of this pid left, if anything
    try:
        c = up(hosts, spares, disk_mb, base, prefix=tag)
        yield c
    finally:
        removed = down(base, tag)
        # Each host that is up holds one process (its holder); anything more was left by a job.
        left = [r for r in removed if r.startswith("killed") and int(r.split()[1]) > 1]
        assert not left, f"processes were left running on the hosts: {left}"


#: Builds the launcher's command line for ``program`` on ``per_host`` ranks on each of ``hosts`` (run on the
#: login node), with ``env`` exported to the ranks.
Launch = Callable[[Cluster, Sequence[str], int, Sequence[str], "dict[str, str] | None"], list[str]]


def mpirun_launch(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                  env: dict[str, str] | None) -> list[str]:
    """Open MPI's ``mpirun --host node1:2,...`` as ``ftkit launch`` builds it (ULFM on), with a private
    runtime session directory under the cluster's state directory (removed by ``down``): the login node's
    ``/tmp`` is the machine's, where a killed mpirun's stale session directory made a later one fail at
    start ("The PMIx server's listener thread failed to start", 1 case in 32 of a matrix run)."""
    (c.base / "sessions").mkdir(exist_ok=True)
    session = tempfile.mkdtemp(prefix="job-", dir=c.base / "sessions")
    cmd = build_mpirun_command(len(hosts) * per_host, list(program), env=env, session_base=session)
    cmd[1:1] = ["--host", c.hostlist(list(hosts), per_host)]
    return cmd


def srun_launch(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                env: dict[str, str] | None) -> list[str]:
    """SLURM's ``srun -N <hosts> -n <ranks> --mpi=pmix -K`` on exactly ``hosts`` (``vcluster slurm-up``)."""
    exports = ",".join(["ALL", *(f"{k}={v}" for k, v in (env or {}).items())])
    return ["srun", "-N", str(len(hosts)), "-n", str(len(hosts) * per_host), "-w", ",".join(hosts),
            "--mpi=pmix", "-K", "-O", f"--export={exports}", *program]


def mpich_launch(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                 env: dict[str, str] | None) -> list[str]:
    """Debian's MPICH: Hydra's ``mpiexec.mpich`` through the cluster's ssh agent, the venv's mpi4py on it."""
    return mpich.command(c, hosts, per_host, program, env)


def ftkit_launch_mpich(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                       env: dict[str, str] | None) -> list[str]:
    """``ftkit launch --launcher mpich -n N``, Hydra's host file, agent and interface in the environment."""
    ftkit = str(Path(sys.executable).with_name("ftkit"))
    exported = {**mpich.hydra_env(c, hosts, per_host), **(env or {})}
    return ["env", *(f"{k}={v}" for k, v in exported.items()), ftkit, "launch", "--launcher", "mpich", "-n",
            str(len(hosts) * per_host), "--", *program]


def ftkit_launch_openmpi(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                         env: dict[str, str] | None) -> list[str]:
    """``ftkit launch --launcher openmpi -n N`` (ULFM on, the detectors as it sets them) on ``hosts``, named
    in a host file given to PRRTE through the environment (``PRTE_MCA_prte_default_hostfile``)."""
    ftkit = str(Path(sys.executable).with_name("ftkit"))
    hostfile = c.base / f"hostfile.{'-'.join(hosts)}.{per_host}"
    hostfile.write_text("".join(f"{h} slots={per_host}\n" for h in hosts))
    return ["env", f"PRTE_MCA_prte_default_hostfile={hostfile}",
            *(f"{k}={v}" for k, v in (env or {}).items()), ftkit, "launch", "--launcher", "openmpi",
            "-n", str(len(hosts) * per_host), "--", *program]


def salloc_ftkit_launch(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                        env: dict[str, str] | None, launcher: str = "srun", spares: int = 0) -> list[str]:
    """``salloc -N <hosts> -w <hosts> ftkit launch --launcher LAUNCHER -n <ranks> -- PROGRAM`` (a batch user's
    way); ``openmpi`` adds ``--ulfm`` (PRRTE starts its daemons with srun) and ``--spares`` (the last
    processes of the allocation)."""
    ftkit = str(Path(sys.executable).with_name("ftkit"))
    n = len(hosts) * per_host
    opts = ["--ulfm", "--spares", str(spares)] if launcher == "openmpi" else []
    return ["env", "-u", "PRTE_MCA_plm_ssh_agent", *(f"{k}={v}" for k, v in (env or {}).items()), "salloc",
            "-p", "all", "-N", str(len(hosts)), "-n", str(n), "-w", ",".join(hosts), "--", ftkit, "launch",
            "--launcher", launcher, *opts, "-n", str(n - spares), "--", *program]


class Job:
    """An MPI job started on the login node (Open MPI's mpirun unless ``launch`` says otherwise); output
    read as it comes."""

    def __init__(self, c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
                 cwd: Path, env: dict[str, str] | None = None, launch: Launch | None = None) -> None:
        self.cluster = c
        self.cmd = c.login((launch or mpirun_launch)(c, hosts, per_host, program, env), cwd=cwd)
        self.proc = subprocess.Popen(self.cmd, cwd=cwd, start_new_session=True, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **c.mpi_env(), **slurm.env(c)})
        self.out, self.err = PipeReader(self.proc.stdout), PipeReader(self.proc.stderr)

    def wait_for(self, what: str, cond: Callable[[], bool], timeout: float = JOB_TIMEOUT) -> None:
        """Wait until ``cond()``; fail (with the job's output) if the job ends first or on timeout."""
        deadline = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"job {'ended' if self.proc.poll() is not None else 'timed out'} "
                                     f"before {what}:\n{self.output()}")
            time.sleep(0.02)

    def finish(self, timeout: float = JOB_TIMEOUT) -> int:
        """Wait (bounded) for the launcher to exit; return its exit code (-9 if it had to be killed)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def output(self) -> str:
        return f"$ {' '.join(self.cmd)}\n--- stdout ---\n{self.out.text()}\n--- stderr ---\n{self.err.text()}"


def run(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str], cwd: Path,
        timeout: float = JOB_TIMEOUT, launch: Launch | None = None) -> tuple[int, str]:
    """Run a job to its end; return (exit code, stdout + stderr)."""
    job = Job(c, hosts, per_host, program, cwd, launch=launch)
    rc = job.finish(timeout)
    return rc, job.output()


def heat(*args: str) -> list[str]:
    return [sys.executable, str(HEAT), *args]


STEPS, SIZE, GATE = 40, 48, 25


def heat_config(c: Cluster, name: str, **keys: object) -> Path:
    """A heat config under the shared directory: local checkpoints on the hosts' disks (no node_size)."""
    from ..checkpoint._util import write_config

    d = c.shared / name
    keys = {"group_size": 2, "failure_timeout": 60, **keys}
    return write_config(d, ckpt_dir=c.local / name, glbl_dir=d / "global", meta_dir=d / "meta", **keys)


def fault_and_relaunch(c: Cluster, levels: dict[str, int], fault: Callable[[Job], None],
                       per_host: int = 2, launch: Launch | None = None,
                       relaunch_hosts: Sequence[str] | None = None, **keys: object) -> str:
    """Reference run, run faulted by ``fault(job)`` at step GATE, relaunch; return the relaunch's output.

    ``fault`` is called while every rank waits at the gate (checkpoints of steps < GATE committed); the gate
    then opens and the faulted run must end without completing. The relaunch must print the reference digest
    (asserted here). ``relaunch_hosts`` (default: every compute host, the lost ones rebooted empty) is where
    the relaunch runs (``per_host`` ranks each: an elastic restart when fewer); ``keys`` go to the faulted
    run's config.
    """
    from ..checkpoint._util import digest_of

    ref, job = _reference_and_faulted_run(c, levels, fault, per_host, launch=launch, **keys)
    rc = job.finish()
    assert rc != -9, f"the faulted run did not end:\n{job.output()}"
    # Not `rc != 0`: when PRRTE notices the lost daemon's TCP connection before its ssh agent's exit, it
    # prints "PRTE has lost communication with a remote daemon ... will terminate the job" and mpirun exits 0
    # (Open MPI 5.0 wheel). The run must not have completed, whatever mpirun says.
    assert "digest" not in job.out.text(), job.output()
    wait_no_job_processes(c, job)
    hosts = list(relaunch_hosts or c.hosts)
    for h in hosts:
        if not c.is_up(h):
            faults.reboot(c, h)
    if slurm.running(c):
        slurm.wait_idle(c, hosts)
    rc, out = run(c, hosts, per_host, heat(*_ARGS), c.shared / "run", launch=launch)
    assert rc == 0, out
    assert digest_of(out) == ref, out
    return out


_ARGS = ("--steps", str(STEPS), "--size", str(SIZE), "--config", "ftkit.ini")


def _reference_and_faulted_run(c: Cluster, levels: dict[str, int], fault: Callable[[Job], None],
                               per_host: int, env: dict[str, str] | None = None,
                               launch: Launch | None = None, run_hosts: Sequence[str] | None = None,
                               **keys: object) -> tuple[str, Job]:
    """The failure-free run's digest (on the compute hosts), and the run faulted at the gate (its gate open
    again) on ``run_hosts`` (default: the compute hosts; processes beyond them are spares that never reach
    the gate), its config with ``levels`` and ``keys``."""
    from ..checkpoint._util import digest_of

    ref_cfg = heat_config(c, "ref", **levels)
    rc, out = run(c, c.hosts, per_host, heat(*_ARGS), ref_cfg.parent, launch=launch)
    assert rc == 0, out
    ref = digest_of(out)
    assert ref, out
    cfg = heat_config(c, "run", **levels, **keys)
    gate = c.shared / "gate"
    gate.mkdir()
    gated = heat(*_ARGS, "--gate-at", str(GATE), "--gate-dir", str(gate))
    job = Job(c, run_hosts or c.hosts, per_host, gated, cfg.parent, env=env, launch=launch)
    nranks = len(c.hosts) * per_host
    job.wait_for("every rank reached the gate", lambda: len(list(gate.glob("held.*"))) == nranks)
    fault(job)
    (gate / "open").touch()  # the ranks go on into the halo exchange (with the lost ranks, if any)
    return ref, job


def fault_and_finish(c: Cluster, levels: dict[str, int], fault: Callable[[Job], None], per_host: int = 2,
                     undo: Callable[[Job], None] | None = None) -> str:
    """Like :func:`fault_and_relaunch` for a fault the run must survive: it ends 0 with the reference digest.

    ``undo(job)`` (if given) runs after the gate opened (e.g. to end a stall).
    """
    from ..checkpoint._util import digest_of

    ref, job = _reference_and_faulted_run(c, levels, fault, per_host)
    if undo is not None:
        undo(job)
    rc = job.finish()
    out = job.output()
    assert rc == 0, out
    assert digest_of(job.out.text()) == ref, out
    assert "ProcessFailure" not in out and "dead" not in job.err.text().lower(), out
    return out


def job_processes(c: Cluster, host: str) -> list[int]:
    """Processes on ``host`` other than its holder and its slurmd (the host's own services)."""
    found = []
    for p in c.processes(host):
        try:
            service = p == c.holder(host) or Path(f"/proc/{p}/comm").read_text().strip() == "slurmd"
        except OSError:
            continue  # gone meanwhile
        if not service:
            found.append(p)
    return found


def wait_no_job_processes(c: Cluster, job: Job | str, timeout: float = 60.0,
                          hosts: Sequence[str] | None = None) -> None:
    """Wait (bounded) until no process of the ended job is left on any host that is up (of ``hosts``,
    default all); ``job`` is the job, or its output.

    mpirun returns after its daemons; under SLURM the other nodes' slurmstepd end a few seconds after srun;
    Hydra's proxies clean up the other hosts after mpiexec.mpich has returned.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = {h: job_processes(c, h) for h in (hosts or c.all_hosts) if c.is_up(h)}
        if not any(left.values()):
            return
        assert time.monotonic() < deadline, \
            f"processes left running: {left}\n{job if isinstance(job, str) else job.output()}"
        time.sleep(0.1)


def rank_pids(c: Cluster, host: str, script: str = "gated_heat.py") -> list[int]:
    """The ranks of ``script`` (default: the heat example) running on ``host``."""
    found = []
    for p in job_processes(c, host):
        try:
            if script.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                found.append(p)
        except OSError:
            pass
    return found
