"""An N-host virtual cluster on one Linux machine: network namespaces on a private bridge.

Each host is a network namespace ``<prefix>-<host>`` (its own TCP/IP stack, address and ``eth0``, a veth pair
into the bridge ``<prefix>br0``) plus a *holder* process that owns the host's UTS and mount namespaces
(``unshare --uts --mount``): its own hostname, its own node-local disk (a size-limited tmpfs bind-mounted on
one common path, :attr:`Cluster.local`, so "disk full" can be rehearsed), its own ``/tmp`` (on that disk), its
own ``/dev/shm`` (a tmpfs of :attr:`Cluster.shm_mb`: MPI's shared-memory files stay on the host), its
own ``/etc/hosts`` (every host and the bridge address, ``gateway`` below) and ``/etc/resolv.conf``
(``nameserver 127.0.0.1``, ``timeout:1 attempts:1``: the machine's resolver is unreachable from a namespace
and every unknown name would hang). The other hosts' disks are hidden inside a host. One plain directory,
:attr:`Cluster.shared`, is the parallel file system every host sees.

Commands run on a host through ``nsenter -t <holder> --net --uts --mount`` (:meth:`Cluster.on`), which is
also what the generated ssh agent (``bin/ssh``, for PRRTE's ``plm_ssh_agent`` and Hydra's
``-launcher-exec``) does. The *login node* is the machine's own network namespace (the bridge address) with
the cluster's ``/etc/hosts`` bound in a private mount namespace (:meth:`Cluster.login`); it is never faulted.

Every resource is named after ``prefix`` and recorded under ``base`` (``state.json``, ``run/<host>.pid``), so
:func:`down` finds and removes all of it, also after an interrupted ``up`` or a killed test.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ._sys import (
    ClusterError,
    check_capable,
    kill_netns_processes,
    mounts_under,
    netns_inode,
    pick_subnet,
    sh,
)

DEFAULT_BASE = Path(os.environ.get("FTKIT_VCLUSTER_DIR", "/var/tmp/ftkit-vcluster"))
DEFAULT_PREFIX = os.environ.get("FTKIT_VCLUSTER_PREFIX", "ftc")
SUBNETS = tuple(f"10.213.{i}.0/24" for i in range(0, 250, 7))
_CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Cluster:
    """A virtual cluster's layout (what ``state.json`` holds); hosts' up/down state lives in ``run/``."""

    base: Path
    prefix: str
    subnet: str
    hosts: list[str]                       # compute hosts, in order (node ids follow this order)
    spares: list[str] = field(default_factory=list)
    disk_mb: int = 256
    creator: int = 0
    shm_mb: int = 512                      # each host's /dev/shm (a limit: memory is used only when written)

    # -- layout -------------------------------------------------------------------------------------------
    @property
    def all_hosts(self) -> list[str]:
        return self.hosts + self.spares

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br0"

    @property
    def gateway(self) -> str:
        """The bridge's address: the login node and the SLURM controller."""
        return str(ipaddress.ip_network(self.subnet)[254])

    def ip(self, host: str) -> str:
        return str(ipaddress.ip_network(self.subnet)[self.all_hosts.index(host) + 1])

    def netns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def veth(self, host: str) -> str:
        return f"{self.prefix}-{host}"[:15]

    @property
    def local(self) -> Path:
        """The node-local disk: the same path on every host, a different tmpfs behind it."""
        return self.base / "local"

    @property
    def shared(self) -> Path:
        """The parallel file system: one directory every host sees."""
        return self.base / "shared"

    @property
    def agent(self) -> Path:
        """The ssh agent: ``ssh [options] HOST COMMAND...`` runs COMMAND on HOST."""
        return self.base / "bin" / "ssh"

    def disk(self, host: str) -> Path:
        """Where the host's local disk is mounted on the machine (for inspection and faults)."""
        return self.base / "hosts" / host / "disk"

    def _pidfile(self, host: str) -> Path:
        return self.base / "run" / f"{host}.pid"

    # -- state ----------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, base: Path | None = None) -> Cluster:
        """The cluster recorded under ``base``; :class:`ClusterError` if none is up."""
        base = Path(base or DEFAULT_BASE)
        try:
            data = json.loads((base / "state.json").read_text())
        except (OSError, ValueError) as exc:
            raise ClusterError(f"no virtual cluster is up under {base} (state.json: {exc}): "
                               "start one with `vcluster up`") from exc
        data["base"] = Path(data["base"])
        return cls(**data)

    def _save(self) -> None:
        data = asdict(self)
        data["base"] = str(self.base)
        tmp = self.base / "state.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.base / "state.json")

    # -- running things on hosts ---------------------------------------------------------------------------
    def holder(self, host: str) -> int | None:
        """Pid of the host's holder process, or None when the host is off."""
        try:
            pid = int(self._pidfile(host).read_text())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def is_up(self, host: str) -> bool:
        return self.holder(host) is not None

    def on(self, host: str, argv: list[str], cwd: str | os.PathLike[str] | None = None) -> list[str]:
        """The command line that runs ``argv`` on ``host`` (in ``cwd``, default the caller's), as root.

        The environment is the caller's (as with ``ssh -o SendEnv``); the ssh agent instead gives a clean
        one, like a real ``ssh``.
        """
        pid = self.holder(host)
        if pid is None:
            raise ClusterError(f"host {host} is off: `vcluster reboot {host}` starts it again")
        wd = os.fspath(cwd or os.getcwd())
        return ["nsenter", "-t", str(pid), "--net", "--uts", "--mount", "--", "/bin/sh", "-c",
                'cd "$0" && exec "$@"', wd, *argv]

    def login(self, argv: list[str], cwd: str | os.PathLike[str] | None = None) -> list[str]:
        """The command line that runs ``argv`` on the login node (the machine, with the cluster's names)."""
        wd = os.fspath(cwd or os.getcwd())
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                f'mount --bind {shlex.quote(str(self.base / "etc" / "hosts"))} /etc/hosts && '
                'cd "$0" && exec "$@"', wd, *argv]

    def processes(self, host: str) -> list[int]:
        """Every process running on ``host`` (its network namespace), the holder included."""
        from ._sys import pids_in_netns

        inode = netns_inode(self.netns(host))
        return pids_in_netns(inode) if inode is not None else []

    def mpi_env(self) -> dict[str, str]:
        """Environment for Open MPI's ``mpirun`` (PRRTE) on the login node or a host."""
        return {"PRTE_MCA_plm_ssh_agent": str(self.agent),
                "PRTE_MCA_oob_tcp_if_include": self.subnet,
                "OMPI_MCA_btl_tcp_if_include": self.subnet,
                "OMPI_MCA_oob_tcp_if_include": self.subnet,
                "PMIX_MCA_psec": "native"}

    def hostlist(self, hosts: list[str] | None = None, slots: int = 2) -> str:
        """``--host`` value: ``node1:2,node2:2,...`` (every compute host by default)."""
        return ",".join(f"{h}:{slots}" for h in (hosts or self.hosts))

    # -- host lifecycle ------------------------------------------------------------------------------------
    def start_host(self, host: str, timeout: float = 30.0) -> None:
        """Power ``host`` on: a fresh, empty local disk and a new holder (hostname, mounts)."""
        if self.is_up(host):
            raise ClusterError(f"host {host} is already up")
        disk = self.disk(host)
        for point in mounts_under(disk):
            sh("umount", "-l", point, check=False)
        disk.mkdir(parents=True, exist_ok=True)
        sh("mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m,mode=0755", f"{self.prefix}-{host}-disk",
           str(disk))
        (disk / "tmp").mkdir(mode=0o1777)
        os.chmod(disk / "tmp", 0o1777)
        etc = self.base / "hosts" / host / "etc"
        keep = []  # what must stay visible under the host's own /tmp (a checkout or venv there)
        for path in _needed_under_tmp():
            point = disk / "tmp" / path.relative_to("/tmp")
            point.mkdir(parents=True, exist_ok=True)
            keep.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(point))}")
        script = " && ".join([
            f"hostname {host}",
            f"mount --bind {disk} {self.local}",
            *keep,
            f"mount --rbind {disk / 'tmp'} /tmp",
            f"mount --bind {etc / 'hosts'} /etc/hosts",
            f"mount --bind {etc / 'resolv.conf'} /etc/resolv.conf",
            # a /dev/shm of its own (MPI's shared-memory files), gone with the host like a reboot's
            f"mount -t tmpfs -o size={self.shm_mb}m,mode=1777 {self.prefix}-{host}-shm /dev/shm",
            f"mount -t tmpfs -o size=64k {self.prefix}-hide {self.base / 'hosts'}",  # the others' disks
            "echo ready", "exec sleep infinity"])
        log = open(self.base / "run" / f"{host}.holder.log", "w")
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{self.netns(host)}", "--", "unshare", "--uts",
                                 "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script],
                                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True, env={"PATH": _CLEAN_PATH})
        log.close()
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the script either prints "ready" or exits
        if line.strip() != "ready":
            proc.kill()
            proc.wait(timeout)
            why = (self.base / "run" / f"{host}.holder.log").read_text().strip()
            raise ClusterError(f"host {host} did not start: {why}")
        proc.stdout.close()
        self._pidfile(host).write_text(str(proc.pid))

    def stop_host(self, host: str) -> int:
        """Power ``host`` off: SIGKILL every process in its namespace, discard its disk. Return the count."""
        self._pidfile(host).unlink(missing_ok=True)  # first: nothing new is started there
        inode = netns_inode(self.netns(host))
        killed = kill_netns_processes(inode) if inode is not None else 0
        for point in mounts_under(self.disk(host)):
            sh("umount", "-l", point, check=False)
        return killed

    def status(self) -> str:
        """One line per host: name, address, on/off, link, local-disk use, process count."""
        lines = [f"virtual cluster under {self.base}: subnet {self.subnet}, bridge {self.bridge} "
                 f"({self.gateway}, the login node), shared {self.shared}, local {self.local}"]
        for h in self.all_hosts:
            up = self.is_up(h)
            link = sh("ip", "-br", "link", "show", self.veth(h), check=False).split()
            qdisc = "slow" if "tbf" in sh("tc", "qdisc", "show", "dev", self.veth(h), check=False) else ""
            use = ""
            if up:
                st = os.statvfs(self.disk(h))
                use = f"disk {(st.f_blocks - st.f_bfree) * st.f_frsize >> 20}/{self.disk_mb} MiB"
            lines.append(f"  {h:8} {self.ip(h):15} {'up' if up else 'OFF':3} "
                         f"link {'up' if 'UP' in link[1:2] else 'DOWN'} {qdisc:4} {use:20} "
                         f"{len(self.processes(h))} proc{' (spare)' if h in self.spares else ''}")
        return "\n".join(lines)


def up(hosts: int = 4, spares: int = 1, disk_mb: int = 256, base: Path | None = None,
       prefix: str = DEFAULT_PREFIX, subnet: str | None = None) -> Cluster:
    """Create the cluster; :class:`ClusterError` if one is up already (under ``base`` or by ``prefix``)."""
    base = Path(base or DEFAULT_BASE)
    check_capable()
    if str(base).startswith("/tmp/") or str(base) == "/tmp":
        raise ClusterError(f"base {base} is under /tmp, which every host replaces by its own: pick another")
    leftovers = [n for n in sh("ip", "netns", "list").split() if n.startswith(f"{prefix}-")]
    if (base / "state.json").exists() or leftovers:
        raise ClusterError(f"a virtual cluster is already up (state {base / 'state.json'}, namespaces "
                           f"{leftovers}): use it, or run `vcluster down` first")
    names = [f"node{i + 1}" for i in range(hosts + spares)]
    with _subnet_lock():  # two clusters brought up at once (other prefixes) must not pick one free subnet
        c = Cluster(base=base, prefix=prefix, subnet=str(subnet or pick_subnet(SUBNETS)), hosts=names[:hosts],
                    spares=names[hosts:], disk_mb=disk_mb, creator=os.getpid())
        for d in ("run", "bin", "etc", "local", "shared", "hosts"):
            (base / d).mkdir(parents=True, exist_ok=True)
        os.chmod(c.shared, 0o1777)
        fd = os.open(base / "state.json", os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # concurrent `up`s: one wins
        os.close(fd)
        c._save()  # before anything is created: `down` finds what an interrupted `up` left
        try:
            _create_network(c)
        except BaseException:
            down(base, prefix)
            raise
    try:
        _write_files(c)
        for h in c.all_hosts:
            c.start_host(h)
    except BaseException:
        down(base, prefix)
        raise
    return c


@contextlib.contextmanager
def _subnet_lock(timeout: float = 120.0) -> Iterator[None]:
    """Hold the machine-wide lock under which a cluster picks its subnet and puts its bridge address on it
    (bounded wait: :class:`ClusterError` after ``timeout`` seconds)."""
    path = Path("/var/tmp/ftkit-vcluster.subnet.lock")
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{path} held for {timeout:.0f} s by another `vcluster up`") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def _create_network(c: Cluster) -> None:
    plen = ipaddress.ip_network(c.subnet).prefixlen
    sh("ip", "link", "add", c.bridge, "type", "bridge")
    sh("ip", "addr", "add", f"{c.gateway}/{plen}", "dev", c.bridge)
    sh("ip", "link", "set", c.bridge, "up")
    for h in c.all_hosts:
        ns, veth = c.netns(h), c.veth(h)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{c.prefix}p{c.all_hosts.index(h)}")
        peer = f"{c.prefix}p{c.all_hosts.index(h)}"
        sh("ip", "link", "set", peer, "netns", ns)
        sh("ip", "-n", ns, "link", "set", peer, "name", "eth0")
        sh("ip", "-n", ns, "addr", "add", f"{c.ip(h)}/{plen}", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", c.gateway)
        sh("ip", "link", "set", veth, "master", c.bridge)
        sh("ip", "link", "set", veth, "up")


def _write_files(c: Cluster) -> None:
    names = "".join(f"{c.ip(h)}\t{h}\n" for h in c.all_hosts)
    login = f"{c.gateway}\tlogin {os.uname().nodename}\n"
    (c.base / "etc" / "hosts").write_text(f"127.0.0.1\tlocalhost\n{login}{names}")
    for h in c.all_hosts:
        etc = c.base / "hosts" / h / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n{login}{names}")
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    run = c.base / "run"
    c.agent.write_text(f"""#!/bin/sh
# ssh for the virtual cluster under {c.base}: ssh [options] HOST COMMAND...
# (PRRTE's plm_ssh_agent, Hydra's -launcher-exec). Like ssh: a clean environment, COMMAND run by a shell.
while [ $# -gt 0 ]; do
    case $1 in -o|-p|-l|-i|-F) shift 2 ;; -*) shift ;; *) break ;; esac
done
host=$1; shift
[ -n "$host" ] || {{ echo "usage: ssh HOST COMMAND" >&2; exit 255; }}
for h in $(awk -v h="$host" '$1 == h || $2 == h {{print $2}}' {c.base}/etc/hosts); do host=$h; done
if [ "$(ip -br link show {c.prefix}-$host 2>/dev/null | awk '{{print $2}}')" = DOWN ]; then
    echo "ssh: connect to host $host port 22: Connection timed out" >&2; exit 255
fi
pid=$(cat {run}/$host.pid 2>/dev/null)
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255
fi
# Not exec: like an ssh client, this process stays on the calling side; if the host dies under the
# command, it ends as ssh does when the connection drops (255), not with the killed command's status.
# setsid: the remote side is not in the caller's process group (a signal to the launcher's group does not
# reach across the "network"; the remote processes end when their own runtime tells them to).
setsid -w nsenter -t "$pid" --net --uts --mount -- env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/sh \\
    PATH={_CLEAN_PATH} /bin/sh -c "cd /root 2>/dev/null || cd /; $*"
rc=$?
if [ $rc -gt 128 ] && [ "$(cat {run}/$host.pid 2>/dev/null)" != "$pid" ]; then  # the host went off
    echo "Connection to $host closed by remote host." >&2; exit 255
fi
exit $rc
""")
    c.agent.chmod(0o755)


def down(base: Path | None = None, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove everything a cluster under ``base`` / named ``prefix`` created; return what was removed.

    Works from any leftover state: SLURM's daemons (:func:`slurm.stop`), processes in the namespaces
    (stopped ones too), the namespaces, the
    bridge and veths, every mount under ``base``, and ``base`` itself.
    """
    from . import slurm

    base = Path(base or DEFAULT_BASE)
    done: list[str] = [f"SLURM daemon {d}" for d in slurm.stop(base=base)]
    for ns in sh("ip", "netns", "list", check=False).split():
        if ns.startswith(f"{prefix}-"):
            inode = netns_inode(ns)
            if inode is not None:
                n = kill_netns_processes(inode)
                done.append(f"killed {n} process(es) in {ns}")
            sh("ip", "netns", "del", ns, check=False)
            done.append(f"netns {ns}")
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(prefix) and (name == f"{prefix}br0" or name.startswith(f"{prefix}-")
                                        or name.startswith(f"{prefix}p")):
            sh("ip", "link", "del", name, check=False)
            done.append(f"link {name}")
    for point in mounts_under(base):
        sh("umount", "-l", point, check=False)
        done.append(f"mount {point}")
    if base.exists():
        deadline = time.monotonic() + 10
        while True:
            try:
                shutil.rmtree(base)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        done.append(f"dir {base}")
    return done


def _needed_under_tmp() -> list[Path]:
    """The paths under ``/tmp`` every host must still see although its ``/tmp`` is its own: this checkout
    (the programs the tests run) and the Python environment running it, when they live under ``/tmp``."""
    tmp = Path("/tmp")
    found = {Path(__file__).resolve().parents[3], Path(sys.prefix).resolve(),
             Path(sys.executable).resolve().parent}
    under = sorted(p for p in found if tmp in p.parents)
    return [p for p in under if not any(q in p.parents for q in under)]  # outermost only
