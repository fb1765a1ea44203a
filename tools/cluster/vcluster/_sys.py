"""Small system helpers for the virtual cluster: commands with timeouts, namespace processes, the subnet."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

#: Exit code of ``vcluster up`` (and of tests) when the machine cannot host the cluster (no root, no
#: network namespaces): the automake/pytest convention for "skipped".
SKIP = 77


class ClusterError(RuntimeError):
    """A virtual-cluster operation failed; the message says what and what to do."""


class ClusterUnavailable(ClusterError):
    """This machine cannot host the virtual cluster (no root, no network namespaces, a missing tool)."""


def sh(*cmd: str, check: bool = True, timeout: float = 60, input: str | None = None,
       env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` (no shell); return its stdout. Raise :class:`ClusterError` with its stderr if it fails."""
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        if check:
            raise ClusterError(f"{' '.join(cmd)}: {exc}") from exc
        return ""
    if check and p.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()}")
    return p.stdout


def netns_inode(netns: str) -> int | None:
    """Inode of the named network namespace (``/run/netns/<netns>``), or None if it does not exist."""
    try:
        return os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return None


def pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is ``inode`` (this process excluded)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                found.append(int(entry))
        except OSError:
            continue  # gone meanwhile, or a kernel thread
    return found


def signal_all(pids: Sequence[int], sig: int) -> None:
    """Send ``sig`` to each pid, ignoring those already gone."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_netns_processes(inode: int, timeout: float = 20.0) -> int:
    """SIGKILL every process in the network namespace until none is left; return how many were killed.

    A process that forks meanwhile is caught by the next pass. Stopped processes die from SIGKILL too.
    Raises :class:`ClusterError` if some survive ``timeout`` seconds (a process stuck in the kernel).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = pids_in_netns(inode)
        if not pids:
            return len(killed)
        killed.update(pids)
        signal_all(pids, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise ClusterError(f"processes {pids} survive SIGKILL (stuck in the kernel?): see ps -o stat")
        time.sleep(0.05)


def pick_subnet(candidates: Sequence[str]) -> ipaddress.IPv4Network:
    """The first candidate /24 that overlaps none of this machine's IPv4 addresses and routes."""
    used = []
    for line in sh("ip", "-o", "-4", "addr", "show").splitlines():
        parts = line.split()
        if "inet" in parts:
            used.append(ipaddress.ip_network(parts[parts.index("inet") + 1], strict=False))
    for line in sh("ip", "-4", "route", "show", "table", "all").splitlines():
        word = line.split()[0] if line.split() else ""
        if word[:1].isdigit():
            used.append(ipaddress.ip_network(word if "/" in word else word + "/32", strict=False))
    for cand in candidates:
        net = ipaddress.ip_network(cand)
        if not any(net.overlaps(u) for u in used):
            return net
    raise ClusterError(f"every candidate subnet {list(candidates)} overlaps this machine's networks "
                       "({used}): pass --subnet with a free /24")


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` in this mount namespace, deepest first."""
    points = []
    with open("/proc/self/mounts") as f:
        for line in f:
            point = line.split()[1].replace("\\040", " ")
            if point == str(root) or point.startswith(str(root) + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def check_capable() -> None:
    """Raise :class:`ClusterUnavailable` unless this process can create namespaces, bridges and mounts."""
    if os.geteuid() != 0:
        raise ClusterUnavailable("the virtual cluster needs root (network namespaces, bridges, mounts)")
    for tool in ("ip", "nsenter", "unshare", "mount", "tc"):
        if not any(Path(d, tool).exists() for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin",
                                                                                         "/sbin"]):
            raise ClusterUnavailable(f"`{tool}` is not installed (apt-get install iproute2 util-linux)")
    probe = f"ftcprobe{os.getpid()}"
    try:
        sh("ip", "netns", "add", probe, timeout=20)
    except ClusterError as exc:
        raise ClusterUnavailable(f"cannot create a network namespace here: {exc}") from exc
    sh("ip", "netns", "del", probe, check=False, timeout=20)
