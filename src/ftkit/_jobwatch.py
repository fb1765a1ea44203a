"""Run a launched job to its end and tell how each rank ended (the body of :func:`ftkit.launch.run_mpi`).

The launcher (mpirun, mpiexec, srun) runs in a session of its own. While it runs, :class:`RankWatch` finds
the job's ranks among that session's processes (their environment names their world rank), records the
exit status of those seen as zombies, reads the notes the ranks write (:mod:`ftkit.jobstatus`), and
SIGKILLs every rank the others declared dead (a SIGSTOPped rank is declared dead, not dead: killed, it
cannot hold the job). At the end :meth:`RankWatch.verdict` says whether any rank failed and how, in one
line: under ULFM mpirun exits 0 when ranks were killed, so its code alone does not tell. Under Open MPI the
runtime does not end the job at a rank's non-zero exit (it would lose other ranks' output): the launcher
ends it a grace period later, with that exit code (:class:`~ftkit._jobproc.RankExits`).

The job owns its process tree: :class:`~ftkit._jobproc.Signals` forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1
and SIGUSR2 to every rank (``ftkit launch`` only), and after one of the first three, whatever still runs
after the grace period is killed; a watchdog process (:mod:`ftkit._watchdog`) kills the whole session when
the launcher itself dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from ._jobproc import (
    ENDING_SIGNALS,
    FORWARDED_SIGNALS,
    KILL_WAIT,
    RUNTIME_EXIT_GRACE,
    PipeReader,
    RankExits,
    Signals,
    combined_status,
    end_srun,
    environ_rank,
    is_running,
    kill_session,
    proc_stat,
    session_members,
    start_watchdog,
    watch_ranks,
)
from ._jobverdict import Endings, endings, failure_code, named_dead, ranks_text, verdict
from ._watchdog import CLEANING
from .jobstatus import Note, read_notes

__all__ = ["RankWatch", "Signals", "run_job", "FORWARDED_SIGNALS", "ENDING_SIGNALS", "LOST_HOST_TEXT"]

#: What Open MPI's runtime (PRRTE) prints when it loses one of its daemons, i.e. a host, and ends the job.
LOST_HOST_TEXT = "PRTE has lost communication with a remote daemon"


class RankWatch:
    """What the launcher knows about the ranks of the job running in session ``sid``."""

    def __init__(self, sid: int, status_dir: str | None, start_bound: float | None = None,
                 start_ranks: int = 0) -> None:
        self.sid = sid
        self.status_dir = status_dir
        self.start_bound = start_bound  # seconds ranks may wait in MPI_Init for one that ended (None: ever)
        self.start_ranks = start_ranks  # how many ranks the job starts on this host (0: not known)
        self.start_failure = ""         # why the launcher ended ranks that waited in MPI_Init
        self._mpi_up = False            # some rank has completed MPI_Init
        self._ended_before_up: float | None = None  # since when a rank has ended before MPI_Init completed
        self._gone_before_up: set[int] = set()  # the ranks first seen ended while others waited in MPI_Init
        self.ranks: dict[int, int] = {}        # pid -> world rank, for every rank process seen
        self.status: dict[int, int] = {}       # pid -> waitpid status (zombies seen), -2 while running
        self.killed: dict[int, str] = {}       # pid -> why the launcher killed it
        self.notes: list[Note] = []
        # pid -> when the rank was first known ended (an upper bound: the poll that found it gone, the line of
        # the runtime that reaped it), and when it was last seen running (a lower bound), in epoch seconds
        self.ended_at: dict[int, float] = {}
        self._running_at: dict[int, float] = {}
        self._alone_since: float | None = None  # since when only stopped ranks are left running
        self._started_by_ranks: set[int] = set()  # pids of processes the ranks started (not ranks)

    def poll(self) -> int:
        """Look at the job's processes and notes, kill the declared dead; return how many ranks run."""
        live = watch_ranks(self.sid, self.status)
        for pid in session_members(self.sid):
            if pid == self.sid or pid in self.ranks or pid in self._started_by_ranks:
                continue
            rank = environ_rank(pid)
            parent = proc_stat(pid)
            if rank is None or parent is None:
                continue
            # A process whose parent carries a rank's environment was started by a rank (a shell, a compiler
            # that ctypes.util.find_library runs, and the linker that compiler runs): not a rank, whatever
            # its exit code. Its parent is asked directly, not looked up among the ranks seen, so a
            # grandchild is not taken for a rank when the child in between was never one.
            ppid = int(parent[1])
            if ppid in self.ranks or ppid in self._started_by_ranks or environ_rank(ppid) is not None:
                self._started_by_ranks.add(pid)
            else:
                self.ranks[pid] = rank
        for pid in set(self.ranks) - set(self.ended_at):
            now = time.time()  # before the look: running at or after it; ended before the time after it
            if is_running(pid):
                self._running_at[pid] = now
            else:
                self.ended_at[pid] = time.time()
        if self.status_dir is not None:
            self.notes = read_notes(self.status_dir)
            self._kill_declared_dead()
            if self.start_bound is not None and not self._mpi_up:
                self._end_failed_start()
        self._kill_stopped_alone()
        return live

    def _end_failed_start(self) -> None:
        """SIGKILL the ranks that still wait in ``MPI_Init`` :attr:`start_bound` seconds after a rank ended
        before any rank had completed it (its ``up`` note): ``MPI_Init`` waits for every rank of the job, so
        they would wait for good (Open MPI's and MPICH's runtimes do not end the job)."""
        if any(n.kind == "up" for n in self.notes):
            self._mpi_up, self._ended_before_up = True, None
            return
        noted = {n.pid: n.rank for n in self.notes if n.kind in ("begin", "start")}
        if not noted:  # the ranks cannot say when MPI_Init completes (not Python, or `python -I`)
            return
        known = {**self.ranks, **noted}
        waiting = {pid: rank for pid, rank in known.items() if is_running(pid)}
        # A rank killed within a poll of its start left no note and was never seen: it is missing too.
        ended = sorted(set(range(self.start_ranks)) - set(waiting.values()) if self.start_ranks else
                       {rank for rank in known.values()} - set(waiting.values()))
        if not ended or not waiting:
            self._ended_before_up = None
            return
        # The first seen gone (the others fail or wait in MPI_Init after it): the verdict names them.
        if not self._gone_before_up:
            self._gone_before_up = {r for r in known.values() if r not in waiting.values()}
        now = time.monotonic()
        self._ended_before_up = self._ended_before_up or now
        if now - self._ended_before_up < self.start_bound:  # type: ignore[operator]
            return
        self.start_failure = (f"{ranks_text(ended)} ended (or never started) before MPI_Init had completed "
                              f"on any rank; the other ranks, waiting in MPI_Init for "
                              f"{'them' if len(ended) > 1 else 'it'}, were killed by ftkit launch "
                              f"{self.start_bound:.0f} s later")
        for pid in waiting:
            try:
                os.kill(pid, signal.SIGKILL)
                self.killed[pid] = "waiting in MPI_Init for a rank that had ended: killed by ftkit launch"
            except (ProcessLookupError, PermissionError):
                pass

    def _kill_stopped_alone(self) -> None:
        """SIGKILL the ranks still stopped (SIGSTOP, a debugger) :data:`RUNTIME_EXIT_GRACE` seconds after
        every other rank has ended: nobody is left to resume them, and mpirun waits for them forever. A hung
        rank that no survivor declared dead (a head, when no post-processing reaches it) ends so."""
        states = {pid: proc_stat(pid) for pid in self.ranks}
        running = {pid for pid, fields in states.items()
                   if fields is not None and fields[0] not in ("Z", "X")}
        stopped = {pid for pid in running if states[pid][0] in ("T", "t")}  # type: ignore[index]
        if not stopped or running - stopped or len(running) == len(self.ranks):
            self._alone_since = None
            return
        now = time.monotonic()
        self._alone_since = self._alone_since or now
        if now - self._alone_since < RUNTIME_EXIT_GRACE:
            return
        for pid in stopped - set(self.killed):
            try:
                os.kill(pid, signal.SIGKILL)
                self.killed[pid] = ("stopped (hung), still stopped after every other rank had ended: killed "
                                    "by ftkit launch")
            except (ProcessLookupError, PermissionError):
                pass

    def _kill_declared_dead(self) -> None:
        dead = set()
        for n in self.notes:
            if n.kind == "dead":
                dead |= named_dead(n.text)
        for pid, rank in self.ranks.items():
            if rank in dead and pid not in self.killed and self.status.get(pid, -2) == -2:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.killed[pid] = "declared dead by the other ranks, killed by ftkit launch"
                except (ProcessLookupError, PermissionError):
                    pass

    def signal_ranks(self, signum: int) -> None:
        """Send ``signum`` to every rank process still running."""
        for pid in self.ranks:
            fields = proc_stat(pid)
            if fields is not None and fields[0] not in ("Z", "X"):
                try:
                    os.kill(pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass

    def verdict(self, returncode: int) -> tuple[bool, str]:
        """``(failed, line)``: whether any rank failed (or the launcher returned non-zero) and how
        (:func:`ftkit._jobverdict.verdict`)."""
        return verdict(self._endings(), returncode, start_failure=self.start_failure,
                       gone_first=self._gone_before_up, up=any(n.kind == "up" for n in self.notes))

    def failure_code(self) -> int:
        """The exit code of the job if it failed although its launcher exited 0
        (:func:`ftkit._jobverdict.failure_code`)."""
        return failure_code(self._endings(), self.status, self.killed, self.ended_at)

    def _endings(self) -> Endings:
        return endings(self.notes, self.ranks, self.status, self.killed, self.ended_at, self._running_at)


def run_job(name: str, cmd: list[str], nprocs: int, timeout: float, cwd: str | os.PathLike[str] | None,
            capture: bool, status_dir: str | None, *, grace: float, forward_signals: bool,
            start_bound: float | None = None, start_ranks: int = 0,
            leftovers: Sequence[str] = ()) -> tuple[int, str, str, bool, int | None]:
    """Run ``cmd`` (launcher ``name``) to its end; return ``(returncode, stdout, stderr, timed_out,
    ending_signal)``. See :func:`ftkit.launch.run_mpi`. ``leftovers``: the job's directories, which the
    caller removes after this returns; if the caller is killed first, the watchdog removes them. Under Open
    MPI, the first rank's non-zero exit (:class:`~ftkit._jobproc.RankExits`) ends a job still running
    :data:`~ftkit._jobproc.NONZERO_EXIT_GRACE` seconds later and is its exit code (unless mpirun exits
    non-zero by itself).

    Length: one loop that watches the ranks, forwards signals and enforces the timeout and grace period,
    and one ``finally`` that always kills the whole session; split, the exits would be hard to follow.
    """
    start = time.monotonic()
    catcher = Signals(forward_signals)
    # mpirun's stderr is always read (and passed on at once when not captured): it alone tells a lost host.
    read_err = capture or name == "openmpi"
    proc = subprocess.Popen(
        cmd, cwd=cwd, start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if read_err else None,
        text=True,
    )
    dog, dog_pipe = start_watchdog(proc.pid, leftovers)
    # The runtime's lines that tell the ranks' exits are left out of stderr when ftkit asked for them.
    exits = RankExits(hide="odls_base_verbose" in cmd) if name == "openmpi" else None
    readers = [PipeReader(proc.stdout), PipeReader(proc.stderr, echo=None if capture else sys.stderr,
                                                   claim=exits.claim if exits is not None else None)]
    watch = RankWatch(proc.pid, status_dir, start_bound, start_ranks)
    timed_out = stuck = ended = False
    grace_end: float | None = None
    all_exited_since: float | None = None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now - start > timeout or (grace_end is not None and now > grace_end):
                timed_out = grace_end is None
                break
            # Only mpirun's ranks are its local descendants; srun's run under slurmd, Hydra's under a proxy.
            live = watch.poll() if name == "openmpi" else 1
            # The runtime will not end it.
            if exits is not None and exits.overdue(watch.ranks, watch.status, watch.ended_at):
                ended = True
                break
            while catcher.pending:
                sig = catcher.pending.pop(0)
                if name == "openmpi":
                    watch.signal_ranks(sig)
                else:
                    proc.send_signal(sig)
                if sig in ENDING_SIGNALS and grace_end is None:
                    catcher.ending, grace_end = sig, time.monotonic() + grace
            if watch.status and not live:
                all_exited_since = all_exited_since or now
                if now - all_exited_since > RUNTIME_EXIT_GRACE:
                    stuck = True
                    break
            else:
                all_exited_since = None
            try:   # returns as soon as the launcher exits (a sleep here delayed every job's end by ~0.1 s)
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if name == "srun" and proc.poll() is None:
            end_srun(proc)
        # The launcher, the ranks, and anything they left behind: the whole session goes.
        left = kill_session(proc.pid)
        proc.wait()
        catcher.restore()
        if dog_pipe is not None:
            with contextlib.suppress(OSError):
                os.write(dog_pipe, CLEANING)
            os.close(dog_pipe)
        if dog is not None:
            try:
                dog.wait(timeout=KILL_WAIT)
            except subprocess.TimeoutExpired:
                dog.kill()
                dog.wait()
    if name == "openmpi":
        watch.poll()
    out, err = (r.text() for r in readers)
    if exits is not None:
        exits.seen(watch.ranks, watch.status, watch.ended_at)
    returncode = proc.returncode
    if stuck:
        returncode = combined_status(watch.status, nprocs)
        err += (f"\nftkit: every rank had exited but mpirun had not after {RUNTIME_EXIT_GRACE:.0f} s; "
                "it was killed\n")
    if exits is not None and not timed_out:
        returncode, text = exits.outcome(returncode, ended=ended, killed=stuck)
        err += text
    if left:
        err += f"\nftkit: processes {left} of the job were still running {KILL_WAIT:.0f} s after SIGKILL\n"
    failed, line = watch.verdict(returncode)
    if name == "openmpi" and LOST_HOST_TEXT in err and returncode == 0:
        # PRRTE 3.0 ends the job when it loses a daemon (a host powered off or cut off) but exits 0.
        failed, line = True, (line or "ftkit launch: the job failed") + (
            "; mpirun lost a host (\"" + LOST_HOST_TEXT + "\") and ended the job")
    if line:
        # On a line of its own, even after a rank's unfinished line (Open MPI's messages also end in NULs).
        if err.replace("\0", "") and not err.replace("\0", "").endswith("\n"):
            line = "\n" + line
        err += line + "\n"
        if not capture:
            print(line, file=sys.stderr, flush=True)
    if failed and returncode == 0 and not timed_out:
        returncode = watch.failure_code()
    return returncode, out, err, timed_out, catcher.ending
