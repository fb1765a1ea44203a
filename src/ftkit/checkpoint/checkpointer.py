"""The public checkpointing API: :class:`Checkpointer` (FTI_Init, Protect, Status, Recover, Snapshot,
Checkpoint, Finalize).

Every method that takes or restores a checkpoint is collective over ``ckpt.comm`` and agrees across ranks: an
error on one rank is raised on every rank, and a dead peer raises :class:`ProcessFailure` instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import mpienv, uncaught
from ..config import Config
from ..errors import CheckpointError, FtkitError, ProcessFailure, RecoveryError
from ..storage import set_group_access
from ..storage.layout import Layout
from ..storage.manifest import Manifest, ManifestStore
from ..topology import Topology, detect_node_ids, plan_topology
from . import _mpi, appstate, events, exitpolicy, fence, keep_last, online, online_loop, pipeline, spares
from .contract import PipelineContext, RecoveryStep
from .head import enter_head_mode
from .layout import box_layout, check_protect
from .levels import recovery_chain
from .offload import PostManager
from .online_exit import install as install_exit_hook
from .recovery import RecoveryInfo
from .runlock import RunLock
from .schedule import SnapshotSchedule
from .startup import agree_run_state, prepare_dirs, take_run_lock

__all__ = ["Checkpointer", "CheckpointStatus"]

_ID_MAX = 2**63 - 1


@dataclass(frozen=True)
class CheckpointStatus:
    """What :meth:`Checkpointer.status` reports (FTI_Status, and more): ``checkpoints`` lists
    ``(id, level, complete_levels)`` oldest first."""

    restarted: bool
    recovered: bool
    exec_id: str
    checkpoints: tuple[tuple[int, int, tuple[int, ...]], ...]
    last_checkpoint_id: int | None
    snapshots: int
    problem: str


class Checkpointer(appstate.StateAPI, online_loop.ResilientLoop):
    """Multi-level checkpointing of protected NumPy arrays, in the manner of FTI.

    Parameters
    ----------
    config
        Path of an FTI-style INI file, or a :class:`ftkit.Config`.
    comm
        The communicator of the ranks taking part (default ``MPI.COMM_WORLD``). Collective.
    spare_ranks
        Spares for online recovery (default: ``ftkit launch --spares``, else the config's; see :meth:`steps`
        and :mod:`.spares`: a spare never needed ends its process in here, exit code 0, at the job's end).

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
        self.config: Config = events.load_config(config, world.Get_rank())  # notes once per job, the log set
        install_exit_hook(self, world)  # a rank's death or error ends the job, never hangs it
        mpienv.check_start(world, self.config)  # a mis-launched job fails here, before any directory
        uncaught.install(world)  # an ftkit error every rank raises is printed once (collective: a Dup)
        set_group_access(bool(self.config.group_access))  # 0600/0700, or 0640/0750 with group_access = 1
        if (world := spares.split_spares(self, world, spare_ranks)) is None:
            return  # a promoted spare (see .spares): set up as the dead rank it replaces
        uncaught.install(world)  # with spares: errors are compared among the application ranks
        self.config.validate_for(world.Get_size())
        self._icomm = _mpi.internal_comm(world)
        self._finalized = False
        self._lock: RunLock | None = None
        try:
            # Every later start-up collective follows one with a deadline: a missing rank is reported.
            _mpi.barrier(self._icomm, self.config.failure_timeout, "Checkpointer start-up")
            node_ids = detect_node_ids(self._icomm, self.config.node_size or None)
            self.topology: Topology = plan_topology(
                node_ids, self._icomm.Get_rank(), head=self.config.head, group_size=self.config.group_size,
                ckpt_dir=self.config.ckpt_dir,
                # L2/L3 intervals need groups: too few nodes for group_size is a TopologyError (ConfigError).
                need_groups=bool(self.config.ckpt_l2 or self.config.ckpt_l3))
            self._links = None
            if self.config.head:
                # Heads serve their node's post-processing inside this call and exit (FTI's heads): only
                # application ranks get past it, and ckpt.comm holds only them.
                self._links = enter_head_mode(world, self.topology, self.config)
                uncaught.install(self._links.app)  # errors are compared among the application ranks
                events.start(self.config, self._links.app.Get_rank())  # log lines show application ranks
                self._icomm.Free()
                self._icomm = _mpi.internal_comm(self._links.app)
                self.comm = self._links.app
            else:
                self.comm = world.Dup()
            self.rank: int = self.comm.Get_rank()
            self.nranks: int = self.comm.Get_size()
            prepare_dirs(self.config, self.topology, self._icomm)
            self._lock = take_run_lock(self.config, self._icomm)
            state = agree_run_state(self.config, self.topology, self._icomm, self.nranks)
        except BaseException as exc:
            if self._lock is not None:
                self._lock.release()
            with contextlib.suppress(MPI.Exception):
                self._icomm.Free()
            if isinstance(exc, MPI.Exception):
                raise _mpi.as_failure(exc, world, "Checkpointer start-up") from exc
            raise
        self.exec_id: str = state.exec_id
        manifest = Manifest.loads(state.manifest_text) if state.manifest_text else Manifest(
            exec_id=state.exec_id, nranks=self.nranks, created=0.0)
        manifest.dirs = {k: str(getattr(self.config, k)) for k in ("ckpt_dir", "glbl_dir", "meta_dir")}
        self._store = ManifestStore(self.config.meta_dir, manifest, writer=self.rank == 0)
        self._restarted = state.restarted
        self._problem = state.problem
        self._recovered = False
        self._forget_protected()
        self._schedule = SnapshotSchedule.from_config(self.config, self._icomm,
                                                      probe=lambda: self._post.failure_flag())
        self.recovery_steps: list[RecoveryStep] = recovery_chain()
        self._ctx = PipelineContext(comm=self._icomm, config=self.config, exec_id=self.exec_id,
                                    topology=self.topology, store=self._store, rank=self.rank,
                                    nranks=self.nranks)
        try:
            self._post = PostManager(self._ctx, self._links)
            self._exit = exitpolicy.ExitPolicy(self._icomm, self.config, self.exec_id, self._online is None)
            if state.fresh_manifest:
                pipeline.commit_manifest(self._ctx, "start-up: manifest commit")
            _mpi.barrier(self._icomm, self.config.failure_timeout, "Checkpointer start")
        except BaseException:
            self._close()
            raise
        self.comm = online.AppComm.wrap(self.comm, self) if self._online is not None else self.comm

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
        return self._restarted

    def status(self) -> CheckpointStatus:
        """Return the restart state and the committed checkpoints (not collective)."""
        m = self._store.manifest
        ordered = sorted(m.checkpoints, key=lambda e: e.seq)
        cps = tuple((e.id, e.level, tuple(e.complete_levels)) for e in ordered)
        newest = m.newest_first()
        return CheckpointStatus(self._restarted, self._recovered, self.exec_id, cps,
                                newest[0].id if newest else None, self._schedule.count, self._problem)

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
        if not self._restarted:
            raise RecoveryError("recover(): this run is a fresh start (no checkpoint metadata in "
                                f"{self.config.meta_dir}): check ckpt.restarted before recovering")
        if self._problem:
            raise RecoveryError(f"recover(): {self._problem}")
        if not self._protected:
            raise RecoveryError("recover(): no array is protected: protect() the arrays first")
        t0 = time.perf_counter()
        try:
            info, entry = self._recover_newest()  # see .appstate
        except MPI.Exception as exc:  # never a raw MPI.Exception to the application
            raise _mpi.as_failure(exc, self._icomm, "recover()") from exc
        events.recovered(self._ctx, info, entry, time.perf_counter() - t0)
        self._schedule.count = int(entry.extra.get("snapshots", 0))
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
        if self._problem:
            raise CheckpointError(f"checkpoint(): {self._problem}")
        if self._restarted and not self._recovered:
            raise CheckpointError("checkpoint(): this run is a restart: call recover() first (a checkpoint "
                                  "now would hide the state to recover); remove meta_dir to start fresh "
                                  "instead")
        if not self._protected:
            raise CheckpointError("checkpoint(): no array is protected: call protect(name, array) first")
        t0 = time.perf_counter()
        job = pipeline.plan_job(self._ctx, level, 0, self._store.manifest.next_seq)  # checks the level first
        ckpt_id = job.ckpt_id = self._agree_id(id)
        self._post.settle_syncs()  # the last one's L2/L3 durable: prune the one kept
        job.extra["snapshots"] = self._schedule.count
        job.extra.update(online_loop.step_extra(self))
        error = None
        try:
            arrays = self._state.arrays(self._protected, job.extra)  # dicts, generators encoded (.appstate)
            pipeline.write_primary(self._ctx, job, arrays, layouts=self._layouts)
        except (FtkitError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        self._ctx.hook("after_write")
        decided: bool | None = False  # False: committed nowhere, this rank's files of it are garbage
        try:
            try:
                pipeline.agree_written(self._ctx, job, error)
                levels = {job.primary: True}
                self._ctx.hook("before_post")
                levels.update(self._post.run_post(job))  # inline, or staged (see .offload)
                self._ctx.hook("after_post")
            except Exception as exc:
                pipeline.leave_commit_gate(self._ctx, exc)  # nobody passes the gate without this rank
                raise
            decided = pipeline.commit_gate(self._ctx, job)
            if not decided:
                raise ProcessFailure(f"checkpoint {ckpt_id}: no commit: a peer failed or did not answer")
            pruned = pipeline.commit(self._ctx, job, levels)
        except BaseException as exc:
            self._post.discard()
            if isinstance(exc, CheckpointError) or decided is False:
                # Surely not committed; otherwise rank 0 may have written it: the manifest on disk decides.
                pipeline.remove_job_files(self._ctx, job)
            if isinstance(exc, CheckpointError):
                # Raised alike on every rank: wait until all removed their files (the next may reuse the id).
                with contextlib.suppress(FtkitError):
                    _mpi.barrier(self._icomm, self.config.failure_timeout, "checkpoint clean-up")
            if isinstance(exc, MPI.Exception):  # never a raw MPI.Exception to the application
                raise _mpi.as_failure(exc, self._icomm, f"checkpoint {ckpt_id}") from exc
            raise
        pipeline.remove_checkpoints(self._ctx, pruned)
        self._post.start(job)  # background post-processing starts only once the entry is committed
        self._schedule.checkpointed(job.level, seconds := time.perf_counter() - t0)
        self._exit.checkpointed(seconds)
        events.checkpoint_taken(self._ctx, job, levels, seconds)
        return ckpt_id

    def _agree_id(self, requested: int | None) -> int:
        m = self._store.manifest
        if requested is None:
            return m.next_id
        if (isinstance(requested, bool) or not isinstance(requested, int | np.integer)
                or not 1 <= requested <= _ID_MAX):
            raise CheckpointError(f"checkpoint id {requested!r} must be an integer from 1 to {_ID_MAX} "
                                  "(ids are stored as signed 64-bit integers)")
        timeout = self.config.failure_timeout
        lo = _mpi.allreduce_int(self._icomm, int(requested), "min", timeout, "checkpoint id")
        hi = _mpi.allreduce_int(self._icomm, int(requested), "max", timeout, "checkpoint id")
        if lo != hi:
            raise CheckpointError(f"checkpoint ids differ across ranks ({lo}..{hi}): pass the same id on "
                                  "every rank")
        if requested < m.next_id:
            raise CheckpointError(f"checkpoint id {requested} is not larger than the newest one "
                                  f"({m.next_id - 1}): ids must increase")
        return int(requested)

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
        if self._online is not None and self._online.in_loop:
            return online_loop.snapshot_in_loop(self, auto)  # a process failure is repaired, not raised
        if self._restarted and not self._recovered:
            self.recover()
        level = self._schedule.due(auto)
        if self._schedule.alarm:
            # Some rank's background post-processing failed (agreed at this sync point): every rank raises.
            self._post.wait()
        return self._exit.finish_snapshot(self, level)  # or the exit checkpoint: see should_exit()

    def should_exit(self) -> bool:
        """Checkpoint and stop now? On a halt, a signal or the walltime; collective (:mod:`.exitpolicy`)."""
        return self._exit.should_exit(self)

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
        self._post.wait()

    # -- FTI_Finalize ------------------------------------------------------------------------------------

    def finalize(self) -> None:
        """Finish (collective): with ``keep_last_ckpt = 1`` keep the newest complete checkpoint at L4 (flushed
        if needed) and remove node-local storage, as FTI does (the next run restarts from it, see
        :mod:`.keep_last`), else remove this run's checkpoints and metadata. Idempotent.

        After a failed or skipped recovery, or a :meth:`should_exit` stop, nothing is removed.
        """
        if self._finalized:
            return
        try:
            self.wait()
            if self._problem or (self._restarted and not self._recovered) or self._exit.acted:
                return
            _mpi.barrier(self._icomm, self.config.failure_timeout, "finalize")
            if self.config.keep_last_ckpt:
                keep_last.keep_last_at_l4(self._ctx, self.topology)  # FTI: kept at L4, local removed
            else:
                keep_last.remove_run(self._ctx)
        finally:
            self._close()

    def _close(self) -> None:
        self._finalized = True
        if self._online is not None:
            spares.release_spares(self._online, self.rank, self.config.failure_timeout)
        for part in (getattr(self, "_post", None), getattr(self, "_exit", None)):
            if part is not None:
                part.close()
        if self._lock is not None:
            self._lock.release()
        try:
            self._icomm.Free()
        except Exception:  # noqa: BLE001 - a communicator with dead peers may refuse to be freed
            pass

    def _check_open(self) -> None:
        if self._finalized:
            raise CheckpointError("this Checkpointer is finalized: create a new one")
        fence.check_left(self)  # the steps() loop was left in a fenced iteration

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finalize()
        elif not self._finalized:
            self._close()  # leave every checkpoint in place: the next run restarts from it

    def __repr__(self) -> str:
        return (f"Checkpointer(exec_id={self.exec_id!r}, rank={self.rank}/{self.nranks}, "
                f"node={self.topology.node_id}, restarted={self._restarted})")

