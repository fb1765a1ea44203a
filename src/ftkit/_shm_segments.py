"""The shared-memory files of a singleton Open MPI process, removed when it ends.

Open MPI's shared-memory transport maps one file per process, ``sm_segment.<host>.<uid>.<job>.<local
rank>`` in ``/dev/shm`` (16 MiB, held in memory until it is removed). In a launched job the runtime daemon
removes them when the job ends, even those of killed ranks (``ftkit launch`` puts them in a private
directory as well). A *singleton*, a program run without a launcher (``python app.py``, a test process, a
tool), never removes its own (Open MPI 5): every run would leave one in ``/dev/shm`` until the machine
reboots. A singleton that imported ftkit removes its files when it ends: at interpreter exit (an ``atexit``
handler, which runs before mpi4py's ``MPI_Finalize``) or when ftkit ends it without ``MPI_Finalize``
(:func:`ftkit.uncaught.end_process`, after an uncaught exception).
"""

from __future__ import annotations

import atexit
import os
import re
import sys

_NAME = re.compile(r"^sm_segment\..+\.\d+$")
_REGISTERED: list[bool] = []


def register() -> None:
    """Arrange the clean-up at interpreter exit (once; at ``import ftkit``; never raises)."""
    if not _REGISTERED:
        _REGISTERED.append(True)
        atexit.register(remove_leftovers)


def remove_leftovers() -> list[str]:
    """In a one-process world (a singleton), remove the shared-memory files this process maps; return their
    paths.

    Nothing else maps them, and the mapping stays valid until the process exits (only the names go). Does
    nothing unless MPI is initialized and not finalized here and ``COMM_WORLD`` has one process; never
    raises.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized() or mpi.COMM_WORLD.Get_size() != 1:
            return []
        with open("/proc/self/maps") as fh:
            mapped = {line.split(None, 5)[-1].strip() for line in fh if "/sm_segment." in line}
        gone = sorted(p for p in mapped if _NAME.match(os.path.basename(p)))
        for path in gone:
            try:
                os.unlink(path)
            except OSError:
                pass
        return gone
    except Exception:  # noqa: BLE001 - a courtesy at exit, never a reason to fail
        return []
