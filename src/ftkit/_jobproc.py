"""Supervision of a launched job's processes (Linux ``/proc``): drain its pipes, watch its ranks, end it all.

:func:`ftkit.launch.run_mpi` starts the launcher in a session of its own; this module finds every process of
that session, records the exit status of ranks that have ended, and kills the whole session at the end,
returning only once nothing of it runs any more (bounded).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from ._wait import deadline_after, poll_until
from .errors import TimeoutFailure
from .jobstatus import world_rank

__all__ = ["RUNTIME_EXIT_GRACE", "KILL_WAIT", "SRUN_TERM_GRACE", "PipeReader", "watch_ranks", "is_zombie",
           "session_members",
           "proc_stat", "is_running", "combined_status", "kill_session", "end_srun", "process_environ",
           "kill_job_peers"]

#: Seconds mpirun may stay up after every rank has exited before it is killed.
RUNTIME_EXIT_GRACE = 10.0
#: Seconds to wait for the processes of a job to be gone after SIGKILL (they die when next scheduled).
KILL_WAIT = 60.0
#: Seconds srun gets after SIGTERM to end its job step before it is killed.
SRUN_TERM_GRACE = 20.0
#: Environment variables whose values the processes of one job (step) share, by launcher: Open MPI/PRRTE
#: (``PMIX_NAMESPACE``), SLURM (job and step), MPICH's Hydra (``PMI_KVSNAME`` is not exported: its port).
_JOB_ENV = ("PMIX_NAMESPACE", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_PORT")


class PipeReader:
    """Drains one pipe in a thread, so a chatty job never blocks on a full pipe."""

    def __init__(self, pipe, echo=None) -> None:  # type: ignore[no-untyped-def]
        self._chunks: list[str] = []
        self._thread = None
        self._echo = echo  # a text stream that gets every chunk as it comes (a launcher's own stderr)
        if pipe is not None:
            self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
            self._thread.start()

    def _drain(self, pipe) -> None:  # type: ignore[no-untyped-def]
        with pipe:
            read = pipe.readline if self._echo is not None else lambda: pipe.read(65536)  # echo: at once
            for chunk in iter(read, ""):
                self._chunks.append(chunk)
                if self._echo is not None:
                    self._echo.write(chunk)
                    self._echo.flush()

    def so_far(self) -> str:
        """What has come so far (the pipe may still be open)."""
        return "".join(self._chunks)

    def text(self) -> str:
        if self._thread is not None:
            self._thread.join(timeout=10)
        return "".join(self._chunks)


#: Process states (``/proc/<pid>/stat``) of a process that has ended: zombie, dead.
_ENDED = ("Z", "X")


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 = state, 11 and 12 = user and system CPU
    time in clock ticks), or None if gone (or where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def session_members(sid: int) -> list[int]:
    """Pids of every process in session ``sid`` (Linux /proc; empty elsewhere)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields is not None and int(fields[3]) == sid:  # field 6 of stat: session id
                members.append(int(entry))
    return members


def watch_ranks(sid: int, status: dict[int, int]) -> int:
    """Record the exit status of ranks seen as zombies; return how many ranks are still running."""
    live = 0
    for pid in session_members(sid):
        if pid == sid:
            continue
        fields = proc_stat(pid)
        if fields is None:
            continue
        if fields[0] in _ENDED:
            # stat field 52 is the waitpid status of a zombie (Linux >= 3.5).
            status[pid] = int(fields[49]) if len(fields) > 49 else -1
        else:
            status.setdefault(pid, -2)
            live += 1
    return live


def combined_status(status: dict[int, int], nprocs: int) -> int:
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


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (neither a zombie nor dead; Linux ``/proc``)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in _ENDED


def is_zombie(pid: int) -> bool:
    """Whether process ``pid`` has ended but is not reaped yet (Linux ``/proc``; False where unknown).

    Such a process still answers ``os.kill(pid, 0)`` but runs nothing and holds no lock: a job's killed
    rank stays so until its new parent reaps it, which on a busy machine can take a moment."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] in _ENDED


def kill_session(sid: int) -> list[int]:
    """SIGKILL every process of session ``sid`` and wait until none runs; return those still running.

    A SIGKILLed process dies only when it is next scheduled, which on a busy machine can take a while, and
    a process forked meanwhile escapes the first pass: so members are killed again until none is left
    running (zombies count as gone: they run nothing), for at most :data:`KILL_WAIT` seconds.
    """
    def none_running() -> bool:
        alive = [pid for pid in session_members(sid) if is_running(pid)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return not alive

    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        poll_until(none_running, deadline_after(KILL_WAIT), "end of the job's processes", max_sleep=0.05)
    except TimeoutFailure:
        return [pid for pid in session_members(sid) if is_running(pid)]
    return []


def end_srun(proc: subprocess.Popen[str]) -> None:
    """Ask srun to end its job step on every node (SIGTERM), and wait a bounded time for it."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=SRUN_TERM_GRACE)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def process_environ(pid: int) -> dict[str, str] | None:
    """The environment process ``pid`` started with (``/proc/<pid>/environ``), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    env = {}
    for item in data.split(b"\0"):
        key, _, value = item.partition(b"=")
        env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def kill_job_peers(ranks: set[int] | list[int]) -> list[int]:
    """SIGKILL the processes on this host that are world ``ranks`` of this process's own job; return their
    pids.

    A rank the job declared dead may only hang (SIGSTOP, a stuck file system): without ``ftkit launch``,
    nobody else kills it, and mpirun (or srun) waits for it forever. The job's processes are those whose
    environment has this process's values of the job variables (PMIx namespace, SLURM job and step); their
    rank comes from their environment too. Processes on other hosts are out of reach. Never raises.
    """
    mine = {key: os.environ[key] for key in _JOB_ENV if key in os.environ}
    wanted = {int(r) for r in ranks}
    if not mine or not wanted:
        return []
    killed = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = process_environ(int(entry))
        if env is None or any(env.get(key) != value for key, value in mine.items()):
            continue
        if world_rank(env) in wanted and is_running(int(entry)):
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return killed
