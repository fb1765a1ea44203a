"""Failure detection, "who is dead": ftkit's own communicator, obituaries, fencing, the timeout.

The exchanges with a deadline built on this knowledge are in :mod:`ftkit.failure.exchange`
(:class:`~ftkit.failure.exchange.FailureDetector`).

The rule of this module: **no wait on a peer is unbounded**. Every exchange posts non-blocking operations and
polls them against a deadline. A peer is declared dead when

* MPI reports it failed (``MPI_ERR_PROC_FAILED``: ULFM's detector saw the process die), or
* it does not complete its part of an exchange and shows no sign of life for ``timeout`` seconds (it may be
  alive but too slow: see *Slow processes* below). A process that is itself waiting sends a tiny heartbeat to
  its peers every ``timeout/4`` s, so a rank held up by a failed peer is never mistaken for a failed one
  (without this, one death would cascade along the chain of ranks waiting on each other).

Whoever declares a peer dead tells every other live rank with a small "obituary" message (the reference's
"mark it 0 in the state table and broadcast"), so the others stop talking to it too, without each waiting
for its
own timeout.

Timeout
    ``timeout = max(factor * rtt, min_timeout)`` where ``rtt`` is a round trip measured on the
    communicator when
    the detector is built (the reference advises 5-10 x RTT). The floor exists because on oversubscribed or
    loaded nodes process scheduling, not the network, dominates the time a live peer takes to answer; a
    crashed
    process is reported by ULFM's detector long before the floor expires, so the floor costs nothing when a
    process really dies. Both numbers are configurable.

Slow processes (the reference's warning about thresholds)
    A live process that misses a deadline is **declared dead and fenced off**: its obituary reaches it
    too, and
    from then on it takes no part in the computation (:attr:`DeathWatch.fenced` becomes true and its next
    exchange raises :class:`Fenced`). It still joins the final agreement (so nobody waits for it forever
    at the
    end: it is slow, not stuck), learns there that it is out, and gets a :class:`~ftkit.errors.ProcessFailure`
    naming itself instead of a result. Fencing keeps one consistent view — the rest never mix its late
    data with
    data they already replaced — at the price of redoing its share of the work; a longer ``timeout`` is
    the knob
    for machines with long stalls.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
from mpi4py import MPI

from .._wait import deadline_after
from ..errors import Fenced, ProcessFailure
from ._p2p import DEFAULT_FACTOR, DEFAULT_MIN_TIMEOUT, SETUP_TAGS, is_failure_error, ring_round_trip, spread
from .setup import set_up_link

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_MIN_TIMEOUT",
    "NOTICE_TAG",
    "Fenced",
    "DeathWatch",
    "ft_dup",
    "is_failure_error",
    "measure_round_trip",
    "default_timeout",
]

#: Tag of obituary messages on the detector's communicator (data exchanges use smaller tags).
NOTICE_TAG = 32001
_EMPTY = np.zeros(0, dtype=np.int32)
# s between two looks for obituaries while an exchange is healthy. An ANY_SOURCE probe costs ~0.5 ms of
# progress-engine work here; peers' deaths reach a waiting rank through its own requests at once (ULFM
# completes them in error), so obituaries (timeouts, fencing) can wait this long.
_NOTICE_PERIOD = 0.02


def ft_dup(comm: MPI.Intracomm) -> MPI.Intracomm:
    """Return a duplicate of ``comm`` whose errors are returned, not fatal (collective).

    ftkit talks only on its own duplicate, so its traffic never matches the application's messages and its
    error handler never changes the application's communicator.
    """
    dup = comm.Dup()
    dup.Set_errhandler(MPI.ERRORS_RETURN)
    return dup


def measure_round_trip(comm: MPI.Comm, repeats: int = 5, timeout: float = DEFAULT_MIN_TIMEOUT) -> float:
    """Measure a round trip on ``comm`` (s): the slowest rank's median ping-pong with its ring neighbours.

    Every rank of ``comm`` calls it (point to point only, each wait at most ``timeout`` seconds); all get
    the same value unless a process fails meanwhile.

    Raises
    ------
    ProcessFailure
        If a peer failed or did not answer within ``timeout`` (on the ranks that noticed it; the failure
        detector's set-up, :func:`ftkit.failure.setup.set_up_link`, agrees on such failures).
    """
    deadline = deadline_after(timeout)
    rtt, missing = ring_round_trip(comm, deadline, repeats)
    heard = spread(comm, np.array([rtt]), SETUP_TAGS[3], deadline, "spreading the round trip")
    missing |= set(range(comm.Get_size())) - set(heard) - {comm.Get_rank()}
    if missing:
        raise ProcessFailure(f"ranks {sorted(missing)} failed or did not answer within {timeout:g} s while "
                             f"the round trip was measured", sorted(missing))
    return max([rtt] + [float(v[0]) for v in heard.values()])


def default_timeout(
    rtt: float, factor: float = DEFAULT_FACTOR, min_timeout: float = DEFAULT_MIN_TIMEOUT
) -> float:
    """Return the exchange timeout (s) for a round trip ``rtt`` (s): ``max(factor*rtt, min_timeout)``."""
    return max(factor * rtt, min_timeout)


class DeathWatch:
    """What this process knows about its peers' deaths, on a private, error-returning duplicate of ``comm``.

    It learns deaths from MPI (ULFM) and from obituaries, spreads the ones it declares, and knows when it was
    itself declared dead (fenced). :class:`~ftkit.failure.exchange.FailureDetector` adds the exchanges.

    Parameters
    ----------
    comm
        The communicator to watch (collective: every rank of it must build the detector).
    timeout
        Seconds to wait for a peer before declaring it dead; default :func:`default_timeout` of a measured
        round trip.
    factor, min_timeout
        Parameters of the default timeout.
    survive
        ``comm`` is ftkit's own error-returning communicator, made while every process was alive; the
        detector uses (and owns) it as it is, and a process that fails during the set-up does not fail the
        set-up: the survivors agree on it and start with it in :attr:`dead` (a live process they missed
        starts :attr:`fenced`). See :func:`ftkit.failure.setup.set_up_link`.

    Attributes
    ----------
    comm
        The private communicator; ranks are those of ``comm``.
    timeout, rtt
        Seconds.
    dead
        Ranks this process believes dead (it may learn more than its peers until they agree, see
        :func:`ftkit.failure.ulfm.agree_on_dead`).
    fenced
        Whether a peer declared *this* process dead.

    Raises
    ------
    ProcessFailure
        On every surviving process alike, if a process fails (or misses the set-up's deadline: ``timeout``,
        default ``min_timeout``) while the detector is being built (not with ``survive``); the set-up
        (:func:`ftkit.failure.setup.set_up_link`) uses fault-tolerant operations only, so a kill at any
        moment of it ends here, never in a crash or a hang.
    Fenced
        On a process the others declared dead because it missed the set-up's deadline.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        *,
        timeout: float | None = None,
        factor: float = DEFAULT_FACTOR,
        min_timeout: float = DEFAULT_MIN_TIMEOUT,
        survive: bool = False,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        link = set_up_link(comm, timeout if timeout is not None else min_timeout, survive=survive)
        self.comm = link.comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.rtt = link.rtt
        self._factor, self._min_timeout = factor, min_timeout
        self.timeout = 0.0
        self.use_timeout(timeout)
        self.dead: set[int] = set(link.dead) - {self.rank}
        self.reasons: dict[int, str] = dict.fromkeys(self.dead, "failed during the detector's set-up")
        self.fenced = link.fenced
        if link.fenced:
            self.reasons[self.rank] = "declared dead by its peers in the detector's set-up (timed out)"
        self._notices: list[tuple[MPI.Request, np.ndarray]] = []
        self._orphans: list[object] = []  # buffers of sends to peers declared dead (MPI may still read them)
        self.last_seen: dict[int, float] = {}
        self._beats: list[MPI.Request] = []
        # Names for the collective calls made with this detector, the same on every rank without a message
        # per call: a token agreed once in the set-up, then a counter every rank advances in the same order.
        self._token = link.token
        self._calls = 0
        self._last_notice_poll = 0.0

    def use_timeout(self, timeout: float | None) -> None:
        """Wait ``timeout`` seconds for a peer from now on (``None``: the default of the measured round trip).

        A detector is reused by later calls (its set-up is collective); a call with another timeout sets it.
        """
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = (float(timeout) if timeout is not None
                        else default_timeout(self.rtt, self._factor, self._min_timeout))  # fmt: skip

    def call_id(self) -> str:
        """Return a new name for a collective call made with this detector (the same on every rank, local).

        Every rank must call it the same number of times, in the same order (once per collective call).
        """
        self._calls += 1
        return f"{self._token}-{self._calls}"

    # -- knowledge ---------------------------------------------------------------------------------------
    def alive(self, rank: int) -> bool:
        """Return whether this process still believes ``rank`` alive."""
        return rank not in self.dead

    def check_failures(self) -> set[int]:
        """Acknowledge the failures MPI knows about, mark them dead, and return the newly learnt ranks."""
        try:
            self.comm.Ack_failed()
            group = self.comm.Get_failed()
        except MPI.Exception as exc:  # a revoked communicator still answers; anything else is a bug
            if not is_failure_error(exc):
                raise
            return set()
        try:
            n = group.Get_size()
            ranks = MPI.Group.Translate_ranks(group, list(range(n)), self.comm.Get_group()) if n else []
        finally:
            group.Free()
        new = {r for r in ranks if r >= 0 and r not in self.dead}
        if new:
            self.declare_dead(new, "reported failed by MPI")
        return new

    def declare_dead(self, ranks: Iterable[int], reason: str) -> None:
        """Mark ``ranks`` dead and send an obituary to every rank still believed alive (non-blocking)."""
        new = sorted(r for r in set(ranks) if r not in self.dead and r != self.rank)
        if not new:
            return
        for r in new:
            self.dead.add(r)
            self.reasons[r] = reason
        # Obituary payload: rank + 1, negated when the rank timed out, so hearers can tell a missed
        # deadline from a crash (and raise TimeoutFailure rather than ProcessFailure).
        sign = -1 if reason.startswith("timed out") or "(timed out)" in reason else 1
        payload = np.array([sign * (r + 1) for r in new], dtype=np.int32)
        for peer in range(self.size):
            if peer == self.rank or (peer in self.dead and peer not in new):
                continue
            if peer in new and sign > 0:
                continue  # only a live-but-late peer needs to hear that it is out
            try:
                self._notices.append((self.comm.Isend(payload, dest=peer, tag=NOTICE_TAG), payload))
            except MPI.Exception as exc:
                if not is_failure_error(exc):
                    raise
        self._notices = [(r, b) for r, b in self._notices if not _test_quietly(r)]

    def poll_notices(self) -> None:
        """Merge obituaries received from peers; set :attr:`fenced` if one names this process."""
        status = MPI.Status()
        while True:
            try:
                if not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=NOTICE_TAG, status=status):
                    return
                buf = np.empty(status.Get_count(MPI.INT32_T), dtype=np.int32)
                self.comm.Recv(buf, source=status.Get_source(), tag=NOTICE_TAG)
            except MPI.Exception as exc:
                if not is_failure_error(exc):
                    raise
                # ANY_SOURCE operations stop until failures are acknowledged: learn them, then go on.
                if not self.check_failures():
                    return
                continue
            sender = status.Get_source()
            self.last_seen[sender] = time.monotonic()
            if buf.size == 0:  # a heartbeat: the sender is alive (and waiting on someone)
                continue
            ranks = np.abs(buf) - 1
            if self.rank in ranks:
                self.fenced = True
                self.reasons[self.rank] = f"declared dead by rank {sender}"
            for kind, sel in (("timed out", buf < 0), ("failed", buf > 0)):
                others = [int(r) for r in ranks[sel] if r != self.rank and r not in self.dead]
                if others:
                    self.declare_dead(others, f"obituary from rank {sender} ({kind})")

    def _poll_notices_if_due(self, force: bool, since: float = 0.0) -> None:
        """:meth:`poll_notices` if ``force``, or if both the last look and ``since`` (a monotonic time, e.g.
        when a wait began) are :data:`_NOTICE_PERIOD` old."""
        now = time.monotonic()
        if force or now - max(since, self._last_notice_poll) > _NOTICE_PERIOD:
            self.poll_notices()
            self._last_notice_poll = now

    def withdraw(self, why: str) -> None:
        """Leave the collective work after an error of this process's own: tell every live peer this
        process is out, as if it had failed (non-blocking), and mark it fenced off.

        The peers stop waiting for it at once (they take its share from the stored operands, as for a dead
        process) instead of waiting out the deadline; this process still takes part in the fault-tolerant
        agreements that follow (as a fenced-off process does), so nobody waits for it there either.
        """
        payload = np.array([self.rank + 1], dtype=np.int32)
        for peer in range(self.size):
            if peer == self.rank or not self.alive(peer):
                continue
            try:
                self._notices.append((self.comm.Isend(payload, dest=peer, tag=NOTICE_TAG), payload))
            except MPI.Exception as exc:
                if not is_failure_error(exc):
                    raise
        self.fenced = True
        self.reasons[self.rank] = f"withdrew after its own error ({why})"

    def raise_if_fenced(self) -> None:
        """Raise :class:`Fenced` if a peer declared this process dead.

        Raises
        ------
        Fenced
            Naming this rank; the message says who declared it dead and what to change (the timeout).
        """
        if self.fenced:
            raise Fenced(
                f"rank {self.rank} was {self.reasons.get(self.rank, 'declared dead')} after missing a "
                f"{self.timeout:g} s deadline and has been fenced off; if the process was only slow, "
                f"raise the timeout",
                [self.rank],
            )

    def _heartbeat(self) -> None:
        # While waiting, tell every live peer "I am alive": a peer that waits on us is then not misled into
        # declaring us dead because we are ourselves held up by a failed process.
        self._beats = [r for r in self._beats if not _test_quietly(r)]
        for peer in range(self.size):
            if peer != self.rank and self.alive(peer):
                try:
                    self._beats.append(self.comm.Isend(_EMPTY, dest=peer, tag=NOTICE_TAG))
                except MPI.Exception as exc:
                    if not is_failure_error(exc):
                        raise

    def free(self) -> None:
        """Release the private communicator (local; pending messages to dead peers are dropped)."""
        self._orphans.clear()
        self._notices.clear()
        if self.comm != MPI.COMM_NULL:
            try:
                self.comm.Free()
            except MPI.Exception:
                pass


def _test_quietly(req: MPI.Request) -> bool:
    try:
        return bool(req.Test())
    except MPI.Exception:
        return True
