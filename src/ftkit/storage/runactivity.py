"""Is a run's job still running? Read, never changed, from the run lock in its ``meta_dir``.

The lock (``meta_dir/ftkit.lock``) is written and removed by :mod:`ftkit.checkpoint.runlock`, whose
docstring states its contract: JSON with the owner's ``host``, ``pid``, ``started`` (seconds since the
epoch) and ``token``; its modification time is a heartbeat refreshed every 10 s; it is removed at
``finalize()`` and at interpreter exit, so only a killed job leaves it behind. This module reads that file
for ``ftkit ls``. It is a lower layer than :mod:`ftkit.checkpoint`, so the file name (:data:`LOCK_NAME`),
the staleness limit (:data:`STALE_AFTER_S`) and the liveness test of an owner's pid (:func:`pid_alive`) live
here and ``runlock`` uses them.

A manifest with status ``"running"`` then means:

* ``running``: the lock exists and is live (on this host: its pid exists; on any host: a heartbeat within
  :data:`STALE_AFTER_S` seconds);
* ``ended``: no lock (the job exited without ``finalize()``), or a stale one (the job was killed).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .._jobproc import is_zombie

__all__ = ["LOCK_NAME", "STALE_AFTER_S", "RunActivity", "run_activity", "pid_alive"]

LOCK_NAME = "ftkit.lock"
STALE_AFTER_S = 120.0
_MAX_LOCK_BYTES = 4096


@dataclass(frozen=True)
class RunActivity:
    """What the run lock says: ``state`` is ``running`` or ``ended``; ``detail`` says why, for people."""

    state: str
    detail: str
    host: str = ""
    pid: int = 0
    heartbeat_age_s: float | None = None   # seconds since the owner's last heartbeat (None: no lock)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists and holds something (a killed owner not yet reaped, a
    zombie, holds nothing; a process of another user exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not is_zombie(pid)


def run_activity(meta_dir: Path, now: float | None = None) -> RunActivity:
    """Judge from ``meta_dir``'s run lock whether the job whose manifest says ``running`` still runs."""
    path = Path(meta_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return RunActivity("ended", "no run lock: the job exited without finalize()")
    except OSError as exc:
        return RunActivity("ended", f"run lock unreadable ({exc})")
    try:
        age = (time.time() if now is None else now) - os.fstat(fd).st_mtime
        raw = os.read(fd, _MAX_LOCK_BYTES + 1)
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw.decode())
        host, pid = str(doc["host"]), int(doc["pid"])
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError, AttributeError):
        host, pid = "", 0
    if age > STALE_AFTER_S:
        return RunActivity("ended", f"killed: last heartbeat {age:.0f} s ago", host, pid, age)
    if host == socket.gethostname() and pid > 0 and not pid_alive(pid):
        return RunActivity("ended", f"killed: its process {pid} on this host is gone", host, pid, age)
    where = f" on {host}, pid {pid}" if host else ""
    return RunActivity("running", f"live{where}: last heartbeat {age:.0f} s ago", host, pid, age)
