"""``python -m tools.cluster.vcluster COMMAND``: build, fault and remove the virtual cluster.

Exit codes: 0 done, 1 failed (the message says why), 77 this machine cannot host the cluster (skip).
"""

from __future__ import annotations

import argparse
import os
import sys

from . import faults, slurm
from ._sys import SKIP, ClusterError, ClusterUnavailable
from .cluster import DEFAULT_BASE, Cluster, down, up


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vcluster", description=__doc__.splitlines()[0])
    p.add_argument("--base", default=str(DEFAULT_BASE), help="state directory (default %(default)s)")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="create the cluster (refuses if one is up)")
    u.add_argument("--hosts", type=int, default=4)
    u.add_argument("--spare", type=int, default=1, help="spare hosts (not in the default host list)")
    u.add_argument("--disk-mb", type=int, default=256, help="size of each host's local disk (MiB)")
    u.add_argument("--subnet", default=None, help="a free /24 (default: the first unused 10.213.x.0/24)")
    sub.add_parser("down", help="remove everything the cluster created (also after an interrupted run)")
    sub.add_parser("status", help="hosts, addresses, links, disks, processes")
    sub.add_parser("env", help="shell exports for Open MPI's mpirun (ssh agent, interfaces) and SLURM_CONF")
    sub.add_parser("slurm-up", help="start munged + slurmctld (login node) and a slurmd on every host")
    sub.add_parser("slurm-down", help="stop SLURM's daemons (`down` does it too)")
    for name in ("poweroff", "reboot", "partition", "heal", "unslow", "fill", "unfill"):
        sub.add_parser(name, help=(faults.__dict__[name].__doc__ or "").splitlines()[0]).add_argument("host")
    s = sub.add_parser("slow", help=faults.slow.__doc__.splitlines()[0])
    s.add_argument("host")
    s.add_argument("rate", nargs="?", default="5mbit")
    st = sub.add_parser("stall", help=faults.stall.__doc__.splitlines()[0])
    st.add_argument("host")
    st.add_argument("seconds", type=float)
    for name in ("exec", "login"):
        e = sub.add_parser(name, help=f"run a command on a host ({name} HOST -- CMD)" if name == "exec"
                           else "run a command on the login node (login -- CMD)")
        if name == "exec":
            e.add_argument("host")
        e.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    try:
        return _run(args)
    except ClusterUnavailable as exc:
        print(f"vcluster: skipped: {exc}", file=sys.stderr)
        return SKIP
    except ClusterError as exc:
        print(f"vcluster: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "up":
        c = up(args.hosts, args.spare, args.disk_mb, args.base, subnet=args.subnet)
        print(c.status())
        return 0
    if args.cmd == "down":
        for item in down(args.base):
            print(f"removed {item}")
        return 0
    c = Cluster.load(args.base)
    if args.cmd == "status":
        print(c.status())
    elif args.cmd == "env":
        for k, v in {**c.mpi_env(), **slurm.env(c)}.items():
            print(f"export {k}={v}")
        print(f"# mpirun --host {c.hostlist()} ...   (run it with `vcluster login -- ...`)")
    elif args.cmd == "slurm-up":
        slurm.start(c)
        print(f"SLURM up: nodes {', '.join(slurm.idle_nodes(c))} idle; "
              f"export SLURM_CONF={slurm.env(c)['SLURM_CONF']}")
    elif args.cmd == "slurm-down":
        for item in slurm.stop(c):
            print(f"stopped {item}")
    elif args.cmd in ("exec", "login"):
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        argv = c.on(args.host, cmd) if args.cmd == "exec" else c.login(cmd)
        os.execvp(argv[0], argv)
    elif args.cmd == "slow":
        faults.slow(c, args.host, args.rate)
    elif args.cmd == "stall":
        print(f"stopped {faults.stall(c, args.host, args.seconds)} process(es) for {args.seconds} s")
    elif args.cmd == "poweroff":
        print(f"{args.host}: off, {faults.poweroff(c, args.host)} process(es) killed, local disk discarded")
    elif args.cmd == "fill":
        print(f"{args.host}: local disk full ({faults.fill(c, args.host)} bytes written)")
    else:
        getattr(faults, args.cmd)(c, args.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
