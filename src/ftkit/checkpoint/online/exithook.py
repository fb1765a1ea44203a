"""How a process of a job ends when the job cannot go on: as a process failure, never a hang.

Without this, a rank whose application raises goes on to interpreter shutdown, where mpi4py calls
``MPI_Finalize``: that waits for the other ranks, which wait (in their next call) for this one, until the
launcher's timeout; and under ULFM (what ``ftkit launch`` turns on) MPI no longer aborts the job when a rank
dies, so the survivors of a killed rank raise, then sit in ``MPI_Finalize``. ``Checkpointer()`` (every job of
more than one process, spares or not) calls :func:`install`, which makes :func:`end_on_uncaught` the
process's ``sys.excepthook`` and bounds the end of the process (:func:`at_exit`). On an uncaught exception
the process prints the traceback and one line (:func:`last_words`: the dead ranks, the newest committed
checkpoint a relaunch will use), then ends without ``MPI_Finalize``:

- an application exception (anything but an ftkit or MPI error) before ``finalize()`` while a spare is
  idle: the process SIGKILLs itself, exactly a process failure; the survivors repair and a spare
  takes its place, restored from the newest checkpoint (outside ``ckpt.steps()`` the survivors' ftkit calls
  raise ``ProcessFailure`` instead, which ends them in turn). A transient fault (a bad node, a cosmic ray) is
  survived. A deterministic bug raises again on the replacement at the same step, which consumes the next
  spare; when none is left, every survivor raises the same
  :class:`~ftkit.errors.OnlineRecoveryError` and the checkpoint stays on disk for a relaunch;
- otherwise (an ftkit or MPI error: a dead peer, or the same error on every rank; no idle spare; after
  ``finalize()``): the process revokes the communicators ``ckpt`` holds (so a peer blocked on any of them
  fails out at once instead of after the failure detector's timeout), then SIGKILLs
  itself, which the other ranks see as a process failure at once: each of them ends the same way (or, with
  spares, repairs). It used to exit with :data:`EXIT_CODE`: Open MPI's runtime reports an exit without
  ``MPI_Finalize`` to the survivors only after 60 s (measured with the PyPI wheel, against 0.5 s for a
  SIGKILL), which held every survivor that long.

Either way the process writes a ``hook`` note, and the world ranks it knows dead a ``dead`` note
(:mod:`ftkit.jobstatus`): ``ftkit launch`` then kills a rank that was declared dead but only hangs
(SIGSTOP), and exits non-zero naming the failed ranks. A process that ends normally instead (the
application caught the error and returned) gets the rest of the contract from :func:`at_exit`: idle spares
are released if ``finalize()`` was never called, and ``MPI_Finalize``, which after a failure can wait for the
dead forever (open-mpi/ompi#11404), is bounded by ``SIGALRM``.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from mpi4py import MPI

from ... import jobstatus, uncaught
from ..._jobproc import kill_job_peers
from ...config import Config
from ...errors import FtkitError
from ...mpienv import probe_ulfm
from ...storage.manifest import read_manifest
from ..handover import OnlineState
from ..session import Session
from .repair import comms_of
from .verdict import covers_node_loss

__all__ = ["EXIT_CODE", "FINALIZE_AFTER_FAILURE", "Served", "end_on_uncaught", "install", "serve_spare",
           "at_exit", "last_words", "failed_world_ranks", "relaunch_text"]

#: Exit code of a process ended by an uncaught exception if its SIGKILL fails (it does not, as a rule).
EXIT_CODE = 1
#: Seconds ``MPI_Finalize`` may take in a process that knows of a failed peer before ``SIGALRM`` ends it
#: (without a known failure: ``failure_timeout``).
FINALIZE_AFTER_FAILURE = 10


@dataclass
class Served:
    """What the hooks serve: one Checkpointer's configuration, its session as it is now (``current()``:
    None before it has one, and on a spare), and an idle spare's online state (``spare``)."""

    config: Config
    current: Callable[[], Session | None]
    spare: OnlineState | None = None

    @property
    def session(self) -> Session | None:
        """The Checkpointer's session now (None before start-up ended, and on an idle spare)."""
        return self.current()

    @property
    def online(self) -> OnlineState | None:
        """The job's online state (the session's, or an idle spare's)."""
        session = self.current()
        return session.online if session is not None else self.spare


# What the process's hooks serve (the newest Checkpointer), and whether the exit hook is registered.
_CURRENT: list[Served] = []


def install(world: Any, config: Config, current: Callable[[], Session | None]) -> None:
    """Make :func:`end_on_uncaught` (for the Checkpointer whose session ``current()`` returns) this
    process's ``sys.excepthook`` and register :func:`at_exit` (once per process; the newest Checkpointer is
    the one served). Nothing if ``world`` (default: ``MPI_COMM_WORLD``) has a single process: no peer can
    wait for it."""
    if (MPI.COMM_WORLD if world is None else world).Get_size() < 2:
        return
    # Probed now, while nothing has failed: the probe creates a communicator, and after a failure in a
    # communicator creation (Checkpointer()'s first Dup) Open MPI 5 queues every later creation behind the
    # failed one for good, so a probe made first in the hook would hang the process it must end.
    probe_ulfm()
    jobstatus.watch_faults()  # a crash (SIGSEGV in MPI) is named to ftkit launch, not a silent vanishing
    served = Served(config, current)

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        end_on_uncaught(served, kind, exc, tb)

    sys.excepthook = hook
    if not _CURRENT:
        atexit.register(lambda: at_exit(_CURRENT[-1]))
    _CURRENT[:] = [served]


def serve_spare(config: Config, state: OnlineState) -> None:
    """On a spare (no session yet): the hooks serve its online state and ``config`` (with the spares)."""
    if _CURRENT:
        _CURRENT[-1].config, _CURRENT[-1].spare = config, state


def replaceable(served: Served, exc: BaseException) -> bool:
    """Whether ``exc`` should end this process as a failure a spare repairs (see the module docstring)."""
    session = served.session
    state = session.online if session is not None else None
    if state is None or session is None or session.closed or not state.spares:
        return False
    return not isinstance(exc, FtkitError | MPI.Exception) and isinstance(exc, Exception)


def failed_world_ranks() -> list[int]:
    """Ranks of ``MPI_COMM_WORLD`` this process knows failed (ULFM; empty without it). Local, never raises."""
    if not probe_ulfm().available:
        return []
    try:
        group = MPI.COMM_WORLD.Get_failed()
        try:
            n = group.Get_size()
            world = MPI.COMM_WORLD.Get_group()
            ranks = MPI.Group.Translate_ranks(group, list(range(n)), world) if n else []
            world.Free()
        finally:
            group.Free()
    except (MPI.Exception, NotImplementedError, AttributeError):
        return []
    return sorted(int(r) for r in ranks if r >= 0)


def _app_ranks(session: Session | None, world_ranks: list[int]) -> list[int]:
    """``world_ranks`` as ranks of ``ckpt.comm`` (the application's; heads and spares are left out)."""
    comm = session.comm if session is not None else None
    if comm is None or not world_ranks:
        return []
    world, app = MPI.COMM_WORLD.Get_group(), comm.Get_group()
    try:
        return sorted(r for r in MPI.Group.Translate_ranks(world, world_ranks, app) if r >= 0)
    finally:
        world.Free()
        app.Free()


def relaunch_text(served: Served, dead_world: list[int]) -> str:
    """What a relaunch recovers: the newest committed checkpoint if the dead ranks' node-local files are
    intact (their processes died), else the newest one whose redundancy covers the loss of their nodes.
    From the manifest file (what a relaunch reads), else the one in memory."""
    session = served.session
    config = session.config if session is not None else served.config
    manifest = session.store.manifest if session is not None else None
    try:  # the file is what a relaunch reads: a commit this rank did not hear of may be in it already
        manifest = read_manifest(config.meta_dir) or manifest
    except (FtkitError, OSError, ValueError, AttributeError):
        pass
    entries = [e for e in manifest.newest_first() if e.complete_levels] if manifest is not None else []
    if not entries:
        return "no checkpoint is committed: a relaunch starts from the beginning"
    newest = entries[0]
    text = (f"a relaunch recovers from checkpoint {newest.id} (level {max(newest.complete_levels)}, the "
            f"newest committed in {config.meta_dir})")
    topology = session.topology if session is not None else None
    try:
        dead = _app_ranks(session, dead_world)
    except (MPI.Exception, AttributeError):
        dead = []
    if topology is None or not dead:
        return text
    code = str(config.l3_code)
    safe = next((e for e in entries
                 if any(covers_node_loss(topology, lv, dead, str(e.extra.get("l3_code", code)))
                        for lv in e.complete_levels)), None)
    if safe is newest:
        return text + ", which survives even the loss of the dead ranks' nodes"
    other = (f"else from checkpoint {safe.id} (complete at level {max(safe.complete_levels)})" if safe else
             "else it starts from the beginning")
    return f"{text} if the dead ranks' node-local files are intact, {other}"


def last_words(served: Served, exc: BaseException, dead: list[int], replace: bool) -> str:
    """The one line a process ended by :func:`end_on_uncaught` prints (and notes for ``ftkit launch``)."""
    session = served.session
    rank = MPI.COMM_WORLD.Get_rank() if session is None else session.rank
    what = type(exc).__name__  # its message is in the traceback just above (MPI's is short: given)
    what = f"MPI.Exception ({' '.join(str(exc).split())[:120]})" if isinstance(exc, MPI.Exception) else what
    if replace:
        return (f"ftkit: rank {rank} ended by an uncaught {what}; it is replaced by a spare as a failed "
                "process (a bug that repeats on the replacement uses up the spares, then every rank raises "
                "OnlineRecoveryError)")
    after = f"after the failure of world rank(s) {dead}" if dead else "with no failed rank known"
    return (f"ftkit: rank {rank} ends the job ({after}): {what}; {relaunch_text(served, dead)}; the process "
            "ends as a failed process (SIGKILL) so that no other waits for it")


def _revoke_everything(session: Session | None) -> None:
    """Revoke the communicators ``ckpt`` holds (ULFM only; local, never raises). Not ``MPI_COMM_WORLD``: a
    peer blocked in ``MPI_Sendrecv`` on a revoked ``MPI_COMM_WORLD`` crashed (SIGSEGV in ``PMPI_Sendrecv``,
    Open MPI 5.0 wheel); a peer blocked on it learns of this process's SIGKILL from the runtime instead."""
    if not probe_ulfm().available:
        return
    for comm in comms_of(session):
        with contextlib.suppress(Exception):
            comm.Revoke()


def _kill_dead_here(dead: list[int]) -> None:
    """Without ``ftkit launch`` (which kills them itself, and says so): SIGKILL the ranks of this job on this
    host that were declared dead, so one that only hangs (SIGSTOP) cannot hold the job (never raises)."""
    if dead and not os.environ.get(jobstatus.WATCHED_ENV):
        kill_job_peers(dead)


def end_on_uncaught(served: Served, kind: type[BaseException], exc: BaseException,
                    tb: TracebackType | None) -> None:
    """End the process after an uncaught exception by a SIGKILL of itself, whether a spare replaces it or
    not (never ``MPI_Finalize``, which would wait for the others). Never returns."""
    replace = replaceable(served, exc)
    jobstatus.note("replaced" if replace else "hook", f"an uncaught {kind.__name__}")  # before any MPI call
    try:
        uncaught.report(kind, exc, tb)  # an ftkit error every rank raises: printed once, with its ranks
    except Exception:  # noqa: BLE001 - the hook must not fail: print as Python does
        traceback.print_exception(kind, exc, tb)
    dead = failed_world_ranks()
    # The ranks that left through this hook before this one are not the failure (ftkit launch only).
    victims = sorted(set(dead) - jobstatus.ended_by_hook()) or dead
    line = last_words(served, exc, victims, replace)
    print(line, file=sys.stderr)
    jobstatus.declare_dead(dead)
    jobstatus.note("replaced" if replace else "hook",
                   line.removeprefix("ftkit: ").split("; the process ends")[0].split("; it is replaced")[0])
    if not replace:
        _revoke_everything(served.session)
    _kill_dead_here(dead)
    uncaught.end_process()


def at_exit(served: Served) -> None:
    """At interpreter exit: release idle spares if ``finalize()`` was never called (no failure known), and
    bound the ``MPI_Finalize`` that follows with ``SIGALRM`` (:data:`FINALIZE_AFTER_FAILURE` seconds after
    a known failure, else ``failure_timeout``), so the process ends whatever its peers do."""
    dead = failed_world_ranks()
    state, session = served.online, served.session
    failed = bool(dead) or (state is not None and state.rebuilt is not None)
    jobstatus.declare_dead(dead)
    _kill_dead_here(dead)
    if not failed and state is not None and state.spares and session is not None and not session.closed:
        with contextlib.suppress(Exception):
            session.close()  # releases the idle spares (they leave with exit code 0)
    timeout = (session.config if session is not None else served.config).failure_timeout
    bound = FINALIZE_AFTER_FAILURE if failed else max(1, math.ceil(timeout))
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(bound)
