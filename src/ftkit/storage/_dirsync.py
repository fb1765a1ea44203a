"""Durable directory entries: fsync of a directory, and the parent fsyncs a new directory may owe until then.

:func:`~ftkit.storage._fsutil.make_dirs` ``(defer_parent_fsync=True)`` creates a directory without fsyncing
its parent: the directory *owes* that fsync (:func:`owe_parent_fsync`), and the first :func:`fsync_dir` of the
directory pays it, up the chain of directories created together. Every file committed into a directory
fsyncs it (:class:`~ftkit.storage._fsutil.AtomicWriter`), so a directory's entry is durable before anything
in it is claimed durable; paid after the file's own fsync, which has already committed the file system's
journal, the parent fsync costs little, where paid at creation (a checkpoint call's start) it waited for
whatever the journal held (issue 37). This module imports nothing of ftkit.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["fsync_dir", "owe_parent_fsync", "owed_dir_fsyncs", "remove_empty_dirs"]

#: Directories (absolute paths) → their parent, whose fsync (making the directory's entry durable) is owed.
_owed: dict[str, str] = {}
_owed_lock = threading.Lock()


def owe_parent_fsync(directory: Path) -> None:
    """Record that ``directory`` (just created) owes its parent's fsync; :func:`fsync_dir` of it pays."""
    with _owed_lock:
        _owed[os.path.abspath(directory)] = os.path.abspath(Path(directory).parent)


def fsync_dir(path: Path) -> None:
    """fsync directory ``path`` so a rename or creation inside it is durable; then pay the parent fsyncs
    ``path`` owes (:func:`owe_parent_fsync`)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    key = os.path.abspath(path)
    with _owed_lock:
        parent = _owed.pop(key, None)
    if parent is not None:
        try:
            fsync_dir(Path(parent))  # which pays the parent's own debt, up the chain of created directories
        except BaseException:
            with _owed_lock:
                _owed.setdefault(key, parent)  # still owed: the next fsync of ``path`` tries again
            raise


def owed_dir_fsyncs() -> dict[str, str]:
    """The directories (absolute paths) whose entry's fsync is still owed, each with the parent to fsync."""
    with _owed_lock:
        return dict(_owed)


def remove_empty_dirs(path: Path, stop: Path) -> None:
    """Remove ``path`` and its parents up to (not including) ``stop`` while they are empty."""
    p = path
    try:
        p.relative_to(stop)
    except ValueError:
        return
    while p != stop and p != p.parent:
        try:
            p.rmdir()
        except OSError:
            return
        p = p.parent
