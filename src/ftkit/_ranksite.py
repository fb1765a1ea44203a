"""The ``sitecustomize`` that ``ftkit launch`` puts first on its ranks' ``PYTHONPATH``.

It runs when a rank's Python starts, before the program imports anything, and calls
:func:`ftkit.jobstatus.begin` from a private copy of that module (the program may import ``mpi4py`` before
ftkit, or never import ftkit): the rank writes its ``begin`` note, and its ``up`` note once ``MPI_Init`` has
completed. With them the launcher can tell a job whose ranks wait in ``MPI_Init`` for a rank that has ended
(they would wait for good: Open MPI and MPICH both do) from one that runs. Under ULFM's failure detector it
also starts, once MPI is initialized, the thread that keeps the rank's heartbeats going while the program
computes (:mod:`ftkit._heartbeat`, from a private copy too). Then it removes its directory
from ``sys.path`` and runs the ``sitecustomize`` that would have run without it, if there is one. A rank
started with ``python -I`` or ``-S`` skips it (no ``PYTHONPATH`` or no ``site``): the launcher then knows
only the ranks that import ftkit.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import _heartbeat, jobstatus

__all__ = ["write_rank_site"]

_SITE = '''"""Written by ftkit launch for the ranks of one job: see ftkit._ranksite."""


def _ftkit_begin():
    import importlib.util
    import sys
    modules = []
    for name, path in (("_ftkit_launch_jobstatus", {jobstatus!r}),
                       ("_ftkit_launch_heartbeat", {heartbeat!r})):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules.append(module)
    status, heartbeat = modules
    status.begin()
    if heartbeat.wanted():
        status.when_mpi_up(heartbeat.start)


def _ftkit_hand_on():
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    me = sys.modules.pop("sitecustomize")
    try:
        import sitecustomize  # noqa: F401 - the one that would have run without this one
    except ImportError:
        sys.modules["sitecustomize"] = me


try:
    _ftkit_begin()
except Exception:
    pass
_ftkit_hand_on()
'''


def write_rank_site(directory: str | os.PathLike[str]) -> str:
    """Write the ranks' ``sitecustomize.py`` into a new ``site`` folder of ``directory`` (a job's private
    session directory); return that folder, to go first on the ranks' ``PYTHONPATH``.

    Raises
    ------
    OSError
        If the folder or the file cannot be made.
    """
    site = Path(directory) / "site"
    site.mkdir(mode=0o700)
    (site / "sitecustomize.py").write_text(_SITE.format(jobstatus=str(Path(jobstatus.__file__).resolve()),
                                                        heartbeat=str(Path(_heartbeat.__file__).resolve())))
    return str(site)
