"""The resilient loop ``for step in ckpt.steps(n)``: its generator, and what a process failure does in it.

:class:`ResilientLoop` gives :class:`~ftkit.checkpoint.checkpointer.Checkpointer` its
:meth:`~ResilientLoop.steps` method. Without spares the loop only resumes a restart at the recovered step;
with spares a failure inside it is repaired online (:mod:`.online`): the iteration is fenced, the next one
restores, and the end of the loop is an agreement, so no survivor leaves it while another still needs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..errors import CheckpointError, OnlineRecoveryError, ProcessFailure
from ..failure.ulfm import revoke
from . import _mpi, exitpolicy, fence, loop_shape, shrink, spares
from .online import OnlineState, RepairReport, adopt, comms_of, is_process_failure, repair, restore

if TYPE_CHECKING:
    from .checkpointer import Checkpointer

__all__ = ["ResilientLoop", "loop", "finished", "on_failure", "snapshot_in_loop", "step_extra"]


class ResilientLoop:
    """The loop side of a Checkpointer: :meth:`steps` and the online-recovery state it uses."""

    _online: OnlineState | None = None
    _shrink: shrink.ShrinkState | None = None   # steps(on_shrink=): continue with fewer ranks
    _loop_step: int | None = None      # the step being run (a checkpoint resumes at it or the next one)
    _loop_site: loop_shape.LoopSite | None = None  # the for statement running the loop (where its body is)
    _resume_step = 0                   # where the loop starts (set by recover())
    _exit = exitpolicy.ExitPolicy.off()  # the Checkpointer's own one is made at start-up (.exitpolicy)

    def steps(self, nsteps: int, on_shrink: shrink.OnShrink | None = None) -> Iterator[int]:
        """Yield the steps ``0..nsteps-1`` to run: the main loop, ``for step in ckpt.steps(n)``.

        Communicate on ``ckpt.comm`` (re-read it every step) and call ``ckpt.snapshot()`` at the end of the
        body (a checkpoint taken in step ``i`` resumes at ``i + 1``) or at its top, as FTI's examples do
        (before the step's work: it resumes at ``i``; :mod:`.loop_shape`). A restart not yet recovered
        recovers first. With ``spare_ranks > 0`` a process failure inside the loop never reaches the
        application: a spare replaces each dead rank, the rest of the iteration is fenced (``ckpt.comm``
        calls and ``snapshot()`` return at once; collectives are agreed, so either every rank gets a result
        or none, and fenced results are NaN, which ``if err < tol: break`` does not take for convergence;
        leaving the loop in a fenced iteration is refused: :mod:`.fence`), and the loop goes on at the step
        of the newest checkpoint usable by the new set of ranks, every protected array restored
        (:mod:`.online`). Without
        spares (where ULFM works) a process failure inside the loop makes every survivor raise the same
        ``OnlineRecoveryError`` (:func:`.spares.without_spares`).

        ``on_shrink(comm)`` opts in to continuing with fewer ranks when no spare is left (with or without
        ``spare_ranks``; collective then): the survivors shrink, every protected array is forgotten and
        ``on_shrink`` is called with the new ``ckpt.comm`` to re-protect every array with its new box
        (``protect(name, buf, global_shape=, offset=)``); the loop restores them from the checkpoint and
        goes on (:mod:`.shrink`; :attr:`shrinks` lists what happened).

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
        ckpt: Any = self
        ckpt._check_open()
        if isinstance(nsteps, bool) or not isinstance(nsteps, int | np.integer) or nsteps < 0:
            raise CheckpointError(f"steps({nsteps!r}): the number of steps must be an integer >= 0")
        shrink.check_opt_in(ckpt, on_shrink)
        if ckpt._restarted and not ckpt._recovered and not (self._online is not None and self._online.fresh):
            ckpt.recover()
        spares.without_spares(ckpt)  # spare_ranks = 0: a failure still ends the loop alike on every survivor
        return loop(ckpt, int(nsteps))

    @property
    def recoveries(self) -> list[RepairReport]:
        """The online recoveries this process took part in, oldest first (empty without spares or
        ``on_shrink``)."""
        return list(self._online.history) if self._online is not None else []

    @property
    def shrinks(self) -> list[shrink.ShrinkReport]:
        """The continuations on fewer ranks (``steps(on_shrink=)``) this process took part in, oldest
        first."""
        return list(self._shrink.history) if self._shrink is not None else []

    def _on_failure(self, exc: BaseException, what: str) -> None:
        on_failure(self, exc, what)  # type: ignore[arg-type]

    def _shrink_world(self, rebuilt: Any) -> Any:
        return shrink.shrink_world(self, rebuilt)  # type: ignore[arg-type]

    def _adopt(self, app: Any) -> None:
        """Adopt a repaired communicator (a smaller one after a shrink, see :mod:`.shrink`)."""
        pending = self._shrink is not None and self._shrink.pending is not None
        (shrink.adopt_fewer if pending else adopt)(self, app)  # type: ignore[arg-type]


def finished(ckpt: Checkpointer) -> bool:
    """At the end of the loop: whether every rank got there without a failure (collective).

    A failure seen here repairs (False: the loop restores and goes on), so no survivor leaves the loop
    while another still needs it.
    """
    try:
        _mpi.barrier(ckpt._icomm, ckpt.config.failure_timeout, "end of the steps() loop")
        return True
    except ProcessFailure as exc:
        if isinstance(exc, OnlineRecoveryError):
            raise
        repair(ckpt, exc)
        return False


def loop(ckpt: Checkpointer, nsteps: int) -> Iterator[int]:
    """The generator behind ``steps()``: yield steps, restore after a repair, agree at the end."""
    state = ckpt._online
    step = ckpt._resume_step
    if state is not None:
        state.in_loop = True
    try:
        while True:
            if state is not None and (state.fenced or state.fresh):
                step = restore(ckpt)
                shrink.finish(ckpt)
            if step >= nsteps:
                if state is None or finished(ckpt):
                    return
                continue
            ckpt._loop_step = step
            ckpt._loop_site = loop_shape.here()
            try:
                yield step
            except GeneratorExit:  # the body left the loop (break, return, an exception)
                if state is not None and state.fenced:
                    fence.left_fenced(ckpt, step)
                raise
            step += 1
            if ckpt._exit.acted:
                return  # should_exit() turned true in that step, and its checkpoint is taken
    finally:
        ckpt._loop_step = ckpt._loop_site = None
        if state is not None:
            state.in_loop = False


def on_failure(ckpt: Checkpointer, exc: BaseException, what: str) -> None:
    """A process failure seen in ``what``: repair online inside ``steps()``, else revoke and raise it.

    Raises
    ------
    ProcessFailure
        Outside the loop (after revoking ``ckpt``'s communicators, so no peer stays blocked).
    OnlineRecoveryError
        If the repair cannot replace the dead ranks.
    """
    state = ckpt._online
    if state is None or not state.in_loop:
        for comm in comms_of(ckpt):
            with contextlib.suppress(Exception):
                revoke(comm)
        if isinstance(exc, ProcessFailure) or not isinstance(exc, Exception):
            raise exc
        raise _mpi.as_failure(exc, ckpt._icomm, what) from exc
    repair(ckpt, exc)


def snapshot_in_loop(ckpt: Checkpointer, auto: bool) -> int:
    """``snapshot()`` inside the loop: 0 at once when fenced; a process failure repairs instead of raising."""
    state = ckpt._online
    assert state is not None
    if state.fenced:
        return 0  # a repair happened in this iteration: the data is restored next
    state.in_loop = False  # the plain snapshot() below
    try:
        return ckpt.snapshot(auto)
    except (ProcessFailure, MPI.Exception) as exc:
        if not is_process_failure(exc):
            raise
        state.in_loop = True
        on_failure(ckpt, exc, "snapshot()")
        return 0
    finally:
        state.in_loop = True


def step_extra(ckpt: Checkpointer) -> dict[str, int]:
    """What a checkpoint records for the loop: the step it resumes at (none outside the loop).

    Taken at the top of the body (FTI's shape, before the step's work: :mod:`.loop_shape`), it resumes at
    the step being run; else at the next one.
    """
    if ckpt._loop_step is None:
        return {}
    return {"next_step": ckpt._loop_step + (0 if loop_shape.taken_at_top(ckpt._loop_site) else 1)}
