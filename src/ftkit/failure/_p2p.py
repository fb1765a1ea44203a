"""Small point-to-point exchanges with a deadline that survive a peer's death at any moment.

The failure layer's set-up (is ULFM on everywhere? ftkit's private communicator, the round trip) must not use
a plain collective: a process killed in the middle of one can leave it completed on some ranks, failed on
others (Open MPI even crashes in ``MPI_Comm_dup``), or blocked. Here every message is a non-blocking
operation to or from one named peer, polled (:func:`ftkit._wait.poll_until`) against a deadline. A peer that
MPI reports failed, or that does not answer before the deadline, is simply *missing* from the answer: the
callers decide what a missing peer means, and make the decision uniform with an agreement where needed.

This module also holds what every failure module shares: which MPI errors mean "a process failed", and the
default timeout.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from .._wait import poll_until
from ..errors import TimeoutFailure
from ..mpienv import failure_error_classes

__all__ = ["DEFAULT_FACTOR", "DEFAULT_MIN_TIMEOUT", "SETUP_TAGS", "is_failure_error", "spread",
           "ring_round_trip"]

#: Timeout = DEFAULT_FACTOR x measured round trip, at least DEFAULT_MIN_TIMEOUT seconds.
DEFAULT_FACTOR = 10.0
DEFAULT_MIN_TIMEOUT = 10.0
#: Tags of the set-up messages: ULFM check (on the caller's communicator), round trip (two), spread.
SETUP_TAGS = (32010, 32011, 32012, 32013)
#: Error classes that mean a process failed or a communicator was revoked; never ERR_UNKNOWN/ERR_OTHER (an MPI
#: without ULFM's classes maps them there, and an error that cannot be classified is not a process failure).
_FAILURE_CLASSES = failure_error_classes()
#: Operations abandoned at a deadline, with their buffers: MPI may still write (a receive whose cancel came
#: too late) or read (a send) them, so they must outlive the call.
_ORPHANS: list[tuple[MPI.Request, np.ndarray]] = []


def is_failure_error(exc: BaseException) -> bool:
    """Return whether ``exc`` is an MPI error that means "a process failed" (or the comm was revoked)."""
    return isinstance(exc, MPI.Exception) and exc.Get_error_class() in _FAILURE_CLASSES


def _settle(comm: MPI.Comm, ops: list[tuple[str, int, np.ndarray]], tag: int, deadline: float | None,
            what: str) -> set[int]:
    """Post ``ops`` (``("send" | "recv", peer, buffer)``) and poll them until all are done or ``deadline``.

    Returns the peers with an operation that failed (MPI reports the peer failed) or was still pending at
    the deadline (abandoned: receives cancelled, buffers kept in :data:`_ORPHANS`).
    """
    missing: set[int] = set()
    pending: list[tuple[MPI.Request, np.ndarray, int]] = []
    for kind, peer, buf in ops:
        try:
            if kind == "recv":
                req = comm.Irecv(buf, source=peer, tag=tag)
            else:
                req = comm.Isend(buf, dest=peer, tag=tag)
        except MPI.Exception as exc:
            if not is_failure_error(exc):
                raise
            missing.add(peer)
            continue
        pending.append((req, buf, peer))

    def abandon(req: MPI.Request, buf: np.ndarray) -> None:
        try:
            req.Cancel()  # a send is not cancelled by Open MPI; its buffer is kept either way
        except MPI.Exception:
            pass
        _ORPHANS.append((req, buf))

    def progress() -> bool:
        still = []
        for req, buf, peer in pending:
            if peer in missing:  # its other operation failed: nothing more will come from it
                abandon(req, buf)
                continue
            try:
                if not req.Test():
                    still.append((req, buf, peer))
            except MPI.Exception as exc:
                if not is_failure_error(exc):
                    raise
                missing.add(peer)
        pending[:] = still
        return not pending

    try:
        poll_until(progress, deadline, what)
    except TimeoutFailure:
        for req, buf, peer in pending:
            missing.add(peer)
            abandon(req, buf)
    return missing


def spread(comm: MPI.Comm, mine: np.ndarray, tag: int, deadline: float | None, what: str
           ) -> dict[int, np.ndarray]:
    """Send ``mine`` to every other rank of ``comm`` and receive each one's array of the same shape.

    Returns ``{peer: array}`` for the peers whose array arrived before ``deadline`` (absolute
    :func:`time.monotonic` seconds); a peer that failed or was late is missing. Every rank of ``comm``
    must call it (point to point: a peer's death anywhere in it leaves no rank blocked).
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    mine = np.ascontiguousarray(mine)
    got = {p: np.empty_like(mine) for p in range(size) if p != rank}
    ops = [("recv", p, buf) for p, buf in got.items()] + [("send", p, mine) for p in got]
    missing = _settle(comm, ops, tag, deadline, what)
    return {p: buf for p, buf in got.items() if p not in missing}


def ring_round_trip(comm: MPI.Comm, deadline: float | None, repeats: int = 5) -> tuple[float, set[int]]:
    """Time round trips with both ring neighbours on ``comm``: ``(median seconds, missing neighbours)``.

    Each repeat sends a small message right and receives from the left, then the reverse. Local value (the
    ranks' values differ; :func:`spread` them to combine). Every rank of ``comm`` must call it. A neighbour
    that fails or misses ``deadline`` is left out of the later repeats (so its other neighbour is not held
    up in turn) and the time is ``nan``.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return 0.0, set()
    right, left = (rank + 1) % size, (rank - 1) % size
    sbuf, rbuf = np.zeros(1), np.zeros(1)
    times = []
    missing: set[int] = set()
    for _ in range(repeats):
        t0 = time.perf_counter()
        for src, dst, tag in ((left, right, SETUP_TAGS[1]), (right, left, SETUP_TAGS[2])):
            ops = [("recv", src, rbuf)] if src not in missing else []
            ops += [("send", dst, sbuf)] if dst not in missing else []
            missing |= _settle(comm, ops, tag, deadline, "a round trip with the ring neighbours")
            if missing:  # a receive abandoned at the deadline may still write rbuf: never reuse it
                rbuf = np.zeros(1)
        times.append(time.perf_counter() - t0)
    return (float("nan") if missing else float(np.median(times))), missing
