"""One owner per run: a lock file in ``meta_dir`` that a second job on the same metadata cannot take.

Rank 0 of a :class:`~ftkit.checkpoint.Checkpointer` creates ``meta_dir/ftkit.lock`` with
``O_CREAT | O_EXCL`` (``O_NOFOLLOW``, mode 0600) when the job starts and removes it at ``finalize()`` (or when
the checkpointer is closed after an error). The file holds, as JSON, the owner's host name, process id,
job start time (seconds since the epoch) and a random token; its modification time is the *heartbeat*,
refreshed every :data:`HEARTBEAT_S` seconds by a background thread of the owner. A job that exits without
``finalize()`` releases the lock at interpreter exit; only a killed job leaves it behind.

A job that finds the lock held raises :class:`~ftkit.errors.RunLockedError` on every rank, naming the owner
(host, pid, start time) and what to do. The lock of a dead job is *stale* and is taken over:

* same host as the owner: the owner's pid no longer exists (or its heartbeat is older than
  :data:`STALE_AFTER_S`: the pid was reused);
* another host: the heartbeat is older than :data:`STALE_AFTER_S` seconds (so a job whose owner host
  died waits at most that long; clocks of the hosts must agree within a fraction of it);
* a *damaged* lock -- not a regular file (a FIFO is opened with ``O_NONBLOCK`` and never read), not JSON,
  or fields that do not parse or are out of range (a pid outside ``1 .. 2**31 - 1``, a start time that is
  not a finite time after the epoch): stale once its modification time is :data:`STALE_AFTER_S` old, and
  named in the message until then.

A heartbeat more than :data:`STALE_AFTER_S` in the future (a clock far off, a forged time) counts as silent.
A lock this process created but could not write (a full disk) is removed at once, so it never blocks the
next job.

Shared file systems: ``flock``/``fcntl`` locks are not used, as they are unreliable or absent on many parallel
and network file systems. The mechanism needs only what NFSv3+ and the usual parallel file systems provide
atomically: exclusive creation (``O_EXCL``) and ``unlink``. A takeover is serialized by a second exclusive
file, ``ftkit.lock.takeover``: the job that creates it re-reads the lock, checks that it is still the
same stale lock (same token), removes it and creates its own with ``O_EXCL``; any other job fails to create
the takeover file or the lock and reports the owner. So two jobs can never both own the run. A takeover file
left by a job killed in the middle of a takeover (a window of milliseconds) is itself removed once older
than :data:`STALE_AFTER_S`.

Durability: exclusivity comes from ``O_EXCL``, not from an fsync, so the lock file is created and written
without one and the owner's heartbeat thread fsyncs it as its first action: off the start-up path, where the
fsync of a 100-byte file cost 0.2-0.5 s on a disk busy with other jobs' writes (ext4 commits the whole
journal transaction). A machine crash before that fsync can leave an empty lock file, which is stale once
older than :data:`STALE_AFTER_S` (like one whose owner died while writing it), as before within the fsync.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import secrets
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import RunLockedError
from ..storage.runactivity import LOCK_NAME, STALE_AFTER_S, pid_alive

__all__ = ["RunLock", "LockOwner", "LOCK_NAME", "HEARTBEAT_S", "STALE_AFTER_S", "acquire_run_lock"]

_TAKEOVER = LOCK_NAME + ".takeover"
#: Seconds between two heartbeats of the owner.
HEARTBEAT_S = 10.0
_MAX_LOCK_BYTES = 4096
#: Largest pid a lock may name (pids are positive C ints; Linux caps them at 2**22).
_MAX_PID = 2**31 - 1
#: Latest start time a lock may name (seconds since the epoch: the year 5138, far beyond any real job).
_MAX_STARTED = 1e11


@dataclass(frozen=True)
class LockOwner:
    """What a lock file says about its owner."""

    host: str
    pid: int
    started: float
    token: str
    heartbeat: float      # modification time of the lock file

    def describe(self) -> str:
        """The owner for messages: host, pid, start time (UTC) and last heartbeat."""
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return (f"host {self.host!r}, pid {self.pid}, started at {started}, last heartbeat "
                f"{max(0.0, time.time() - self.heartbeat):.0f} s ago")


def _read_owner(path: Path) -> LockOwner | None:
    """Parse the lock file; None if it is damaged (not a regular file, or not a lock ftkit wrote completely,
    with every field in range). FileNotFoundError if gone.

    ``O_NONBLOCK``: opening a FIFO planted at the lock's name must not wait for a writer.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        raw = os.read(fd, _MAX_LOCK_BYTES + 1)
    finally:
        os.close(fd)
    try:
        d = json.loads(raw.decode())
        pid, started = d["pid"], d["started"]
        owner = LockOwner(str(d["host"]), pid, float(started), str(d["token"]), st.st_mtime)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError, AttributeError,
            OverflowError):
        return None
    if (len(raw) > _MAX_LOCK_BYTES or isinstance(pid, bool) or not isinstance(pid, int)
            or not 0 < pid <= _MAX_PID or isinstance(started, bool)
            or not (math.isfinite(owner.started) and 0 <= owner.started <= _MAX_STARTED)):
        return None
    return owner


def _silent(mtime: float) -> bool:
    """Whether a heartbeat at ``mtime`` is older (or further in the future) than :data:`STALE_AFTER_S`."""
    return not abs(time.time() - mtime) <= STALE_AFTER_S   # also true for a NaN time


def _is_stale(owner: LockOwner | None, mtime: float, host: str) -> bool:
    if owner is None:
        return _silent(mtime)
    silent = _silent(owner.heartbeat)
    if owner.host == host:
        return silent or not pid_alive(owner.pid)  # silent: the pid was reused by another process
    return silent


def _create(path: Path, body: bytes, *, sync: bool = True) -> bool:
    """Create ``path`` exclusively with ``body`` (fsynced unless ``sync`` is false); False if it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    except BaseException:
        # Created but not written (a full disk): an empty lock would hold the next job off as "in use" for
        # STALE_AFTER_S. It is ours (O_EXCL), so remove it.
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
    return True


def _fsync_path(path: Path) -> None:
    with contextlib.suppress(OSError):   # released (or meta_dir removed) meanwhile: nothing to make durable
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class RunLock:
    """The lock this job holds on its ``meta_dir``; :meth:`release` removes it (idempotent)."""

    def __init__(self, meta_dir: Path, token: str) -> None:
        self.path = Path(meta_dir) / LOCK_NAME
        self.token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="ftkit-run-lock")
        self._thread.start()
        # A job that ends without finalize() (an error, sys.exit) still releases its lock; a killed one
        # leaves it to be taken over as stale.
        atexit.register(self.release)

    def _beat(self) -> None:
        _fsync_path(self.path)   # the lock's own fsync, off the start-up path (see the module docstring)
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path, follow_symlinks=False)

    def release(self) -> None:
        """Stop the heartbeat and remove the lock file if it is still this job's."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            owner = _read_owner(self.path)
            if owner is not None and owner.token == self.token:
                self.path.unlink()
        except OSError:
            pass  # already gone (or meta_dir removed): nothing to release


def _take_over(meta_dir: Path, seen: LockOwner | None, seen_mtime: float, body: bytes) -> bool:
    """Replace the stale lock that was read as ``seen``; False if another job got there first."""
    takeover = meta_dir / _TAKEOVER
    if not _create(takeover, b"takeover"):
        with contextlib.suppress(OSError):
            if time.time() - takeover.lstat().st_mtime > STALE_AFTER_S:
                takeover.unlink()  # left by a job killed mid-takeover; the next attempt may proceed
        return False
    try:
        lock = meta_dir / LOCK_NAME
        try:
            now = _read_owner(lock)
            now_mtime = lock.lstat().st_mtime
        except FileNotFoundError:
            now, now_mtime = None, None
        if now_mtime is not None:  # still there: it must be the very lock judged stale
            if now is not None and seen is not None:
                same = now.token == seen.token
            else:
                same = now is None and seen is None and now_mtime == seen_mtime
            if not same:
                return False
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        return _create(lock, body, sync=False)   # fsynced by the new owner's RunLock
    finally:
        with contextlib.suppress(OSError):
            takeover.unlink()


def _damaged(path: Path, mtime: float) -> str:
    """The holder of a damaged lock, for messages: what it may be and when it is taken over."""
    wait = max(0.0, STALE_AFTER_S - abs(time.time() - mtime))
    return (f"the lock file {path} is damaged -- not a regular file, or fields that do not parse or are out "
            "of range: a job still writing it, one that died while writing it, or another program's file; "
            f"it is taken over in {wait:.0f} s ({STALE_AFTER_S:.0f} s after its last change), or remove it "
            "now if no job uses this meta_dir")


def acquire_run_lock(meta_dir: Path, started: float) -> RunLock:
    """Take the run lock of ``meta_dir`` for this process (call on one rank only).

    Parameters
    ----------
    meta_dir
        The run's metadata directory (it exists).
    started
        The job's start time (seconds since the epoch), recorded for messages.

    Raises
    ------
    RunLockedError
        If another live job holds the lock; the message names it and what to do.
    OSError
        If the lock file cannot be created for another reason (permissions, full disk).
    """
    meta_dir = Path(meta_dir)
    host = socket.gethostname()
    token = secrets.token_hex(16)
    body = json.dumps({"host": host, "pid": os.getpid(), "started": started, "token": token}).encode()
    path = meta_dir / LOCK_NAME
    for _ in range(3):  # the lock may vanish (released) between the failed create and the read
        if _create(path, body, sync=False):   # fsynced by RunLock's heartbeat thread
            return RunLock(meta_dir, token)
        try:
            owner = _read_owner(path)
            mtime = path.lstat().st_mtime
        except FileNotFoundError:
            continue
        if not _is_stale(owner, mtime, host):
            who = owner.describe() if owner is not None else _damaged(path, mtime)
            raise RunLockedError(
                f"meta_dir {meta_dir} is in use by another job ({who}): two jobs must not share a run's "
                f"metadata. Wait for that job to finish, or give this job its own meta_dir (and exec_id); "
                f"if that job is dead on another host, {path} is taken over automatically "
                f"{STALE_AFTER_S:.0f} s after its last heartbeat")
        if _take_over(meta_dir, owner, mtime, body):
            return RunLock(meta_dir, token)
    raise RunLockedError(f"meta_dir {meta_dir}: another job took the run lock {path} at the same time: "
                         "only one job may use a run's metadata; wait for it or use another meta_dir")
