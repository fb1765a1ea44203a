"""Supervision of a launched job's processes (Linux ``/proc``): drain its pipes, watch its ranks, end it all.

:func:`ftkit.launch.run_mpi` starts the launcher in a session of its own; this module finds every process of
that session, records the exit status of ranks that have ended (:class:`RankExits`: also from the lines of
Open MPI's runtime), and kills the whole session at the end, returning only once nothing of it runs any more
(bounded). :class:`Signals` catches the signals ``ftkit launch`` passes on to the ranks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ._pipewatch import start_on_pipe
from ._wait import deadline_after, poll_until
from .errors import TimeoutFailure
from .jobstatus import world_rank

__all__ = ["FORWARDED_SIGNALS", "ENDING_SIGNALS", "Signals", "RUNTIME_EXIT_GRACE", "KILL_WAIT",
           "SRUN_TERM_GRACE", "NONZERO_EXIT_GRACE", "REAPER_VERBOSITY", "PipeReader", "RankExits",
           "watch_ranks", "is_zombie", "session_members", "proc_stat", "is_running", "combined_status",
           "kill_session", "end_srun", "process_environ", "environ_rank", "how_ended", "start_watchdog",
           "kill_job_peers"]

#: Signals ``ftkit launch`` passes on to every rank.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: Of those, the ones after which the job is killed once the grace period has passed.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Seconds mpirun may stay up after every rank has exited before it is killed.
RUNTIME_EXIT_GRACE = 10.0
#: Seconds a job may run on after a rank's non-zero exit before the launcher ends it (Open MPI): long enough
#: for the other ranks, which usually leave at about the same time, to finish writing and leave on a loaded
#: machine, and for the runtime to forward what they wrote; short against the wait of ranks blocked on the
#: one that left (they would wait for good without ULFM, or the failure detector's 60 s with it).
NONZERO_EXIT_GRACE = 10.0
#: Seconds to wait for the processes of a job to be gone after SIGKILL (they die when next scheduled).
KILL_WAIT = 60.0
#: Seconds srun gets after SIGTERM to end its job step before it is killed.
SRUN_TERM_GRACE = 20.0
#: Environment variables whose values the processes of one job (step) share, by launcher: Open MPI/PRRTE
#: (``PMIX_NAMESPACE``), SLURM (job and step), MPICH's Hydra (``PMI_KVSNAME`` is not exported: its port).
_JOB_ENV = ("PMIX_NAMESPACE", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_PORT")


class PipeReader:
    """Drains one pipe in a thread, so a chatty job never blocks on a full pipe. With ``claim``, the pipe is
    read line by line and the lines ``claim`` returns True for are left out (the runtime's own lines)."""

    def __init__(self, pipe, echo=None, claim: Callable[[str], bool] | None = None) -> None:  # type: ignore[no-untyped-def]
        self._chunks: list[str] = []
        self._thread = None
        self._echo = echo  # a text stream that gets every chunk as it comes (a launcher's own stderr)
        self._claim = claim
        if pipe is not None:
            self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
            self._thread.start()

    def _drain(self, pipe) -> None:  # type: ignore[no-untyped-def]
        with pipe:
            by_line = self._echo is not None or self._claim is not None  # echo: at once
            read = pipe.readline if by_line else lambda: pipe.read(65536)
            for chunk in iter(read, ""):
                if self._claim is not None and self._claim(chunk):
                    continue
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


#: Verbosity of Open MPI's process launcher (``odls_base_verbose``) at which its runtime (PRRTE 3) prints the
#: exit code of every rank it reaps, which the launcher reads (:class:`RankExits`).
REAPER_VERBOSITY = "5"
# "[host:pid] [prterun-host-123@0,0] odls:wait_local_proc child process [prterun-host-123@1,2] pid 4711
# terminated", then "[...] odls:waitpid_fired child [prterun-host-123@1,2] exit code 4" (job 1 is the
# application's; a signal gives "[...] odls:waitpid_fired child process [prterun-host-123@1,2] terminated
# with signal Killed" instead, the signal's strsignal text, and no exit code).
_DAEMON = r"^\[[^\]]*:\d+\] \[[^\]]*@0,\d+\]"
_REAPED_PID = re.compile(_DAEMON + r" odls:wait_local_proc child process \[[^\]]*@1,(\d+)\] pid (\d+) "
                                   r"terminated")
_REAPED_CODE = re.compile(_DAEMON + r" odls:waitpid_fired child \[[^\]]*@1,(\d+)\] exit code (\d+)")
_REAPED_SIGNAL = re.compile(_DAEMON + r" odls:waitpid_fired child process \[[^\]]*@1,(\d+)\] terminated with "
                                      r"signal (.+?)\s*$")
# The other lines of that verbosity: the launcher's debugging output, not the job's.
_LAUNCHER_LINE = re.compile(_DAEMON + r"(?: ?(?:odls:|hwloc:set on child|local:launch|SENDING SIG\w+ TO \[|"
                                       r"Sleep \d+ nsec)|\[[^\]]*/odls/)")
# Signals by the text the runtime gives them (its strsignal: "Killed", "Aborted"; this host's C library).
_SIGNAL_TEXTS = {signal.strsignal(sig): int(sig) for sig in signal.valid_signals()
                 if signal.strsignal(sig) is not None}


class RankExits:
    """The ranks' exit codes as the launcher knows them, and the first non-zero one: from the lines Open MPI's
    runtime prints as it reaps each rank (its launcher's, at :data:`REAPER_VERBOSITY`, in mpirun's stderr),
    and from the statuses of ranks seen as zombies (:meth:`seen`).

    Told not to end the job at a rank's non-zero exit (it would throw away what other ranks have written and
    it has not read yet), mpirun exits 0 whatever the ranks' codes, and the runtime reaps a rank before the
    launcher can read its status in ``/proc`` as a rule (none of 40 ranks' statuses seen in 10 runs of 4 ranks
    leaving with ``os._exit``): the runtime's lines are what still tells a failed rank. :meth:`claim` (a
    :class:`PipeReader` ``claim``) takes each line of mpirun's stderr, in the reader's thread.
    """

    def __init__(self, hide: bool = True) -> None:
        self.hide = hide                      # leave the launcher's verbose lines out of the job's stderr
        self.pids: dict[int, int] = {}        # rank -> pid of the rank's process, once reaped
        self.codes: dict[int, int] = {}       # rank -> exit code (ranks ended by a signal have none)
        self.signals: dict[int, int] = {}     # rank -> the signal that ended it
        self.reaped: dict[int, float] = {}    # rank -> when the runtime's line of its reaping came (epoch)
        self.first: tuple[int, int, float] | None = None  # (rank, code, monotonic time) of the first non-zero

    def claim(self, line: str) -> bool:
        """Record what ``line`` says of a reaped rank; return whether it is the launcher's own line."""
        if (m := _REAPED_PID.match(line)) is not None:
            self.pids[int(m.group(1))] = int(m.group(2))
            self.reaped.setdefault(int(m.group(1)), time.time())
        elif (m := _REAPED_CODE.match(line)) is not None:
            self._exited(int(m.group(1)), int(m.group(2)))
        elif (m := _REAPED_SIGNAL.match(line)) is not None and m.group(2) in _SIGNAL_TEXTS:
            self.signals[int(m.group(1))] = _SIGNAL_TEXTS[m.group(2)]
        return self.hide and _LAUNCHER_LINE.match(line) is not None

    def seen(self, ranks: dict[int, int], status: dict[int, int],
             ended: dict[int, float] | None = None) -> None:
        """Take the exits of ranks seen as zombies (``ranks``: pid -> rank; ``status``: pid -> waitpid status,
        as :class:`ftkit._jobwatch.RankWatch` keeps them), and add to ``status`` those of reaped ranks (and to
        ``ended``, pid -> the earliest time it was known ended, when the runtime's line came)."""
        for pid, st in list(status.items()):
            if pid in ranks and st > 0 and not st & 0x7F:
                self._exited(ranks[pid], st >> 8)
        # (Not a pid known here as another rank's: the runtime's pids of ranks on other hosts are theirs.)
        mine = {r: pid for r, pid in list(self.pids.items()) if ranks.get(pid, r) == r}
        status.update({mine[r]: code << 8 for r, code in list(self.codes.items()) if r in mine})
        status.update({mine[r]: sig for r, sig in list(self.signals.items()) if r in mine})
        for r, when in list(self.reaped.items()):
            if ended is not None and r in mine:
                ended[mine[r]] = min(when, ended.get(mine[r], when))

    def overdue(self, ranks: dict[int, int], status: dict[int, int], ended: dict[int, float]) -> bool:
        """Take the ranks seen as zombies (:meth:`seen`); return whether a rank exited non-zero more than
        :data:`NONZERO_EXIT_GRACE` seconds ago (a job still running then is to be ended)."""
        self.seen(ranks, status, ended)
        return self.first is not None and time.monotonic() - self.first[2] > NONZERO_EXIT_GRACE

    def outcome(self, returncode: int, *, ended: bool, killed: bool) -> tuple[int, str]:
        """The job's exit code from mpirun's ``returncode``, and what to add to the job's stderr.

        The first rank's non-zero exit code when mpirun exited 0 or was killed by the launcher (``ended``:
        :data:`NONZERO_EXIT_GRACE` after that exit; ``killed``: for another reason); otherwise mpirun's own
        code (non-zero by itself: a rank ended by a signal without ULFM, a lost host).
        """
        if self.first is None:
            return returncode, ""
        rank, code, _ = self.first
        text = (f"\nftkit: rank {rank} exited {code}, and the job was still running "
                f"{NONZERO_EXIT_GRACE:.0f} s later: ftkit launch ended it\n") if ended else ""
        return (code if returncode == 0 or ended or killed else returncode), text

    def _exited(self, rank: int, code: int) -> None:
        self.codes[rank] = code
        if code and self.first is None:
            self.first = (rank, code, time.monotonic())


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


def environ_rank(pid: int) -> int | None:
    """The world rank in process ``pid``'s environment (None: none, or unreadable)."""
    env = process_environ(pid)
    return None if env is None else world_rank(env)


def how_ended(status: int | None) -> str:
    """How a process with waitpid ``status`` ended (None or negative: not seen)."""
    if status is None or status < 0:
        return "killed (no exit seen: a signal, or os._exit)"
    if status & 0x7F:
        sig = status & 0x7F
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exited {status >> 8}"


def start_watchdog(sid: int, leftovers: Sequence[str]) -> tuple[subprocess.Popen[bytes] | None, int | None]:
    """Start the watchdog of session ``sid`` (:mod:`ftkit._watchdog`: it removes ``leftovers`` if this
    process dies); return it and the write end of its pipe."""
    try:
        return start_on_pipe(Path(__file__).with_name("_watchdog.py"), [str(sid), *leftovers])
    except OSError:
        return None, None


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


class Signals:
    """Catch the forwarded signals in the launcher while a job runs (main thread only); restore at the end."""

    def __init__(self, enabled: bool) -> None:
        self.pending: list[int] = []
        self.ending: int | None = None
        self._old: dict[int, object] = {}
        if enabled:
            for sig in FORWARDED_SIGNALS:
                self._old[sig] = signal.signal(sig, lambda signum, frame: self.pending.append(signum))

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
