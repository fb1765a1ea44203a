"""The public checkpointing API: :class:`Checkpointer` (FTI_Init, Protect, Status, Recover, Snapshot,
Checkpoint, Finalize).

Every method that takes or restores a checkpoint is collective over ``ckpt.comm`` and agrees across ranks: an
error on one rank is raised on every rank, and a dead peer raises :class:`ProcessFailure` instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from mpi4py import MPI

from ..config import Config
from ..errors import CheckpointError, FtkitError, ProcessFailure, RecoveryError
from ..storage.format.global_layout import Layout
from ..storage.manifest import CheckpointEntry
from ..topology import Topology
from . import _mpi, appstate, events, keep_last, pipeline
from .contract import RecoveryStep
from .handover import OnShrink, RepairReport, ShrinkReport
from .layout import box_layout, check_protect
from .levels import recovery_chain
from .online import exithook, fence, shrink, spares
from .online import loop as online_loop
from .opening import open_session
from .recovery import RecoveryInfo
from .session import CheckpointStatus, Session

__all__ = ["Checkpointer", "CheckpointStatus"]

class Checkpointer(appstate.StateAPI):
    """Multi-level checkpointing of protected NumPy arrays, in the manner of FTI.

    Parameters
    ----------
    config
        Path of an FTI-style INI file, or a :class:`ftkit.Config`.
    comm
        The communicator of the ranks taking part (default ``MPI.COMM_WORLD``). Collective.
    spare_ranks
        Spares for online recovery (default: ``ftkit launch --spares``, else the config's; see :meth:`steps`
        and :mod:`.online.spares`: a spare never needed ends its process in here, exit code 0, at the job's
        end).

    Raises
    ------
    ConfigError
        If the configuration is invalid for this job (on every rank).
    RunLockedError
        If another live job uses the same ``meta_dir`` (on every rank; see :mod:`.runlock`).

    Notes
    -----
    With ``head = 1`` the first rank of each node becomes its head: it never returns from the constructor
    (it serves its node's post-processing and exits when the application finalizes), and ``ckpt.comm``
    holds the application ranks only.
    """

    def __init__(self, config: Config | str | os.PathLike[str] = "ftkit.ini", comm: Any = None, *,
                 spare_ranks: int | None = None) -> None:
        world = MPI.COMM_WORLD if comm is None else comm
        loaded = events.load_config(config, world.Get_rank())  # notes once per job, the log set
        # A rank's death or error ends the job, never hangs it (the hook serves the session held then).
        exithook.install(world, loaded, lambda: getattr(self, "_session", None))
        self._session: Session = open_session(loaded, world, spare_ranks)  # see .opening
        self._forget_protected()
        self._recovered = False
        self._resume_step = 0                 # where the steps() loop starts (set by recover())
        self._position = online_loop.Position()
        self.recovery_steps: list[RecoveryStep] = recovery_chain()

    @property  # the run's attributes, from its session (documented in docs/api/checkpointer.rst)
    def comm(self) -> Any:
        """The application ranks' communicator (re-read it every step of :meth:`steps`)."""
        return self._session.comm

    @property
    def config(self) -> Config:
        """The configuration in force."""
        return self._session.config

    @property
    def rank(self) -> int:
        """This process's rank in :attr:`comm`."""
        return self._session.rank

    @property
    def nranks(self) -> int:
        """The size of :attr:`comm`."""
        return self._session.nranks

    @property
    def topology(self) -> Topology:
        """Where this rank runs: its node, node-local directory, L2 partner and L3 group."""
        return self._session.topology

    @property
    def exec_id(self) -> str:
        """The run's name: its files live under ``glbl_dir/<exec_id>`` and ``ckpt_dir/node<id>/<exec_id>``."""
        return self._session.exec_id

    # -- FTI_Protect / FTI_Status ------------------------------------------------------------------------

    def _forget_protected(self) -> None:
        """Start with no protected array (at start-up, and in a spare promoted to a dead rank's place)."""
        self._protected: dict[str, np.ndarray] = {}
        self._layouts: dict[str, Layout] = {}   # global layouts of the arrays protected with one
        self._state = appstate.AppState()       # resizable arrays, generators and dicts (see .appstate)

    def protect(self, name: str, array: Any, *, global_shape: Any = None, offset: Any = None,
                resizable: bool = False, compression: str | None = None) -> None:
        """Protect ``array`` under ``name``: saved by reference at every checkpoint, filled in place by
        :meth:`recover`. Protecting a name again replaces the array.

        ``array`` may also be a ``numpy.random.Generator``/``BitGenerator`` or a ``dict`` of plain values,
        restored in place (see :mod:`.appstate`). A ``resizable`` array may change shape between checkpoints;
        :meth:`recover` replaces it by one of the stored shape when that differs (see :meth:`array`).
        ``compression`` (none, lz4, zstd, blosc) overrides ``[ftkit] compression`` for this array at L4.

        With ``global_shape`` and ``offset`` (one integer per axis), ``array`` is the box ``offset ..
        offset + array.shape`` of a global array: the checkpoint can then be recovered by any number of ranks
        with any other decomposition (see :mod:`.reshard`). Every rank protecting the whole array (offset
        zero) marks it replicated (one copy is read back).

        Raises
        ------
        CheckpointError
            If ``array`` is not a C-contiguous NumPy array of a bool, integer, float or complex dtype, the
            name is empty or too long, or the box does not fit in ``global_shape``.
        UnsupportedStateError
            If a dict holds a value of another type (naming its path).
        """
        array = self._state.protect(name, array, resizable, compression, global_shape, offset)
        check_protect(name, array)
        layout = box_layout(name, array, global_shape, offset)
        self._protected[name] = array
        self._layouts.pop(name, None)
        if layout is not None:
            self._layouts[name] = layout

    @property
    def protected(self) -> dict[str, np.ndarray]:
        """The protected arrays, by name (a copy of the mapping; the arrays themselves are not copied)."""
        return dict(self._protected)

    @property
    def restarted(self) -> bool:
        """True if this run restarts an earlier one (from the metadata); stays True if recovery fails."""
        return self._session.restarted

    def status(self) -> CheckpointStatus:
        """Return the restart state and the committed checkpoints (not collective)."""
        return self._session.status(self._recovered)

    # -- FTI_Recover ------------------------------------------------------------------------------------

    def recover(self) -> RecoveryInfo:
        """Fill the protected arrays from the newest checkpoint that every rank can read (collective).

        Returns
        -------
        RecoveryInfo
            Id of the checkpoint and levels used.

        Raises
        ------
        RecoveryError
            On every rank if this is not a restart, the metadata is unusable, or no checkpoint is complete and
            verified on every rank (the message names what is missing). ``restarted`` stays True.
        ShapeMismatchError
            If a protected array's name, shape or dtype differs from the stored one (nothing is overwritten).
        ProcessFailure
            If a peer failed during recovery.
        """
        self._check_open()
        if not self._session.restarted:
            raise RecoveryError("recover(): this run is a fresh start (no checkpoint metadata in "
                                f"{self.config.meta_dir}): check ckpt.restarted before recovering")
        if self._session.problem:
            raise RecoveryError(f"recover(): {self._session.problem}")
        if not self._protected:
            raise RecoveryError("recover(): no array is protected: protect() the arrays first")
        t0 = time.perf_counter()
        try:
            info, entry = self._recover_newest()  # see .appstate
        except MPI.Exception as exc:  # never a raw MPI.Exception to the application
            raise _mpi.as_failure(exc, self._session.icomm, "recover()") from exc
        events.recovered(self._session.ctx, info, entry, time.perf_counter() - t0)
        self._session.schedule.count = int(entry.extra.get("snapshots", 0))
        self._resume_step = int(entry.extra.get("next_step", 0))
        self._recovered = True
        return info

    # -- FTI_Checkpoint / FTI_Snapshot --------------------------------------------------------------------

    def checkpoint(self, level: int = 1, id: int | None = None) -> int:  # noqa: A002 - FTI's name
        """Checkpoint the protected arrays at ``level`` (collective); return the checkpoint id.

        Level 1 writes each rank's file to its node-local directory; level 4 to ``glbl_dir`` (straight from
        the arrays when ``inline_l4 = 1``, else through L1 and a flush). The checkpoint exists only once the
        manifest is committed; a crash before leaves the previous one untouched.

        Parameters
        ----------
        level
            1, 2, 3 or 4 (FTI's levels).
        id
            Checkpoint id (same on every rank, larger than every existing id); default: the next one.

        Raises
        ------
        CheckpointError
            On every rank: bad level or id, nothing protected, a restart not yet recovered, or a failed write.
        ProcessFailure
            If a peer failed during the checkpoint.
        """
        self._check_open()
        if self._session.problem:
            raise CheckpointError(f"checkpoint(): {self._session.problem}")
        if self._session.restarted and not self._recovered:
            raise CheckpointError("checkpoint(): this run is a restart: call recover() first (a checkpoint "
                                  "now would hide the state to recover); remove meta_dir to start fresh "
                                  "instead")
        if not self._protected:
            raise CheckpointError("checkpoint(): no array is protected: call protect(name, array) first")
        t0, session = time.perf_counter(), self._session
        ctx = session.ctx
        job = pipeline.plan_job(ctx, level, 0, session.store.manifest.next_seq)  # checks the level first
        ckpt_id = job.ckpt_id = session.agree_id(id)
        job.extra["snapshots"] = session.schedule.count
        job.extra.update(online_loop.step_extra(self._position))
        error = None
        try:
            arrays = self._state.arrays(self._protected, job.extra)  # dicts, generators encoded (.appstate)
            pipeline.write_primary(ctx, job, arrays, layouts=self._layouts)
        except (FtkitError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        ctx.hook("after_write")
        decided: bool | None = False  # False: committed nowhere, this rank's files of it are garbage
        try:
            try:
                # with whether the last one's L2/L3 files are durable: this commit prunes the one kept
                pipeline.agree_written(ctx, job, error, session.post.sync_flags())
                levels = {job.primary: True}
                ctx.hook("before_post")
                levels.update(session.post.run_post(job))  # inline, or staged (see .offload)
                ctx.hook("after_post")
            except Exception as exc:
                pipeline.leave_commit_gate(ctx, exc)  # nobody passes the gate without this rank
                raise
            decided = None  # interrupted in the gate (SIGINT) after a yes, peers may commit: keep the files
            if not (decided := pipeline.commit_gate(ctx, job)):
                raise ProcessFailure(f"checkpoint {ckpt_id}: no commit: a peer failed or did not answer")
            pruned = pipeline.commit(ctx, job, levels)
        except BaseException as exc:
            session.post.discard()
            if isinstance(exc, CheckpointError) or decided is False:
                # Surely not committed; otherwise rank 0 may have written it: the manifest on disk decides.
                pipeline.remove_job_files(ctx, job)
            if isinstance(exc, CheckpointError):
                # Raised alike on every rank: wait until all removed their files (the next may reuse the id).
                with contextlib.suppress(FtkitError):
                    _mpi.barrier(session.icomm, ctx.timeout, "checkpoint clean-up")
            if isinstance(exc, MPI.Exception):  # never a raw MPI.Exception to the application
                raise _mpi.as_failure(exc, session.icomm, f"checkpoint {ckpt_id}") from exc
            raise
        session.post.remove_later(pruned)  # after the call returns: the commit made them garbage
        session.post.start(job)  # background post-processing starts only once the entry is committed
        session.schedule.checkpointed(job.level, seconds := time.perf_counter() - t0)
        session.exit.checkpointed(seconds)
        events.checkpoint_taken(ctx, job, levels, seconds)
        return ckpt_id

    def snapshot(self, auto: bool = False) -> int:
        """Checkpoint at the level whose interval is due (FTI_Snapshot); return that level, 0 if none.

        On a restart not yet recovered, recovers first (as FTI_Snapshot does). Collective. Intervals are FTI's
        ``ckpt_l1..ckpt_l4`` (minutes, from the measured iteration time agreed every few iterations, see
        :mod:`.schedule`); with ``auto=True`` the interval is Daly's optimum for the measured checkpoint cost
        and the configured ``mtbf``.

        Raises
        ------
        CheckpointError, RecoveryError, ProcessFailure
            As :meth:`checkpoint` and :meth:`recover`.
        """
        self._check_open()
        if self._session.online is not None and self._session.online.in_loop:
            # A process failure is repaired, not raised.
            return online_loop.snapshot_in_loop(self._session, lambda: self.snapshot(auto))
        if self._session.restarted and not self._recovered:
            self.recover()
        level = self._session.schedule.due(auto)
        if self._session.schedule.alarm:
            # Some rank's background post-processing failed (agreed at this sync point): every rank raises.
            self._session.post.wait()
        return self._session.exit.finish_snapshot(self, level)  # or the exit checkpoint: see should_exit()

    def steps(self, nsteps: int, on_shrink: OnShrink | None = None) -> Iterator[int]:
        """Yield the steps ``0..nsteps-1`` to run: the main loop, ``for step in ckpt.steps(n)``.

        Communicate on ``ckpt.comm`` (re-read it every step) and call ``ckpt.snapshot()`` at the end of the
        body (a checkpoint taken in step ``i`` resumes at ``i + 1``) or at its top, as FTI's examples do
        (before the step's work: it resumes at ``i``; :mod:`.loop_shape`). A restart not yet recovered
        recovers first. With ``spare_ranks > 0`` a process failure inside the loop never reaches the
        application: a spare replaces each dead rank, the rest of the iteration is fenced (``ckpt.comm``
        calls and ``snapshot()`` return at once; collectives are agreed, so either every rank gets a result
        or none, and fenced results are NaN, which ``if err < tol: break`` does not take for convergence;
        leaving the loop in a fenced iteration is refused: :mod:`.online.fence`), and the loop goes on at the
        step of the newest checkpoint usable by the new set of ranks, every protected array restored
        (:mod:`.online`). Without spares (where ULFM works) a process failure inside the loop makes every
        survivor raise the same ``OnlineRecoveryError`` (:func:`.online.spares.without_spares`).

        ``on_shrink(comm)`` opts in to continuing with fewer ranks when no spare is left (with or without
        ``spare_ranks``; collective then): the survivors shrink, every protected array is forgotten and
        ``on_shrink`` is called with the new ``ckpt.comm`` to re-protect every array with its new box
        (``protect(name, buf, global_shape=, offset=)``); the loop restores them from the checkpoint and
        goes on (:mod:`.online.shrink`; :attr:`shrinks` lists what happened).

        Raises
        ------
        CheckpointError
            If ``nsteps`` is not an integer >= 0, or ``on_shrink`` is not callable.
        ConfigError, ULFMUnavailable
            With ``on_shrink`` and ``head = 1``, or without ULFM.
        OnlineRecoveryError
            On every survivor, when the job cannot recover online (the checkpoints stay for a relaunch).
        RecoveryError, ProcessFailure
            As :meth:`recover` (and, where ULFM is missing, as :meth:`snapshot`).
        """
        self._check_open()
        if isinstance(nsteps, bool) or not isinstance(nsteps, int | np.integer) or nsteps < 0:
            raise CheckpointError(f"steps({nsteps!r}): the number of steps must be an integer >= 0")
        self._session = shrink.check_opt_in(self._session, on_shrink)
        online = self._session.online
        if self._session.restarted and not self._recovered and not (online is not None and online.fresh):
            self.recover()
        # spare_ranks = 0: a failure still ends the loop alike on every survivor
        self._session = spares.without_spares(self._session)
        return online_loop.loop(_Holder(self), self._position, self._resume_step, int(nsteps))

    @property
    def recoveries(self) -> list[RepairReport]:
        """The online recoveries this process took part in, oldest first (empty without spares or
        ``on_shrink``)."""
        online = self._session.online
        return list(online.history) if online is not None else []

    @property
    def shrinks(self) -> list[ShrinkReport]:
        """The continuations on fewer ranks (``steps(on_shrink=)``) this process took part in, oldest
        first."""
        return list(self._session.shrink.history)

    def should_exit(self) -> bool:
        """Checkpoint and stop now? On a halt, a signal or the walltime; collective (:mod:`.exitpolicy`)."""
        self._check_open()
        return bool(online_loop.guarded(self._session, lambda: self._session.exit.should_exit(self)))

    def wait(self) -> None:
        """Block until background post-processing is done (collective); raise its failure on every rank.

        Raises
        ------
        CheckpointError
            If the background post-processing of the last checkpoint failed (it is then not complete at
            that level and recovery uses the previous one).
        TimeoutFailure
            If it is still running after ``failure_timeout`` seconds.
        """
        self._check_open()
        self._session.post.wait()

    # -- FTI_Finalize ------------------------------------------------------------------------------------

    def finalize(self) -> None:
        """Finish (collective): with ``keep_last_ckpt = 1`` keep the newest complete checkpoint at L4 (flushed
        if needed) and remove node-local storage, as FTI does (the next run restarts from it, see
        :mod:`.keep_last`), else remove this run's checkpoints and metadata. Idempotent.

        After a failed or skipped recovery, or a :meth:`should_exit` stop, nothing is removed.
        """
        if self._session.closed:
            return
        try:
            self.wait()
            session = self._session
            if session.problem or (session.restarted and not self._recovered) or session.exit.acted:
                return
            _mpi.barrier(self._session.icomm, self.config.failure_timeout, "finalize")
            if self.config.keep_last_ckpt:
                keep_last.keep_last_at_l4(self._session.ctx, self.topology)  # FTI: kept at L4, local removed
            else:
                keep_last.remove_run(self._session.ctx)
        finally:
            self._close()

    def _close(self) -> None:
        self._session.close()

    def _check_open(self) -> None:
        if self._session.closed:
            raise CheckpointError("this Checkpointer is finalized: create a new one")
        fence.check_left(self._session.online)  # the steps() loop was left in a fenced iteration

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finalize()
        elif not self._session.closed:
            self._close()  # leave every checkpoint in place: the next run restarts from it

    def __repr__(self) -> str:
        return (f"Checkpointer(exec_id={self.exec_id!r}, rank={self.rank}/{self.nranks}, "
                f"node={self.topology.node_id}, restarted={self._session.restarted})")



class _Holder:
    """A Checkpointer as the online-recovery package sees it (:class:`.online.host.Host`): the only way
    that package changes what the Checkpointer holds."""

    def __init__(self, ckpt: Checkpointer) -> None:
        self._ckpt = ckpt

    @property
    def session(self) -> Session:
        return self._ckpt._session

    def adopted(self, session: Session) -> None:
        self._ckpt._session = session

    def restored(self, recover: Any) -> tuple[RecoveryInfo, CheckpointEntry]:
        info, entry = self._ckpt._recover_newest(recover)
        self._ckpt._recovered = True
        return info, entry

    def reprotect(self, on_shrink: OnShrink, comm: Any) -> list[str]:
        ckpt = self._ckpt
        ckpt._forget_protected()
        on_shrink(comm)
        return sorted(set(ckpt._protected) - set(ckpt._layouts)) or ([] if ckpt._protected else ["<none>"])
