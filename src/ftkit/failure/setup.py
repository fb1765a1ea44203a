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
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .._wait import deadline_after
from ..errors import Fenced, ProcessFailure
from ._p2p import SETUP_TAGS, is_failure_error, ring_round_trip, spread
from .ulfm import agree_flag, agree_on_dead, require_ulfm

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
    """

    comm: MPI.Comm
    rtt: float
    token: str


def set_up_link(comm: MPI.Comm, wait: float) -> Link:
    """Build a :class:`Link` on ``comm``, surviving a process failure at any moment (collective).

    Every rank of ``comm`` must call it. A single process only duplicates ``comm`` (no ULFM needed).

    Parameters
    ----------
    comm
        The communicator to watch.
    wait
        Seconds every rank waits for a peer's set-up messages.

    Raises
    ------
    ULFMUnavailable
        With more than one process, if ULFM does not work for this job
        (:func:`~ftkit.failure.ulfm.require_ulfm`).
    ProcessFailure
        On every surviving process alike, naming the ranks that failed (or missed the deadline) during the
        set-up: nothing was set up.
    Fenced
        On a process that the others declared dead because it missed the deadline.
    """
    if comm.Get_size() == 1:
        dup = comm.Dup()
        dup.Set_errhandler(MPI.ERRORS_RETURN)
        return Link(dup, 0.0, _token_text(secrets.randbits(_TOKEN_BITS)))
    require_ulfm(comm, "ftkit's failure detector", timeout=wait)  # once per communicator
    private = _shrink(comm)
    size, rank = private.Get_size(), private.Get_rank()
    deadline = deadline_after(wait)
    rtt, missing = ring_round_trip(private, deadline)
    token = float(secrets.randbits(_TOKEN_BITS)) if rank == 0 else 0.0
    heard = spread(private, np.array([rtt, token]), SETUP_TAGS[3], deadline, "the detector's set-up")
    missing |= set(range(size)) - set(heard) - {rank}
    if agree_flag(private, int(not missing)):
        # everyone heard everyone: the same numbers on every rank
        rtts = [rtt] + [float(v[0]) for v in heard.values()]
        return Link(private, max(rtts), _token_text(int(heard[0][1] if rank else token)))
    dead = sorted(agree_on_dead(private, missing))
    private.Free()
    if rank in dead:
        raise Fenced(f"rank {rank} missed the {wait:g} s deadline of ftkit's failure detector set-up and was "
                     f"declared dead by its peers; if the process was only slow, raise the timeout", [rank])
    raise _setup_failure(dead)


def _shrink(comm: MPI.Comm) -> MPI.Comm:
    """ULFM ``Shrink`` of ``comm``, error-returning; raise the same ProcessFailure on every survivor if a
    process of ``comm`` has failed (the shrunk group is the same on all of them)."""
    try:
        private = comm.Shrink()
    except MPI.Exception as exc:  # only a revoked communicator makes Shrink fail
        if not is_failure_error(exc):
            raise
        raise ProcessFailure(f"ftkit's failure detector cannot be set up: {exc}") from exc
    private.Set_errhandler(MPI.ERRORS_RETURN)
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
