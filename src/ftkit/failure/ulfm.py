"""ULFM wrappers: survivors agree on who is dead and continue on a repaired communicator.

The contract, for every function here: call it on **every live process** of the communicator (a process
that was
fenced off — declared dead while still running — calls it too, and learns that it is out). The functions use
only ULFM's fault-tolerant operations (``Ack_failed``/``Get_failed``, ``Agree``, ``Shrink``), which complete
despite failures; a failure that strikes in the middle is acknowledged and the operation retried, a bounded
number of times (each retry needs a new failure). If a plain collective on the repaired communicator fails,
:func:`revoke` it so no survivor stays blocked, and raise :class:`~ftkit.errors.ProcessFailure`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np
from mpi4py import MPI

from .. import jobstatus
from .._wait import deadline_after, poll_until
from ..errors import ProcessFailure, TimeoutFailure, ULFMUnavailable
from ..mpienv import is_revoked_error, probe_ulfm
from ._p2p import DEFAULT_MIN_TIMEOUT, SETUP_TAGS, is_failure_error, spread

__all__ = [
    "require_ulfm",
    "failed_ranks",
    "revoke",
    "agree_on_dead",
    "agree_flag",
    "agree_within",
    "repair",
    "guarded",
    "process_failure",
    "agree_to_leave",
    "bounded",
    "release_cid_allocator",
    "shrink",
    "LEAVE_TIMEOUT",
    "exit_without_finalize",
]

_BITS = 30  # rank bits per Agree call (the agreed value is a C int)
#: Seconds :func:`agree_to_leave` waits for the other survivors before a process leaves anyway.
LEAVE_TIMEOUT = 60.0
T = TypeVar("T")
#: Handles of the communicators whose ranks all agreed that ULFM works (the capability is a property of the
#: job, so a handle reused by a later communicator of the same job keeps the answer).
_ULFM_AGREED: set[int] = set()


def require_ulfm(comm: MPI.Comm, feature: str, *, timeout: float | None = None) -> None:
    """Raise unless ULFM works for this job, on every rank of ``comm`` alike (collective).

    Call it at the start of every feature that needs ULFM (revoke, agree, shrink): without it, survivors of
    a killed rank would wait forever instead of being told. The capability is probed once per process
    (:func:`ftkit.mpienv.probe_ulfm`: local calls only); the ranks then tell each other their answer point to
    point, so none goes on alone. A process that dies meanwhile (or does not answer within ``timeout``) is
    left out: the feature's own set-up finds it dead.

    Parameters
    ----------
    comm
        The communicator the feature will run on.
    feature
        What needs ULFM, for the message (e.g. ``"resilient_pdgemm"``).
    timeout
        Seconds to wait for the other ranks' answers (default
        :data:`~ftkit.failure.detect.DEFAULT_MIN_TIMEOUT`).

    Raises
    ------
    ULFMUnavailable
        Saying what is missing (library, launch flags, a call that fails) and how to enable it.
    """
    support = probe_ulfm()
    if support.available and comm.py2f() in _ULFM_AGREED:
        return  # agreed on this communicator already: repeated calls (a solver's multiplies) cost nothing
    everywhere = support.available
    if comm.Get_size() > 1:
        wait = DEFAULT_MIN_TIMEOUT if timeout is None else timeout
        heard = spread(comm, np.array([int(support.available)], np.int8), SETUP_TAGS[0],
                       deadline_after(wait), "checking that ULFM works on every rank")  # fmt: skip
        everywhere = support.available and all(bool(v[0]) for v in heard.values())
    if everywhere:
        _ULFM_AGREED.add(comm.py2f())
        return
    reason = support.reason if not support.available else "ULFM is unavailable on another rank of the job"
    raise ULFMUnavailable(f"{feature} needs ULFM to survive process failures, but {reason}. To enable it: "
                          f"{support.how_to_enable or 'launch every rank the same way'}. Checkpoint/restart "
                          "(Checkpointer) does not need ULFM.")


def failed_ranks(comm: MPI.Comm) -> set[int]:
    """Acknowledge and return the ranks of ``comm`` that MPI reports failed (local, non-blocking)."""
    comm.Ack_failed()
    group = comm.Get_failed()
    try:
        n = group.Get_size()
        if n == 0:
            return set()
        return {r for r in MPI.Group.Translate_ranks(group, list(range(n)), comm.Get_group()) if r >= 0}
    finally:
        group.Free()


def revoke(comm: MPI.Comm) -> None:
    """Revoke ``comm`` so every pending and future operation on it fails on every rank (local call)."""
    try:
        comm.Revoke()
    except MPI.Exception as exc:
        if not is_failure_error(exc):
            raise


def agree_on_dead(comm: MPI.Comm, suspects: Iterable[int], *, abstain: bool = False) -> frozenset[int]:
    """Return the set of dead ranks that every live process of ``comm`` agrees on (fault-tolerant collective).

    The agreed set is the union of every participant's ``suspects`` and of every failure MPI reports. A rank
    that was fenced off passes ``abstain=True``: its own suspicions (formed while it was late) do not count.

    Parameters
    ----------
    comm
        An error-returning communicator (it may contain failed processes; it must not be revoked).
    suspects
        Ranks this process believes dead.
    abstain
        Contribute no suspicions but this process itself (for a fenced-off process, or one that withdrew
        after an error of its own): it is then in the agreed set.

    Raises
    ------
    ProcessFailure
        If no agreement can be reached (more failures than ranks: a bug or a revoked communicator).
    """
    size = comm.Get_size()
    # A fenced-off process counts itself dead: the rank that fenced it may itself have died before telling
    # anyone else, and then nobody else would name it.
    mine = {comm.Get_rank()} if abstain else {int(r) for r in suspects}
    for _ in range(size + 1):
        try:
            reported = failed_ranks(comm)  # Agree fails on failures not yet acknowledged
            if not abstain:
                mine |= reported
            dead: set[int] = set()
            for lo in range(0, size, _BITS):
                hi = min(size, lo + _BITS)
                alive_bits = sum(1 << (r - lo) for r in range(lo, hi) if r not in mine)
                # Agree returns the bitwise AND over live processes: a rank is alive only if nobody
                # suspects it.
                agreed = comm.Agree(alive_bits)
                dead |= {r for r in range(lo, hi) if not agreed >> (r - lo) & 1}
            return frozenset(dead)
        except MPI.Exception as exc:
            if not is_failure_error(exc) or is_revoked_error(exc):
                raise ProcessFailure(f"agreement on failed ranks impossible: {exc}", sorted(mine)) from exc
            comm.Ack_failed()  # a new failure struck during the agreement: acknowledge it and agree again
    raise ProcessFailure("agreement on failed ranks did not converge", sorted(mine))


def agree_flag(comm: MPI.Comm, flag: int, *, clear_on_failure: bool = False) -> int:
    """Return the bitwise AND of ``flag`` over the live processes of ``comm`` (fault-tolerant collective).

    Works on a revoked communicator too. A process that fails during the agreement makes ``Agree`` raise
    ``MPI_ERR_PROC_FAILED`` on every live process alike; the agreement is then repeated. With
    ``clear_on_failure`` every process repeats it with ``0``, so the answer is ``0`` everywhere: use it
    when a failure during the agreement must itself count as "no" (e.g. the failed process held part of
    a result the others were about to return).

    Raises
    ------
    ProcessFailure
        If the communicator was revoked or failures keep striking (more retries than ranks).
    """
    for _ in range(comm.Get_size() + 1):
        try:
            failed_ranks(comm)
            return int(comm.Agree(int(flag)))
        except MPI.Exception as exc:
            if not is_failure_error(exc) or is_revoked_error(exc):
                raise ProcessFailure(f"agreement impossible: {exc}") from exc
            if clear_on_failure:
                flag = 0
    raise ProcessFailure("agreement did not converge")


def agree_within(comm: MPI.Comm, flag: int, timeout: float, what: str) -> int:
    """Return the bitwise AND of ``flag`` over the live processes of ``comm``, the same on every survivor,
    within ``timeout`` seconds (fault-tolerant collective; a non-blocking ``Agree`` polled with sleeps).

    Failures known before the call do not count. A process that fails during the agreement makes it raise
    ``MPI_ERR_PROC_FAILED`` on every live process alike; it is then repeated with ``0`` everywhere, so the
    answer is ``0`` on every survivor (a failure during the agreement counts as "no").

    Raises
    ------
    TimeoutFailure
        If some live process does not take part within ``timeout`` seconds (its answer is then unknown here).
    ProcessFailure
        If ``comm`` is revoked before the answer is known (a process that revokes it does not take part), or
        failures keep striking (more retries than ranks).
    """
    def answered(req: MPI.Request) -> bool:
        if req.Test():
            return True
        if comm.Is_revoked():
            raise ProcessFailure(f"{what}: the communicator was revoked: a peer left the agreement")
        return False

    for _ in range(comm.Get_size() + 1):
        try:
            comm.Ack_failed()
            buf = np.array([flag], np.intc)
            req = comm.Iagree(buf)
            poll_until(functools.partial(answered, req), deadline_after(timeout), what)
            return int(buf[0])
        except MPI.Exception as exc:
            if not is_failure_error(exc) or is_revoked_error(exc):
                raise ProcessFailure(f"{what}: agreement impossible: {exc}") from exc
            flag = 0
    raise ProcessFailure(f"{what}: agreement did not converge")


def repair(comm: MPI.Comm, dead: Iterable[int]) -> MPI.Intracomm | None:
    """Return a communicator of the live ranks of ``comm`` not in ``dead`` (fault-tolerant collective).

    ``Shrink`` drops the processes MPI knows failed; a split then drops the fenced-off ones, which get
    ``None``.
    Survivors keep their relative order (new rank = position among survivors of the old ranks). The new
    communicator returns errors instead of aborting.

    Raises
    ------
    ProcessFailure
        If a further failure strikes while the communicator is being built.
    """
    dead = set(dead)
    me = comm.Get_rank()
    try:
        shrunk = shrink(comm)
        try:
            new = shrunk.Split(MPI.UNDEFINED if me in dead else 0, me)
        finally:
            shrunk.Free()
    except MPI.Exception as exc:
        if not is_failure_error(exc):
            raise
        raise ProcessFailure(
            f"a further process failed while the communicator was being repaired: {exc}", sorted(dead)
        ) from exc
    if new == MPI.COMM_NULL:
        return None
    new.Set_errhandler(MPI.ERRORS_RETURN)
    return new  # type: ignore[return-value]


def guarded(comm: MPI.Comm, what: str, fn: Callable[[], T]) -> T:
    """Run the collective ``fn()`` on ``comm``; on a process failure revoke ``comm`` and raise.

    Revoking makes every other rank's pending or future call on ``comm`` fail too, so nobody hangs in a
    collective that can no longer complete.

    Raises
    ------
    ProcessFailure
        Naming the failed ranks MPI reports, and ``what`` was being done.
    """
    try:
        return fn()
    except MPI.Exception as exc:
        failure = process_failure(exc, (comm,), f"process failure during {what}")
        if failure is None:
            raise
        raise failure from exc


def _failed_or_revoked(comm: MPI.Comm) -> bool:
    """Whether MPI reports a failed process on ``comm``, or ``comm`` revoked (local; False if it cannot
    say)."""
    try:
        return comm.Is_revoked() or bool(failed_ranks(comm))
    except (MPI.Exception, NotImplementedError):
        return False


def process_failure(exc: BaseException, comms: Sequence[MPI.Comm], what: str) -> ProcessFailure | None:
    """The :class:`~ftkit.errors.ProcessFailure` that MPI's ``exc`` stands for, ``comms`` revoked; or ``None``
    (nothing revoked) if ``exc`` does not mean a process failed.

    It does if its error class says so (a failed process, a revoked communicator), or if it is
    ``MPI_ERR_IN_STATUS`` (a ``Testall``/``Waitall`` whose statuses hold the errors) while MPI reports a
    failed process on one of ``comms`` or one of them revoked. Revoking them makes every other rank's
    pending or future call on them fail too, so nobody waits for the dead.

    Parameters
    ----------
    exc
        The exception raised by an MPI call on one of ``comms``.
    comms
        The communicators of the failed work; the failed ranks are reported in the first one's numbering.
    what
        The message's beginning: what failed (and, if it helps, how to go on).

    Returns
    -------
    ProcessFailure or None
        With ``failed_ranks`` as MPI reports them (empty if it cannot say: a rank told by a revocation
        before its own failure detector), the message ``what`` followed by MPI's error and those ranks.
    """
    if not isinstance(exc, MPI.Exception):
        return None
    ranks: set[int] = set()
    with contextlib.suppress(MPI.Exception, NotImplementedError):  # NotImplementedError: no ULFM
        ranks = failed_ranks(comms[0])
    if not is_failure_error(exc):
        told = ranks or any(_failed_or_revoked(c) for c in comms)
        if exc.Get_error_class() != MPI.ERR_IN_STATUS or not told:
            return None
    for comm in comms:
        with contextlib.suppress(MPI.Exception, NotImplementedError):
            revoke(comm)
    named = f"failed ranks: {sorted(ranks)}" if ranks else "failed ranks not known here"
    return ProcessFailure(f"{what} (MPI: {exc}; {named})", sorted(ranks))


def release_cid_allocator() -> None:
    """Let this process create communicators again after a creation that failed (Open MPI 5; never raises).

    Open MPI's context-id allocator lets the creation with the lowest parent id go first; one whose
    agreement failed (a process died during a ``Dup``/``Split``) returns without clearing that mark, so every
    later creation from a communicator with a higher id, ``Shrink`` included, waits for good inside
    ``ompi_comm_nextcid``. A creation that succeeds clears it: a ``Dup`` of ``MPI_COMM_SELF`` (the lowest id
    but ``COMM_WORLD``'s, and local) always does. :func:`shrink` calls it first.
    """
    with contextlib.suppress(MPI.Exception):
        MPI.COMM_SELF.Dup().Free()


def shrink(comm: MPI.Comm) -> MPI.Intracomm:
    """ULFM ``Shrink`` of ``comm`` (every live process calls it), error-returning; the context-id allocator
    released first (:func:`release_cid_allocator`). Every ``Shrink`` of ftkit goes through here.

    Raises
    ------
    MPI.Exception
        As ``Shrink`` raises it (a revoked communicator can make it fail).
    """
    release_cid_allocator()
    shrunk = MPI.Intracomm(comm.Shrink())
    shrunk.Set_errhandler(MPI.ERRORS_RETURN)
    return shrunk


@contextlib.contextmanager
def bounded(timeout: float, what: str) -> Iterator[None]:
    """End this process if the blocking MPI call inside the ``with`` block has not returned within
    ``timeout`` seconds: write why in the ``hook`` note (``ftkit launch`` prints it once for all the ranks it
    ends; without it, each such process prints it), SIGKILL itself.

    For the blocking ULFM calls of a repair (``Shrink``, ``Agree``, the ``Split`` after them), which have no
    deadline of their own: a live process that never takes part (stuck elsewhere) holds them for good, and
    Open MPI 5 can stay in ``ompi_comm_nextcid`` inside ``Shrink`` when a communicator creation failed
    before it (seen with a second rank killed during a repair). The other processes stuck in the same call
    end the same way at their own deadline, so the job ends with a non-zero exit code instead of hanging,
    and its newest checkpoint stays for a relaunch. ``timeout`` is ``failure_timeout``.
    """
    done = threading.Event()

    def expire() -> None:
        if done.wait(timeout):
            return
        line = (f"ftkit: {what} did not return within failure_timeout ({timeout:g} s): a live process "
                "did not take part, or MPI is stuck in it after a further failure; this process ends so the "
                "job does not hang (relaunch the job: it recovers from its newest checkpoint)")
        jobstatus.note("hook", line.removeprefix("ftkit: "))
        if not os.environ.get(jobstatus.WATCHED_ENV):  # ftkit launch prints the note once, for every rank
            print(line, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    guard = threading.Thread(target=expire, name="ftkit-bounded-call", daemon=True)
    guard.start()
    try:
        yield
    finally:
        done.set()


def agree_to_leave(comm: MPI.Comm, timeout: float = LEAVE_TIMEOUT) -> bool:
    """Wait until every live process of ``comm`` is ready to leave (fault-tolerant collective, bounded).

    A ULFM agreement, not a barrier: a process that leaves (exits) as soon as its barrier completes is a
    process failure to the ranks still inside it, which then see ``ERR_PROC_FAILED`` on a communicator
    whose members all finished their work. An agreement completes on every survivor once one process has
    its outcome, even if that process is gone by then. It is non-blocking and polled with sleeping waits.

    Parameters
    ----------
    comm
        The communicator of the processes that leave together (an error-returning one; after a repair the
        repaired communicator). Failures acknowledged before the call do not count.
    timeout
        Seconds to wait for the others; then this process leaves alone.

    Returns
    -------
    bool
        True if the agreement completed without reporting a failure; False if a further process failure
        or revocation was reported, or ``timeout`` passed (leaving is still the right thing to do).
    """
    try:
        comm.Ack_failed()  # failures known before the closing do not make the agreement fail
        flag = np.ones(1, np.intc)
        req = comm.Iagree(flag)
        poll_until(req.Test, deadline_after(timeout), "survivors agreeing to leave")
        return True
    except TimeoutFailure:
        return False
    except MPI.Exception as exc:
        if not is_failure_error(exc) and not is_revoked_error(exc):
            raise
        return False


def exit_without_finalize(comm: MPI.Comm | None = None, code: int = 0) -> None:
    """End a process that outlived a failure: agree with the survivors on ``comm`` to leave, flush, exit
    without ``MPI_Finalize``.

    After a process failure, Open MPI's ``MPI_Finalize`` runs a runtime fence that can wait forever for the
    dead process (open-mpi/ompi#11404; seen here intermittently with 9 ranks). Survivors that have their
    result call this instead of returning normally. With ``comm`` (the repaired communicator) they first
    :func:`agree_to_leave` (bounded by :data:`LEAVE_TIMEOUT`), so no survivor leaves while another still
    needs it, and none sees the others' departure as a failure. Never returns.
    """
    sys.stdout.flush()  # before the agreement too: what this process wrote is out even if it never returns
    sys.stderr.flush()
    if comm is not None and comm != MPI.COMM_NULL:
        agree_to_leave(comm)  # False (a further failure, or the timeout): leaving is still right
    jobstatus.note("exit", f"exit code {code} without MPI_Finalize")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
