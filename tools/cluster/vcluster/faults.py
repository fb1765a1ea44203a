"""Faults that belong to a host, not to ftkit: power, network link, scheduling, disk.

- :func:`poweroff`: every process in the host's namespace SIGKILLed, its local disk discarded; the link stays
  up, so peers' TCP connections are reset at once (a crash). Cut the link first (:func:`partition`) for a
  silent loss. :func:`reboot` starts the host again with an empty disk.
- :func:`partition` / :func:`heal`: the host's link down / up (the host keeps running, unreachable).
- :func:`slow` / :func:`unslow`: a token-bucket (``tc tbf``) limit on both directions of the link, with a
  long queue (this kernel has no ``netem``: no delay or loss emulation).
- :func:`stall`: every process of the host SIGSTOPped for some seconds, then SIGCONT (swap storm, jitter).
- :func:`fill` / :func:`unfill`: the host's local disk filled up to the last byte / emptied again.
"""

from __future__ import annotations

import errno
import os
import signal
import time

from ._sys import ClusterError, sh, signal_all
from .cluster import Cluster

FILL_NAME = ".vcluster-fill"


def poweroff(c: Cluster, host: str) -> int:
    """Power ``host`` off; return how many processes were killed."""
    _known(c, host)
    return c.stop_host(host)


def reboot(c: Cluster, host: str) -> None:
    """Power ``host`` off if it is on, then on again with an empty disk (and its slurmd, if SLURM is up)."""
    from . import slurm

    _known(c, host)
    if c.is_up(host):
        c.stop_host(host)
    c.start_host(host)
    if slurm.running(c):
        slurm.boot(c, host)


def partition(c: Cluster, host: str) -> None:
    """Take ``host``'s link down: it runs on, and neither reaches nor is reached by anyone."""
    _known(c, host)
    sh("ip", "link", "set", c.veth(host), "down")


def heal(c: Cluster, host: str) -> None:
    """Bring ``host``'s link up again."""
    _known(c, host)
    sh("ip", "link", "set", c.veth(host), "up")


def slow(c: Cluster, host: str, rate: str = "5mbit", latency_ms: int = 2000) -> None:
    """Limit both directions of ``host``'s link to ``rate`` (tc units: ``5mbit``, ``20mbit``)."""
    _known(c, host)
    tbf = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", f"{latency_ms}ms"]
    sh("tc", "qdisc", "replace", "dev", c.veth(host), *tbf)
    sh("tc", "-n", c.netns(host), "qdisc", "replace", "dev", "eth0", *tbf)


def unslow(c: Cluster, host: str) -> None:
    """Remove the limit :func:`slow` put on ``host``'s link."""
    _known(c, host)
    sh("tc", "qdisc", "del", "dev", c.veth(host), "root", check=False)
    sh("tc", "-n", c.netns(host), "qdisc", "del", "dev", "eth0", "root", check=False)


def stall(c: Cluster, host: str, seconds: float) -> int:
    """SIGSTOP every process of ``host``, wait ``seconds``, SIGCONT them; return how many were stopped.

    The processes are continued whatever happens (also on KeyboardInterrupt).
    """
    _known(c, host)
    pids = c.processes(host)
    try:
        signal_all(pids, signal.SIGSTOP)
        time.sleep(seconds)
    finally:
        signal_all(sorted(set(pids) | set(c.processes(host))), signal.SIGCONT)
    return len(pids)


def fill(c: Cluster, host: str) -> int:
    """Fill ``host``'s local disk (a file of zeros until ENOSPC); return the bytes written."""
    _known(c, host)
    if not c.is_up(host):
        raise ClusterError(f"host {host} is off")
    written = 0
    chunk = bytes(1 << 20)
    with open(c.disk(host) / FILL_NAME, "ab") as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    written += os.write(f.fileno(), chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return written


def unfill(c: Cluster, host: str) -> None:
    """Remove what :func:`fill` wrote."""
    _known(c, host)
    (c.disk(host) / FILL_NAME).unlink(missing_ok=True)


def _known(c: Cluster, host: str) -> None:
    if host not in c.all_hosts:
        raise ClusterError(f"no host {host!r} in this cluster (hosts: {', '.join(c.all_hosts)})")
