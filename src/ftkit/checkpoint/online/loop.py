"""The resilient loop ``for step in ckpt.steps(n)``: its generator, and what a process failure does in it.

``Checkpointer.steps()`` checks its arguments and delegates here (:func:`loop`). Without spares the loop
only resumes a restart at the recovered step; with spares a failure inside it is repaired online
(:mod:`.repair`): the iteration is fenced, the next one restores (:mod:`.restore`), and the end of the loop
is an agreement, so no survivor leaves it while another still needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mpi4py import MPI

from ...errors import OnlineRecoveryError, ProcessFailure
from .. import _mpi, loop_shape
from ..session import Session
from . import fence, shrink
from .host import Host
from .repair import is_process_failure, on_failure, repair
from .restore import restore

__all__ = ["Position", "loop", "finished", "snapshot_in_loop", "guarded", "step_extra"]


@dataclass
class Position:
    """Where the loop is: the step being run (a checkpoint resumes at it or the next one) and the ``for``
    statement running it (where its body is: :mod:`..loop_shape`); both None outside the loop."""

    step: int | None = None
    site: loop_shape.LoopSite | None = None


def finished(session: Session) -> bool:
    """At the end of the loop: whether every rank got there without a failure (collective).

    A failure seen here repairs (False: the loop restores and goes on), so no survivor leaves the loop
    while another still needs it.
    """
    try:
        _mpi.barrier(session.icomm, session.config.failure_timeout, "end of the steps() loop")
        return True
    except ProcessFailure as exc:
        if isinstance(exc, OnlineRecoveryError):
            raise
        assert session.online is not None
        repair(session.online, session, session.config, exc)
        return False


def loop(host: Host, position: Position, start: int, nsteps: int) -> Iterator[int]:
    """The generator behind ``steps()``: yield steps from ``start``, restore after a repair, agree at the
    end; ``position`` follows it."""
    state = host.session.online
    step = start
    if state is not None:
        state.in_loop = True
    try:
        while True:
            if state is not None and (state.fenced or state.fresh):
                step = restore(host)
                shrink.finish(host.session)
            if step >= nsteps:
                if state is None or finished(host.session):
                    return
                continue
            position.step = step
            position.site = loop_shape.here()
            try:
                yield step
            except GeneratorExit:  # the body left the loop (break, return, an exception)
                if state is not None and state.fenced:
                    fence.left_fenced(state, host.session.rank, step)
                raise
            step += 1
            if host.session.exit.acted:
                return  # should_exit() turned true in that step, and its checkpoint is taken
    finally:
        position.step = position.site = None
        if state is not None:
            state.in_loop = False


def snapshot_in_loop(session: Session, snapshot: Callable[[], int | bool]) -> int | bool:
    """``snapshot()`` inside the loop: 0 at once when fenced; a process failure repairs instead of raising
    (``snapshot()`` takes the plain snapshot)."""
    state = session.online
    assert state is not None
    if state.fenced:
        return 0  # a repair happened in this iteration: the data is restored next
    state.in_loop = False  # the plain snapshot() below
    try:
        return snapshot()
    except (ProcessFailure, MPI.Exception) as exc:
        if not is_process_failure(exc):
            raise
        state.in_loop = True
        on_failure(session, exc, "snapshot()")
        return 0
    finally:
        state.in_loop = True


def guarded(session: Session, call: Callable[[], int | bool]) -> int | bool:
    """``call()``, inside the online loop as :func:`snapshot_in_loop` (0 when fenced, a process failure
    repaired), else as it is (``should_exit()``: the exit checkpoint it may take is collective too)."""
    if session.online is not None and session.online.in_loop:
        return snapshot_in_loop(session, call)
    return call()


def step_extra(position: Position) -> dict[str, int]:
    """What a checkpoint records for the loop: the step it resumes at (none outside the loop).

    Taken at the top of the body (FTI's shape, before the step's work: :mod:`..loop_shape`), it resumes at
    the step being run; else at the next one.
    """
    if position.step is None:
        return {}
    return {"next_step": position.step + (0 if loop_shape.taken_at_top(position.site) else 1)}
