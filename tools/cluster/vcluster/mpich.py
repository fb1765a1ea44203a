"""MPICH (Debian's 4.0.2, Hydra) across the virtual cluster's hosts, with the venv's mpi4py wheel.

The mpi4py 4.1 wheel carries an MPICH build of its extension; it loads ``libmpi.so.12``, so a directory with
``libmpi.so.12 -> libmpich.so.12`` on ``LD_LIBRARY_PATH`` and ``MPI4PY_MPIABI=mpich`` run it on Debian's MPICH
without building anything (:func:`env`). :func:`command` is Hydra's ``mpiexec.mpich`` started on the login
node: ``-launcher ssh -launcher-exec <the cluster's ssh agent>`` (Hydra calls it as ``agent -x HOST CMD``),
``-iface <bridge>`` (the proxies call back to the bridge address), ``-hosts h1,h2 -ppn P``. Debian's MPICH
goes through UCX, which uses shared memory between namespaces of one kernel, so link faults and ``tc`` would
not touch its traffic; ``UCX_TLS=tcp`` puts every message on the hosts' links. :func:`hydra_env` gives the
same through Hydra's environment variables, for an ``mpiexec`` started by someone else (``ftkit launch``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ._sys import ClusterUnavailable
from .cluster import Cluster

LIBMPICH = Path("/usr/lib/x86_64-linux-gnu/libmpich.so.12")


def mpiexec() -> str:
    """Path of Hydra's ``mpiexec.mpich``; :class:`ClusterUnavailable` if MPICH is not installed."""
    path = shutil.which("mpiexec.mpich")
    if path is None or not LIBMPICH.exists():
        raise ClusterUnavailable("MPICH is not installed: apt-get install -y mpich libmpich-dev")
    return path


def env(c: Cluster) -> dict[str, str]:
    """Environment that makes the venv's mpi4py load Debian's MPICH, over TCP only."""
    mpiexec()
    lib = c.base / "mpich-lib"
    lib.mkdir(exist_ok=True)
    link = lib / "libmpi.so.12"
    if not link.is_symlink():
        link.symlink_to(LIBMPICH)
    path = os.environ.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": f"{lib}:{path}" if path else str(lib), "MPI4PY_MPIABI": "mpich",
            "UCX_TLS": "tcp"}


def hydra_env(c: Cluster, hosts: Sequence[str], per_host: int) -> dict[str, str]:
    """:func:`env` plus Hydra's own variables (host file, launcher, agent, interface), so that a plain
    ``mpiexec -n N`` (as ``ftkit launch --launcher mpich`` runs it) starts its ranks on ``hosts``."""
    hostfile = c.base / "mpich-lib" / f"hosts.{'_'.join(hosts)}.{per_host}"
    e = env(c)
    hostfile.write_text("".join(f"{h}:{per_host}\n" for h in hosts))
    return {**e, "HYDRA_HOST_FILE": str(hostfile), "HYDRA_LAUNCHER": "ssh",
            "HYDRA_LAUNCHER_EXEC": str(c.agent), "HYDRA_IFACE": c.bridge}


def command(c: Cluster, hosts: Sequence[str], per_host: int, program: Sequence[str],
            extra_env: dict[str, str] | None = None) -> list[str]:
    """``mpiexec.mpich`` running ``program`` on ``per_host`` ranks of each of ``hosts`` (run it on the
    login node, with :func:`env` in its environment; ``extra_env`` goes to the ranks)."""
    cmd = [mpiexec(), "-launcher", "ssh", "-launcher-exec", str(c.agent), "-iface", c.bridge,
           "-hosts", ",".join(hosts), "-ppn", str(per_host), "-n", str(len(hosts) * per_host)]
    for k, v in {**env(c), **(extra_env or {})}.items():
        cmd += ["-genv", k, v]
    return cmd + list(program)
