"""Multi-node SLURM on the virtual cluster: munged + slurmctld on the login node, one slurmd per host.

``start`` writes ``<base>/slurm/slurm.conf`` and starts a private ``munged`` (its own key and socket under
``<base>/slurm/munge``, so a site munged on ``/run/munge`` is neither used nor disturbed), ``slurmctld`` on
the bridge address (``SlurmctldHost=<this machine>(<bridge ip>)``) and, on every host, ``slurmd -D -N <host>``
run through :meth:`Cluster.on` (``nsenter`` into the host's network, UTS and mount namespaces; not
``ip netns exec``, which remounts ``/sys`` and slurmd then fails to find its cgroup mount). Each slurmd keeps
its spool, pid file, log and ``TmpFS`` on the host's own disk (a shared ``/tmp`` breaks PMIx:
``pmixp_mkdir ... File exists``), so powering a host off takes its slurmd and its job state with it;
:func:`boot` (called by ``vcluster reboot``) starts slurmd again, and ``ReturnToService=2`` puts the node
back in service when it registers. Clients need ``SLURM_CONF`` (:func:`env`) and run on the login node
(``vcluster login -- srun ...``). :func:`stop` (and ``vcluster down``) ends every daemon by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from ._sys import ClusterError, ClusterUnavailable, sh
from .cluster import Cluster

DAEMONS = ("slurmctld", "munged")  # on the login node, stopped in this order (slurmd: one per host)


def sdir(base: Path) -> Path:
    return Path(base) / "slurm"


def env(c: Cluster) -> dict[str, str]:
    """Environment for SLURM's clients (srun, salloc, sinfo, scontrol) on the login node."""
    return {"SLURM_CONF": str(sdir(c.base) / "slurm.conf")}


def running(c: Cluster) -> bool:
    return _alive(sdir(c.base) / "slurmctld.pid", "slurmctld") is not None


def start(c: Cluster, timeout: float = 90.0) -> None:
    """Start munged, slurmctld and every host's slurmd; wait (bounded) until every node is idle.

    Raises :class:`ClusterUnavailable` when SLURM or munge is not installed, :class:`ClusterError` when
    SLURM is already up on this cluster or a node does not become idle (logs under ``<base>/slurm/log``).
    """
    for tool in ("munged", "slurmctld", "slurmd", "srun"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
            raise ClusterUnavailable(f"`{tool}` is not installed: apt-get install -y slurm-wlm munge")
    if running(c):
        raise ClusterError(f"SLURM is already up on this cluster ({sdir(c.base)}): `vcluster slurm-down`")
    d = sdir(c.base)
    for sub in ("state", "log", "munge"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(d / "munge", 0o755)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    (d / "slurm.conf").write_text(_conf(c))
    try:
        _daemon(d, "munged", ["munged", "-F", "-f", f"--socket={_socket(c)}", f"--key-file={key}",
                              f"--pid-file={d / 'munge' / 'munged.pidfile'}",
                              f"--log-file={d / 'log' / 'munged.log'}",
                              f"--seed-file={d / 'munge' / 'seed'}"])
        _wait(lambda: sh("munge", "-S", _socket(c), "-n", check=False) != "", 20, "munged did not start", d)
        _daemon(d, "slurmctld", ["slurmctld", "-D", "-f", str(d / "slurm.conf")])
        for h in c.all_hosts:
            if c.is_up(h):
                boot(c, h)
        _wait(lambda: set(idle_nodes(c)) >= {h for h in c.all_hosts if c.is_up(h)}, timeout,
              "not every node became idle", d)
    except BaseException:
        stop(c)
        raise


def boot(c: Cluster, host: str) -> None:
    """Start ``host``'s slurmd (its spool and log on the host's disk); the host must be up."""
    d = sdir(c.base)
    spool = c.local / "slurm"
    log = open(d / "log" / f"slurmd-{host}.out", "a")
    proc = subprocess.Popen(c.on(host, ["/bin/sh", "-c", f"mkdir -p {spool} && exec slurmd -D -N {host} "
                                        f"-f {d / 'slurm.conf'}"], cwd="/"),
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={"PATH": os.environ.get("PATH", "")})
    log.close()
    (d / f"slurmd-{host}.pid").write_text(str(proc.pid))


def idle_nodes(c: Cluster) -> list[str]:
    """Nodes SLURM reports idle (``sinfo``); empty if slurmctld does not answer."""
    out = sh("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=15,
             env={**os.environ, **env(c)})
    rows = (line.split() for line in out.splitlines())
    return sorted({w[0] for w in rows if len(w) == 2 and w[1] == "idle"})


def wait_idle(c: Cluster, hosts: list[str], timeout: float = 120.0) -> None:
    """Wait (bounded) until every one of ``hosts`` is idle (e.g. after a reboot)."""
    _wait(lambda: set(idle_nodes(c)) >= set(hosts), timeout, f"nodes {hosts} did not become idle",
          sdir(c.base))


def stop(c: Cluster | None = None, base: Path | None = None) -> list[str]:
    """End every slurmd, slurmctld and munged of the cluster under ``base`` by pid; return what was ended.

    Works from whatever is left (``vcluster down`` calls it with only ``base``).
    """
    d = sdir(c.base if c is not None else Path(base or "."))
    done = []
    for f in sorted(d.glob("slurmd-*.pid")) + [d / f"{n}.pid" for n in DAEMONS]:
        name = "slurmd" if f.name.startswith("slurmd") else f.stem
        pid = _alive(f, name)
        if pid is not None:
            _end(pid)
            done.append(f"{f.stem} {pid}")
        f.unlink(missing_ok=True)
    return done


def _conf(c: Cluster) -> str:
    d = sdir(c.base)
    port = _free_port(c.gateway)
    nodes = "".join(f"NodeName={h} NodeAddr={c.ip(h)} CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 "
                    f"RealMemory=500 State=UNKNOWN\n" for h in c.all_hosts)
    return f"""# SLURM for the virtual cluster under {c.base} (written by tools/cluster/vcluster/slurm.py)
ClusterName={c.prefix.lower()}
SlurmctldHost={socket.gethostname()}({c.gateway})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={_socket(c)}
StateSaveLocation={d / 'state'}
SlurmctldPidFile={d / 'slurmctld.pidfile'}
SlurmctldLogFile={d / 'log' / 'slurmctld.log'}
SlurmdSpoolDir={c.local / 'slurm'}
SlurmdPidFile={c.local / 'slurm' / 'slurmd.pid'}
SlurmdLogFile={c.local / 'slurm' / 'slurmd.log'}
TmpFS={c.local / 'tmp'}
SlurmctldPort={port}
SlurmdPort={port + 1}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MessageTimeout=10
{nodes}PartitionName=compute Nodes={','.join(c.hosts)} Default=YES {_PART}
PartitionName=all Nodes={','.join(c.all_hosts)} {_PART}
"""


_PART = "MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"


def _socket(c: Cluster) -> str:
    return str(sdir(c.base) / "munge" / "munge.sock")


def _free_port(addr: str) -> int:
    """An even port P such that P and P+1 are free on ``addr`` (slurmctld, slurmd)."""
    for port in range(16900, 17900, 2):
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind((addr, p))
            return port
        except OSError:
            continue
    raise ClusterError("no two free TCP ports in 16900-17900 for slurmctld/slurmd")


def _daemon(d: Path, name: str, argv: list[str]) -> None:
    log = open(d / "log" / f"{name}.out", "a")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log.close()
    (d / f"{name}.pid").write_text(str(proc.pid))


def _alive(pidfile: Path, name: str) -> int | None:
    """The pid in ``pidfile`` if that process runs and is ``name`` (not a reused pid)."""
    try:
        pid = int(pidfile.read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except (OSError, ValueError):
        return None
    return pid if name.encode() in cmd else None


def _end(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM ``pid``, SIGKILL it if it is still there after ``timeout`` s; reap it if it is our child."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                pass
            state = _state(pid)
            if state in (None, "Z"):
                return
            time.sleep(0.05)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _wait(cond, timeout: float, what: str, d: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise ClusterError(f"SLURM: {what} within {timeout:.0f} s; logs in {d / 'log'} and on each "
                               f"host's disk (slurm/slurmd.log)")
        time.sleep(0.2)
