"""Taking over a file no reader needs any more, to write a new file over its bytes (recycling).

A writer that makes a file of the same size again and again under new names (a failure-tolerant routine's
per-call input, :mod:`ftkit.storage.inputs`) pays, for a new file each time, the kernel's allocation of its
page-cache pages and, when the old one is removed, their freeing: most of the system time of such a save.
Writing over a retired file instead reuses its pages. :class:`~ftkit.storage._fsutil.AtomicWriter` does it
under its usual temporary name (the retired file is renamed to it): the final name appears only at commit,
with every byte written, as for a new file; the stale bytes past the new end are cut at commit.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["take_over"]


def take_over(old: Path, tmp: Path) -> int | None:
    """Rename the regular file ``old`` to the temporary name ``tmp`` and open it for writing (not truncated).

    Returns the descriptor, or ``None`` if ``old`` is missing, not a regular file (a symbolic link is never
    followed: it is left where it is) or on another file system: the caller then makes a new file.

    Raises
    ------
    OSError
        If the file cannot be renamed, or was renamed but cannot be opened (it is then removed).
    """
    try:
        if not stat.S_ISREG(os.lstat(old).st_mode):
            return None
        os.rename(old, tmp)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return None
        raise
    try:
        return os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ELOOP:  # replaced by a symbolic link meanwhile: never written through
            return None
        raise
