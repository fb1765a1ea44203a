"""The halt record: ``ftkit halt`` asks a running job to checkpoint and exit at its next step (SCR's
``scr_halt``).

``meta_dir/ftkit.halt`` is one small JSON document, written atomically (temporary name, fsync, rename) and
parsed strictly: a record of another format, an unknown state or a field of the wrong type is a
:class:`~ftkit.errors.FormatError`, never half-read; nothing is unpickled. Schema (version 1)::

    {"format": "ftkit-halt", "version": 1,
     "state": "pending" | "done",
     "requested": 1.7e9,            # when ftkit halt wrote it (seconds since the epoch)
     "at": 1.7e9 | null,            # halt at this time; null: at the next step
     "by": "user@host",             # who asked (for people)
     "done": null | {"time": 1.7e9, "exec_id": "...", "checkpoint": 12 | null}}

A job reads it cheaply: :class:`HaltWatch` (rank 0 only) ``stat``\\s the file at each exit check and reads it
again only when its inode, size or modification time changed. A *pending* record whose ``at`` has come halts
the job; the job that stops for it rewrites it as *done* with the checkpoint it took, so the next job of the
run starts and continues normally. ``ftkit halt --cancel`` removes a pending record.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import FormatError, StorageError
from ._fsutil import atomic_write_bytes

__all__ = ["HALT_NAME", "HaltRecord", "halt_path", "who", "parse_halt", "read_halt", "write_halt",
           "remove_halt", "HaltWatch"]

HALT_NAME = "ftkit.halt"
_FORMAT, _VERSION = "ftkit-halt", 1
_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class HaltRecord:
    """A halt request: pending or done, for ``at`` (None: at once), and what the job that honoured it did."""

    state: str
    requested: float
    at: float | None = None
    by: str = ""
    done_time: float | None = None
    done_exec_id: str = ""
    done_checkpoint: int | None = None

    def due(self, now: float) -> bool:
        """Whether a job should halt for this record at time ``now`` (seconds since the epoch)."""
        return self.state == "pending" and (self.at is None or now >= self.at)

    def honoured(self, exec_id: str, checkpoint: int | None, now: float | None = None) -> HaltRecord:
        """Return this record marked done by run ``exec_id`` with ``checkpoint`` (None: none was taken)."""
        return replace(self, state="done", done_time=time.time() if now is None else now,
                       done_exec_id=exec_id, done_checkpoint=checkpoint)

    def to_json(self) -> dict[str, Any]:
        """The record as its JSON document."""
        done = None if self.state != "done" else {"time": self.done_time, "exec_id": self.done_exec_id,
                                                   "checkpoint": self.done_checkpoint}
        return {"format": _FORMAT, "version": _VERSION, "state": self.state, "requested": self.requested,
                "at": self.at, "by": self.by, "done": done}

    def describe(self) -> str:
        """One line for people."""
        when = "at the next step" if self.at is None else f"at {_iso(self.at)}"
        if self.state == "pending":
            return f"halt pending: {when} (asked by {self.by or '?'} at {_iso(self.requested)})"
        ckpt = (f"after checkpoint {self.done_checkpoint}" if self.done_checkpoint is not None
                else "without a checkpoint")
        return f"halt done: run {self.done_exec_id} stopped {ckpt} at {_iso(self.done_time or 0.0)}"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


def halt_path(meta_dir: str | os.PathLike[str]) -> Path:
    """Return the path of the halt record in ``meta_dir``."""
    return Path(meta_dir) / HALT_NAME


def who() -> str:
    """``user@host`` of this process (recorded in a halt request)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _time(v: Any, name: str, where: str, optional: bool = False) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise FormatError(f"{where}: {name} = {v!r} is not a time in seconds since the epoch")
    return float(v)


def parse_halt(text: str, where: str) -> HaltRecord:
    """Parse a halt record strictly.

    Raises
    ------
    FormatError
        If it is not a version-1 ``ftkit-halt`` JSON document with fields of the documented types.
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{where}: not JSON ({exc}): remove it with `ftkit halt META_DIR --cancel`") \
            from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != _VERSION:
        raise FormatError(f"{where}: not an ftkit halt record (format {_FORMAT!r}, version {_VERSION})")
    state = doc.get("state")
    if state not in ("pending", "done"):
        raise FormatError(f"{where}: state = {state!r}: expected 'pending' or 'done'")
    by = doc.get("by", "")
    if not isinstance(by, str):
        raise FormatError(f"{where}: by = {by!r} is not a string")
    rec = HaltRecord(state, _time(doc.get("requested"), "requested", where) or 0.0,
                     _time(doc.get("at"), "at", where, optional=True), by[:200])
    done = doc.get("done")
    if state == "pending":
        if done is not None:
            raise FormatError(f"{where}: a pending record has a 'done' part")
        return rec
    if not isinstance(done, dict):
        raise FormatError(f"{where}: a done record needs 'done': {{time, exec_id, checkpoint}}")
    ckpt, exec_id = done.get("checkpoint"), done.get("exec_id")
    if ckpt is not None and (isinstance(ckpt, bool) or not isinstance(ckpt, int) or ckpt < 1):
        raise FormatError(f"{where}: done.checkpoint = {ckpt!r} is not a checkpoint id")
    if not isinstance(exec_id, str):
        raise FormatError(f"{where}: done.exec_id = {exec_id!r} is not a string")
    return replace(rec, done_time=_time(done.get("time"), "done.time", where), done_exec_id=exec_id[:200],
                   done_checkpoint=ckpt)


def read_halt(meta_dir: str | os.PathLike[str]) -> HaltRecord | None:
    """Read ``meta_dir``'s halt record; None if there is none.

    Raises
    ------
    FormatError
        If it exists but is damaged (:func:`parse_halt`), or is not a regular file.
    StorageError
        If it cannot be read.
    """
    p = halt_path(meta_dir)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"{p}: cannot read the halt record: {exc.strerror or exc}") from exc
    try:
        raw = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > _MAX_BYTES:
        raise FormatError(f"{p}: larger than a halt record ({_MAX_BYTES} bytes)")
    try:
        return parse_halt(raw.decode(), str(p))
    except UnicodeDecodeError:
        raise FormatError(f"{p}: not UTF-8 text: not an ftkit halt record") from None


def write_halt(meta_dir: str | os.PathLike[str], record: HaltRecord) -> None:
    """Write ``record`` as ``meta_dir``'s halt record, atomically and durably.

    Raises
    ------
    StorageError
        If it cannot be written (the previous record, if any, is unchanged).
    """
    atomic_write_bytes(halt_path(meta_dir), (json.dumps(record.to_json()) + "\n").encode())


def remove_halt(meta_dir: str | os.PathLike[str]) -> None:
    """Remove ``meta_dir``'s halt record (nothing if there is none)."""
    try:
        halt_path(meta_dir).unlink()
    except FileNotFoundError:
        pass


class HaltWatch:
    """Rank 0's cheap watch of a run's halt record: one ``stat`` per :meth:`due` call, a read on change.

    A damaged record is ignored (and said once through ``warn``): a typo from a login node must never kill a
    running job.
    """

    def __init__(self, meta_dir: str | os.PathLike[str], warn: Any = None) -> None:
        self.meta_dir = Path(meta_dir)
        self._key: tuple[int, int, int] | None = None
        self.record: HaltRecord | None = None
        self._warn = warn

    def due(self, now: float | None = None) -> bool:
        """Whether a pending halt request has come due (one ``stat``; the file is read only if it changed)."""
        try:
            st = os.stat(halt_path(self.meta_dir))
        except OSError:
            self._key, self.record = None, None
            return False
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._key:
            self._key = key
            try:
                self.record = read_halt(self.meta_dir)
            except (FormatError, StorageError) as exc:
                self.record = None
                if self._warn is not None:
                    self._warn(f"ignoring the halt record: {exc}")
        return self.record is not None and self.record.due(time.time() if now is None else now)
