"""Helper processes that learn of this process's end: started on a pipe whose write end only it holds.

The helper (a standalone script of this package, started as ``python -I -S SCRIPT ARGS``: it imports
nothing of ftkit, so it starts in a few milliseconds and cannot fail on an import) reads its standard input;
the read returns end-of-file once this process has ended, however (even by SIGKILL, which no handler sees),
and only then: the write end is close-on-exec, so no program this process starts holds it. The helper runs
in a session of its own, so a signal to this process's group does not reach it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["start_on_pipe"]


def start_on_pipe(script: str | os.PathLike[str], args: Sequence[str], *,
                  cwd: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``script`` with ``args`` on a new pipe; return it and the pipe's write end (keep it open, write
    to it only what the script expects, close it or exit to tell the script this process is done).

    Parameters
    ----------
    script
        A script beside this module (``Path(__file__).with_name(...)``).
    args
        Its arguments.
    cwd
        Its working directory (default: this process's).

    Raises
    ------
    OSError
        If it cannot be started (nothing is left open then).
    """
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(Path(script)), *args], stdin=read_end,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                                start_new_session=True)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return proc, write_end
