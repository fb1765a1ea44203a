"""The shared-memory files of a singleton Open MPI process, removed when it ends, however it ends.

Open MPI's shared-memory transport maps one file per process, ``sm_segment.<host>.<uid>.<job>.<local
rank>`` in ``/dev/shm`` (16 MiB, held in memory until it is removed), and each process makes a session
directory (``<tmp>/ompi.<host>.<uid>/jf.0/<job>``, with one directory per rank in it). In a launched job
the runtime daemon removes them when the job ends, even those of killed ranks (``ftkit launch`` puts the
files in a private directory as well). A *singleton*, a program run without a launcher (``python app.py``,
a test process, a tool), never removes its file (Open MPI 5, even after ``MPI_Finalize``) nor its job's
session directory: every run would leave one in ``/dev/shm`` until the machine reboots.

A singleton that imported ftkit removes them:

* at interpreter exit (an ``atexit`` handler, which runs before mpi4py's ``MPI_Finalize``, or after an
  ``MPI_Finalize`` the program called) and when ftkit ends it without ``MPI_Finalize``
  (:func:`ftkit.uncaught.end_process`, after an uncaught exception): at once;
* whatever ends it without either (SIGTERM and the other signals whose default is to end a process,
  SIGKILL, ``os._exit``, a crash): a watcher started once MPI is up (:mod:`ftkit._shm_reaper`: a detached
  process that waits on a pipe only the singleton holds) removes them right after the singleton has gone,
  and only them (the file it mapped, checked by device and inode; the directories only if empty). No signal
  handler is installed: a signal ends the process as it did.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import jobstatus
from ._pipewatch import start_on_pipe

_PREFIX = "sm_segment."
_REGISTERED: list[bool] = []
#: This singleton's segment files as it mapped them: (path, device, inode).
_OWN: list[tuple[str, int, int]] = []
#: The write end of the watcher's pipe: held, never written, until the process ends.
_PIPE: list[int] = []
#: Seconds to wait for the watcher's first process (it forks the watcher and exits).
_START_TIMEOUT = 30.0


def register() -> None:
    """Arrange the clean-up at interpreter exit and the watcher once MPI is up (once; at ``import ftkit``;
    never raises)."""
    if not _REGISTERED:
        _REGISTERED.append(True)
        atexit.register(remove_leftovers)
        jobstatus.when_mpi_up(watch)


def watch(mpi: Any) -> None:
    """In a one-process world (a singleton) with MPI initialized, note this process's shared-memory files and
    start the watcher that removes them and its session directory after the process has gone, however it
    ends (nothing otherwise; never raises).

    Parameters
    ----------
    mpi
        The ``mpi4py.MPI`` module.
    """
    try:
        if _OWN or not _singleton(mpi):
            return
        for path in _mapped():
            st = os.stat(path)
            _OWN.append((path, st.st_dev, st.st_ino))
        if _OWN:
            files = [f"{path}:{dev}:{ino}" for path, dev, ino in _OWN]
            _start_watcher(files, session_dirs([path for path, _, _ in _OWN]))
    except Exception:  # noqa: BLE001 - a courtesy to the machine, never a reason to fail
        pass


def remove_leftovers() -> list[str]:
    """Remove this singleton's shared-memory files now; return their paths.

    Nothing else maps them, and the mapping stays valid until the process exits (only the names go). The
    files noted by :func:`watch` are removed if their paths still name them (also after ``MPI_Finalize``);
    without such a note, the files this process maps, if MPI is initialized and not finalized here and
    ``COMM_WORLD`` has one process. Never raises.
    """
    try:
        own = list(_OWN)
        if not own and _singleton(sys.modules.get("mpi4py.MPI")):
            own = [(p, -1, -1) for p in _mapped()]
        gone = []
        for path, dev, ino in own:
            try:
                st = os.lstat(path)
                if dev < 0 or (st.st_dev, st.st_ino) == (dev, ino):
                    os.unlink(path)
                    gone.append(path)
            except OSError:
                pass
        return sorted(gone)
    except Exception:  # noqa: BLE001 - a courtesy at exit, never a reason to fail
        return []


def session_dirs(segments: list[str]) -> list[str]:
    """Return the session directories of the Open MPI jobs whose shared-memory files are ``segments``, those
    that exist.

    Parameters
    ----------
    segments
        Paths of ``sm_segment.<host>.<uid>.<job>.<local rank>`` files (``<job>`` in hexadecimal); a
        singleton's job directory is ``<tmp>/ompi.<host>.<uid>/jf.<n>/<job>``, the job's number in decimal.
    """
    found = []
    for path in segments:
        parts = os.path.basename(path).split(".")
        if len(parts) < 5 or not parts[-2].isalnum():
            continue
        host, uid, job = ".".join(parts[1:-3]), parts[-3], str(int(parts[-2], 16))
        top = os.path.join(tempfile.gettempdir(), f"ompi.{host}.{uid}")
        try:
            families = [name for name in os.listdir(top) if name.startswith("jf.")]
        except OSError:
            continue
        found += [d for d in (os.path.join(top, f, job) for f in families) if os.path.isdir(d)]
    return sorted(set(found))


def _singleton(mpi: Any) -> bool:
    return bool(mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
                and mpi.COMM_WORLD.Get_size() == 1)


def _mapped() -> list[str]:
    """The Open MPI shared-memory files this process maps."""
    with open("/proc/self/maps") as fh:
        paths = {line.split(None, 5)[-1].strip() for line in fh if "/" + _PREFIX in line}
    return sorted(p for p in paths if os.path.basename(p).startswith(_PREFIX) and os.path.isfile(p))


def _start_watcher(files: list[str], dirs: list[str]) -> None:
    """Start :mod:`ftkit._shm_reaper` on a pipe whose write end only this process holds."""
    script = Path(__file__).with_name("_shm_reaper.py")
    proc, write_end = start_on_pipe(script, [*files, "--", *dirs], cwd="/")
    _PIPE.append(write_end)  # kept even if the wait below fails: a late watcher must not see end-of-file
    proc.wait(timeout=_START_TIMEOUT)  # its first process forks the watcher and exits at once
