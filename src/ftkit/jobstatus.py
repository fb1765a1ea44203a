"""How each rank of a job tells ``ftkit launch`` how it ended: small note files in the job's status directory.

``ftkit launch`` (:func:`ftkit.launch.run_mpi`) makes a private directory per job and exports it to the
ranks as ``$FTKIT_JOB_STATUS``. A rank that imports ftkit writes notes there (nothing without the variable):

``begin``
    when the rank's Python starts (written by the ``sitecustomize`` that ``ftkit launch`` puts first on the
    ranks' ``PYTHONPATH``, :func:`begin`): the rank exists, whether or not it imports ftkit;
``start``
    at ``import ftkit``: the rank's pid, so the launcher knows it will say how it ends;
``up``
    once ``mpi4py.MPI`` is imported and MPI initialized: ``MPI_Init`` waits for every rank of the job, so
    until some rank wrote ``up``, a rank that ended leaves the others waiting there for good (the launcher
    ends such a job: :class:`ftkit._jobwatch.RankWatch`);
``exit``
    when the process ends normally (interpreter exit, :func:`ftkit.failure.exit_without_finalize`, a spare
    released at the job's end; registered at ``begin`` too, so a rank that never imports ftkit writes it);
``hook``
    when ftkit's exit hook ends it (an uncaught exception: :mod:`ftkit.checkpoint.online.exithook`), with the
    reason and the checkpoint a relaunch will use;
``replaced``
    when the exit hook ends it as a failed process for a spare to replace (the job may go on);
``dead``
    the world ranks this process saw declared dead (ULFM, or a repair that left them out): the launcher
    SIGKILLs them, so a rank that is hung (SIGSTOPped), not dead, cannot hold the job;
``fault``
    written by :mod:`faulthandler` when the process crashes (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): the
    Python traceback of the crash (:func:`watch_faults`; empty while the process has not crashed). Open
    MPI 5.0's ``MPI_Sendrecv`` with ``MPI_PROC_NULL`` on one side crashes so when a failure reaches it.

A rank that vanishes after its ``begin`` or ``start`` note with no ``exit`` or ``hook`` note was killed by a
signal (or left by ``os._exit``, or by a C ``exit()`` inside MPI). Each note is one small file written
atomically (``<kind>.<rank>.<pid>``), so a rank killed in the middle of a write leaves no half note. Writing
never raises: the notes are a courtesy to the launcher, never a reason for a rank to fail (the ``fault``
note is the one file written in place: by faulthandler, at the crash). This module imports nothing of ftkit
and no MPI.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import find_spec
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["STATUS_ENV", "WATCHED_ENV", "KINDS", "Note", "note", "declare_dead", "world_rank", "register",
           "begin", "read_notes", "ended_by_hook", "watch_faults", "crash_summary", "when_mpi_up"]

#: Environment variable naming the job's status directory (set by ``ftkit launch`` for its ranks; for a
#: plain mpirun/srun job, by the user: ``ftkit job-status DIR`` judges the job from it afterwards).
STATUS_ENV = "FTKIT_JOB_STATUS"
#: Set ("1") by ``ftkit launch`` for its ranks: a launcher watches the job and kills the ranks declared dead
#: itself (without it, the survivors kill those on their host).
WATCHED_ENV = "FTKIT_JOB_WATCHED"
#: The kinds of note, in the order they happen.
KINDS = ("begin", "start", "up", "dead", "exit", "hook", "replaced", "fault")
# Environment variables that carry a process's rank in the job's world, by launcher.
_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
_REGISTERED: list[bool] = []
_DECLARED: set[int] = set()
_FAULT_FILE: list[object] = []  # the open ``fault`` note (faulthandler writes to its descriptor)


@dataclass(frozen=True)
class Note:
    """One note: its kind, the world rank and pid of the process that wrote it, its text, and when it was
    written (its file's modification time, epoch seconds; 0 if unknown)."""

    kind: str
    rank: int
    pid: int
    text: str
    time: float = 0.0


def world_rank(environ: dict[str, str] | None = None) -> int | None:
    """This process's rank in the job's world, as its launcher exported it (None if none did)."""
    env = os.environ if environ is None else environ
    for name in _RANK_ENV:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def note(kind: str, text: str = "") -> None:
    """Write a note of ``kind`` for this process (nothing outside a job of ``ftkit launch``; never raises)."""
    directory = os.environ.get(STATUS_ENV)
    rank = world_rank()
    if not directory or rank is None or kind not in KINDS:
        return
    name = f"{kind}.{rank}.{os.getpid()}"
    tmp = os.path.join(directory, f".{name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, " ".join(text.split()).encode()[:4000])
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(directory, name))
    except OSError:
        pass


def declare_dead(ranks: set[int] | list[int]) -> None:
    """Add world ``ranks`` to this process's ``dead`` note (the launcher kills them; never raises)."""
    new = {int(r) for r in ranks} - _DECLARED
    if new:
        _DECLARED.update(new)
        note("dead", ",".join(str(r) for r in sorted(_DECLARED)))


def register() -> None:
    """Write this process's ``start`` note and its ``exit`` note at interpreter exit, and its ``up`` note
    once MPI is initialized (once; at ``import ftkit``)."""
    if _REGISTERED or not os.environ.get(STATUS_ENV) or world_rank() is None:
        return
    _REGISTERED.append(True)
    note("start")
    atexit.register(note, "exit")
    _note_when_mpi_up()


def begin() -> None:
    """Write this process's ``begin`` note, its ``up`` note once MPI is initialized and its ``exit`` note at
    interpreter exit (never raises).

    Called at interpreter start by the ``sitecustomize`` of ``ftkit launch`` (from a private copy of this
    module: it runs before the rank's program imports anything), so that the launcher learns of a rank that
    ends before ``MPI_Init`` has completed even when the program imports ``mpi4py`` before ftkit. With its
    ``exit`` note, a rank that never imports ftkit and ends by a signal or ``os._exit`` (every rank crashed
    in ``MPI_Init``) is known to have failed.
    """
    if not os.environ.get(STATUS_ENV) or world_rank() is None:
        return
    note("begin")
    atexit.register(note, "exit")
    _note_when_mpi_up()


def _note_when_mpi_up() -> None:
    """Write the ``up`` note now if MPI is initialized, else right after ``mpi4py.MPI`` is imported (once:
    the private copy of ``ftkit launch``'s ``sitecustomize`` may have arranged it already)."""
    arranged = (getattr(call, "__name__", "") == "_note_up" for finder in sys.meta_path
                for call in getattr(finder, "calls", ()) if getattr(finder, "ftkit_mpi_watch", False))
    if "mpi4py.MPI" in sys.modules or not any(arranged):
        when_mpi_up(_note_up)


def when_mpi_up(call: Callable[[Any], None]) -> None:
    """Call ``call(mpi4py.MPI)`` now if that module is imported, else right after its import has run (which
    initializes MPI, unless ``mpi4py.rc.initialize`` is off).

    Parameters
    ----------
    call
        Takes the module; it must check ``Is_initialized()`` itself and must never raise (the program's
        import of ``mpi4py.MPI`` would fail with it).
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        call(mpi)
        return
    watch: Any = next((f for f in sys.meta_path if getattr(f, "ftkit_mpi_watch", False)), None)
    if watch is None:
        watch = _MPIImportWatch()
        sys.meta_path.insert(0, watch)
    watch.calls.append(call)


def _note_up(mpi: Any) -> None:
    try:
        if mpi.Is_initialized():
            note("up")
    except Exception:  # noqa: BLE001 - a courtesy to the launcher, never a reason to fail
        pass


class _MPIImportWatch(MetaPathFinder):
    """Finds ``mpi4py.MPI`` as the other finders do, and has its loader make the ``calls``
    (:func:`when_mpi_up`) after the module has run. Removes itself at that import."""

    ftkit_mpi_watch = True

    def __init__(self) -> None:
        self.calls: list[Callable[[Any], None]] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != "mpi4py.MPI":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _NotingLoader(spec.loader, self.calls)
        return spec


class _NotingLoader(Loader):
    def __init__(self, loader: Loader, calls: list[Callable[[Any], None]]) -> None:
        self.loader = loader
        self.calls = calls

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module gets its own loader back, whatever happens: nothing of this watch stays behind.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        for call in self.calls:
            call(module)


def watch_faults() -> None:
    """Have a crash of this process (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) write its Python traceback to
    the process's ``fault`` note (once; nothing outside a job of ``ftkit launch`` or when the application
    enabled :mod:`faulthandler` itself; never raises). Call it after ``MPI_Init``: faulthandler then runs
    first and hands the signal on to MPI's own handler, which still prints its stack."""
    directory = os.environ.get(STATUS_ENV)
    rank = world_rank()
    if _FAULT_FILE or not directory or rank is None or faulthandler.is_enabled():
        return
    path = os.path.join(directory, f"fault.{rank}.{os.getpid()}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        f = os.fdopen(fd, "w")
        faulthandler.enable(file=f, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        return
    _FAULT_FILE.append(f)


def crash_summary(text: str) -> str:
    """One line from a ``fault`` note: the fatal error and the innermost Python frame of the crashing thread
    ("Fatal Python error: Segmentation fault in exchange_halos (heat.py, line 105)")."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    what = lines[0] if lines else "a crash"
    current = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), 0)
    frame = next((line for line in lines[current:] if line.startswith("File ")), "")
    if frame:  # File "/a/b/heat.py", line 105 in exchange_halos
        path, _, rest = frame[len("File "):].partition(", line ")
        line_no, _, func = rest.partition(" in ")
        what += f" in {func} ({os.path.basename(path.strip(chr(34)))}, line {line_no})"
    return what


def read_notes(directory: str | os.PathLike[str]) -> list[Note]:
    """Every note in ``directory`` (malformed names and unreadable files are skipped)."""
    notes: list[Note] = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return notes
    for path in entries:
        parts = path.name.split(".")
        if len(parts) != 3 or parts[0] not in KINDS or not (parts[1].isdigit() and parts[2].isdigit()):
            continue
        try:
            text = path.read_bytes()[:16000].decode(errors="replace")
            written = path.stat().st_mtime
        except OSError:
            continue
        if parts[0] == "fault" and not text.strip():
            continue  # the process has not crashed (or not yet)
        notes.append(Note(parts[0], int(parts[1]), int(parts[2]), text, written))
    return notes


def ended_by_hook() -> set[int]:
    """World ranks of this job that ftkit's exit hook ended (they left because of a failure; they are not
    the failure) or that crashed (a ``fault`` note: their process ended, their node's files did not, so a
    relaunch's choice must not count their nodes as lost). Empty outside a job of ``ftkit launch``."""
    directory = os.environ.get(STATUS_ENV)
    return {n.rank for n in read_notes(directory) if n.kind in ("hook", "fault")} if directory else set()
