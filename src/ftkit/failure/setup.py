"""The failure detector's set-up, which a process killed at any moment cannot crash, block or split.

:class:`~ftkit.failure.detect.DeathWatch` needs a private communicator, a round trip (for its timeout) and a
token naming its collective calls, the same on every rank. :func:`set_up_link` builds them with
fault-tolerant operations only:

1. ULFM's ``Shrink`` of the caller's communicator is the private communicator (without failures it is a
   duplicate). It completes despite failures and gives every survivor the same group, so a process that
   died before or during it is seen by all alike (``MPI_Comm_dup``, used before, crashed inside Open MPI or
   completed on some ranks only when a process died in it).
2. The round trip with the ring neighbours and the spreading of every rank's time and of rank 0's token are
   point to point with a deadline (:mod:`ftkit.failure._p2p`).
3. One agreement (``Agree``) says whether every rank heard every other: then all computed the same maximum
   and hold the same token. Otherwise the survivors agree on the dead and all raise the same error.

``survive=True`` (issue 33) is for a communicator that is already ftkit's own and error-returning, made while
every process was alive (:meth:`ftkit.linalg.grid.ProcessGrid.take_watch_comm`): no ``Shrink`` then, so
the ranks stay those of the caller, and a death during the set-up is *survived* instead of raised: the
survivors agree on the dead (the union of what every rank missed) and every one of them gets the same link
naming them (:attr:`Link.dead`). Every survivor heard every rank not in that set (a rank that one survivor
did not hear is in it), so all choose the same token (the lowest live rank's) and the same round trip. A
live rank that others missed (too slow) is in the set too and learns it: its link says :attr:`Link.fenced`,
and it takes part in the agreements that follow as a fenced-off process does, so nobody waits for it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .._wait import deadline_after
from ..errors import Fenced, ProcessFailure
from ._p2p import SETUP_TAGS, is_failure_error, ring_round_trip, spread
from .ulfm import agree_flag, agree_on_dead, require_ulfm, shrink

__all__ = ["Link", "set_up_link"]

_TOKEN_BITS = 52  # the token travels as a float64 beside the round trip: exact up to 2**53


@dataclass(frozen=True)
class Link:
    """What a detector is built on: the same ``rtt`` and ``token`` on every rank.

    Attributes
    ----------
    comm
        The private, error-returning communicator (ranks are those of the caller's communicator).
    rtt
        The slowest rank's median round trip with its ring neighbours, seconds.
    token
        16 hex digits, new for every link, to name the collective calls made with it.
    dead
        Ranks that failed (or missed the deadline) during the set-up, agreed by every survivor
        (``survive=True`` only; else empty).
    fenced
        Whether this rank is one of :attr:`dead` (it was too slow, not dead).
    """

    comm: MPI.Comm
    rtt: float
    token: str
    dead: frozenset[int] = frozenset()
    fenced: bool = False


def set_up_link(comm: MPI.Comm, wait: float, *, survive: bool = False) -> Link:
    """Build a :class:`Link` on ``comm``, surviving a process failure at any moment (collective).

    Every rank of ``comm`` must call it. A single process only duplicates ``comm`` (no ULFM needed).

    Parameters
    ----------
    comm
        The communicator to watch.
    wait
        Seconds every rank waits for a peer's set-up messages.
    survive
        ``comm`` is ftkit's own, error-returning communicator, to be used as it is (the link owns it from
        now on): a process that fails during the set-up is named in :attr:`Link.dead` instead of raised (see
        the module docstring).

    Raises
    ------
    ULFMUnavailable
        With more than one process, if ULFM does not work for this job
        (:func:`~ftkit.failure.ulfm.require_ulfm`).
    ProcessFailure
        On every surviving process alike, naming the ranks that failed (or missed the deadline) during the
        set-up: nothing was set up (not with ``survive=True``).
    Fenced
        On a process that the others declared dead because it missed the deadline (not with
        ``survive=True``).
    """
    if comm.Get_size() == 1:
        private = comm if survive else comm.Dup()
        private.Set_errhandler(MPI.ERRORS_RETURN)
        return Link(private, 0.0, _token_text(secrets.randbits(_TOKEN_BITS)))
    require_ulfm(comm, "ftkit's failure detector", timeout=wait)  # once per communicator
    private = comm if survive else _shrink(comm)
    size, rank = private.Get_size(), private.Get_rank()
    deadline = deadline_after(wait)
    rtt, missing = ring_round_trip(private, deadline)
    token = float(secrets.randbits(_TOKEN_BITS))  # every rank draws one; the lowest live rank's is used
    heard = spread(private, np.array([rtt, token]), SETUP_TAGS[3], deadline, "the detector's set-up")
    heard[rank] = np.array([rtt, token])
    missing |= set(range(size)) - set(heard)
    if agree_flag(private, int(not missing)):
        return _link(private, heard, frozenset())  # everyone heard everyone: the same numbers everywhere
    dead = sorted(agree_on_dead(private, missing))
    if survive:
        return _link(private, heard, frozenset(dead))
    private.Free()
    if rank in dead:
        raise Fenced(f"rank {rank} missed the {wait:g} s deadline of ftkit's failure detector set-up and was "
                     f"declared dead by its peers; if the process was only slow, raise the timeout", [rank])
    raise _setup_failure(dead)


def _link(private: MPI.Comm, heard: dict[int, np.ndarray], dead: frozenset[int]) -> Link:
    """The link every survivor builds alike from the set-up messages of the ranks not in ``dead``."""
    rank = private.Get_rank()
    if rank in dead:  # fenced off: its own view of the others does not matter
        return Link(private, 0.0, _token_text(0), dead, fenced=True)
    live = sorted(r for r in heard if r not in dead)  # every survivor heard exactly these (and itself)
    rtts = [float(heard[r][0]) for r in live if not np.isnan(heard[r][0])]
    return Link(private, max(rtts, default=0.0), _token_text(int(heard[live[0]][1])), dead)


def _shrink(comm: MPI.Comm) -> MPI.Comm:
    """ULFM ``Shrink`` of ``comm``, error-returning; raise the same ProcessFailure on every survivor if a
    process of ``comm`` has failed (the shrunk group is the same on all of them)."""
    try:
        private = shrink(comm)
    except MPI.Exception as exc:  # only a revoked communicator makes Shrink fail
        if not is_failure_error(exc):
            raise
        raise ProcessFailure(f"ftkit's failure detector cannot be set up: {exc}") from exc
    if private.Get_size() == comm.Get_size():
        return private
    mine, theirs = private.Get_group(), comm.Get_group()
    try:
        kept = MPI.Group.Translate_ranks(mine, list(range(mine.Get_size())), theirs)
    finally:
        mine.Free()
        theirs.Free()
        private.Free()
    raise _setup_failure(sorted(set(range(comm.Get_size())) - set(kept)))


def _setup_failure(dead: list[int]) -> ProcessFailure:
    return ProcessFailure(
        f"ranks {dead} failed while ftkit's failure detector was being set up: nothing was computed; "
        f"continue on the survivors (ftkit.failure.repair)",
        dead,
    )


def _token_text(token: int) -> str:
    return f"{token:016x}"
