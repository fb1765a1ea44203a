"""Point-to-point exchanges with a deadline, on the knowledge of :mod:`ftkit.failure.detect`.

:class:`FailureDetector` posts non-blocking sends and receives and polls them (with
:func:`ftkit._wait.poll_until`: sleeping, never spinning) against a per-peer deadline. A peer that MPI
reports failed, or that completes nothing and shows no sign of life for ``timeout`` seconds, is declared
dead (:meth:`~ftkit.failure.detect.DeathWatch.declare_dead`); its pending operations are abandoned and the
exchange goes on without it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from mpi4py import MPI

from .._wait import poll_until
from ..errors import ProcessFailure, TimeoutFailure
from ._p2p import is_failure_error
from .detect import NOTICE_TAG, DeathWatch

__all__ = ["Exchange", "FailureDetector"]


class FailureDetector(DeathWatch):
    """Point-to-point exchanges with deadlines on a private, error-returning duplicate of ``comm``.

    Parameters and attributes as :class:`~ftkit.failure.detect.DeathWatch` (``comm``, ``timeout``,
    ``factor``, ``min_timeout``; ``dead``, ``fenced``, ``rtt``): collective, every rank of ``comm`` builds it.
    """

    # -- exchanges ---------------------------------------------------------------------------------------
    def exchange(
        self,
        sends: Mapping[int, np.ndarray],
        recvs: Mapping[int, np.ndarray],
        tag: int,
        timeout: float | None = None,
    ) -> set[int]:
        """Send and receive contiguous buffers to and from peers, waiting at most ``timeout`` seconds.

        Peers already believed dead are skipped. Returns the ranks in ``recvs`` whose buffer was NOT filled
        (dead before or during the exchange); every such rank is now in :attr:`dead`.

        Parameters
        ----------
        sends, recvs
            ``{peer: buffer}``; buffers must be contiguous and stay alive until this returns.
        tag
            Message tag (``0 <= tag < NOTICE_TAG``); use a different tag per step so a late message of a
            fenced peer can never match a later receive.
        timeout
            Seconds (default :attr:`timeout`).

        Raises
        ------
        Fenced
            If this process learns that it was declared dead.
        """
        return self.finish_exchange(self.start_exchange(sends, recvs, tag), timeout)

    def exchange_or_raise(
        self,
        sends: Mapping[int, np.ndarray],
        recvs: Mapping[int, np.ndarray],
        tag: int,
        timeout: float | None = None,
    ) -> None:
        """As :meth:`exchange`, for callers that cannot go on without every buffer: raise if one is missing.

        Raises
        ------
        TimeoutFailure
            If a peer missed the deadline (it may still be alive; it has been declared dead and fenced off).
        ProcessFailure
            If a peer was reported failed (by MPI or by another rank), or was already believed dead.
        Fenced
            If this process learns that it was declared dead.
        """
        missing = self.exchange(sends, recvs, tag, timeout)
        if not missing:
            return
        late = sorted(r for r in missing if "timed out" in self.reasons.get(r, ""))
        limit = self.timeout if timeout is None else timeout
        if late:
            raise TimeoutFailure(
                f"ranks {late} did not answer within {limit:g} s and were declared dead; raise the timeout "
                f"if they are only slow",
                sorted(missing),
            )
        why = "; ".join(sorted({self.reasons.get(r, "?") for r in missing}))
        raise ProcessFailure(f"ranks {sorted(missing)} failed ({why})", sorted(missing))

    def start_exchange(
        self,
        sends: Mapping[int, np.ndarray],
        recvs: Mapping[int, np.ndarray],
        tag: int,
        into: Exchange | None = None,
    ) -> Exchange:
        """Post the sends and receives of :meth:`exchange` and return at once (finish with
        :meth:`finish_exchange`; the deadline starts there, so computing in between never counts as a peer's
        lateness).

        With ``into``, the operations join that exchange (one wait for both) and it is returned; its peers
        must differ from these (a peer's buffer is looked up by rank).

        Raises
        ------
        Fenced
            If this process learns that it was declared dead.
        """
        self._poll_notices_if_due(force=bool(self.dead))
        self.raise_if_fenced()
        ex = into if into is not None else Exchange({}, {})
        if (set(sends) | set(recvs)) & (set(ex.sends) | set(ex.recvs)):
            raise ValueError("an exchange joined with into= must have other peers")
        ex.sends.update(sends)
        ex.recvs.update(recvs)
        for peer, buf in recvs.items():
            if self.alive(peer):
                self._post(
                    ex.pending, "recv", peer, lambda p=peer, b=buf: self.comm.Irecv(b, source=p, tag=tag)
                )
        for peer, buf in sends.items():
            if self.alive(peer):
                self._post(
                    ex.pending, "send", peer, lambda p=peer, b=buf: self.comm.Isend(b, dest=p, tag=tag)
                )
        return ex

    def finish_exchange(self, ex: Exchange, timeout: float | None = None) -> set[int]:
        """Wait for an exchange from :meth:`start_exchange` at most ``timeout`` s; return the missing senders.

        Raises
        ------
        Fenced
            If this process learns that it was declared dead.
        """
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        beat = [start]  # time of the last heartbeat

        def done() -> bool:
            return self._progress(ex, limit, start, beat)

        poll_until(done, None, "a failure-aware exchange")  # the deadline is per peer, inside _progress
        return {peer for peer in ex.recvs if not self.alive(peer)}

    def _progress(self, ex: Exchange, limit: float, start: float, beat: list[float]) -> bool:
        """One poll of :meth:`finish_exchange`: progress ``ex``, learn deaths, send heartbeats, declare late
        peers dead; return whether nothing is pending any more.

        Raises
        ------
        Fenced
            If this process learns that it was declared dead.
        """
        pending = ex.pending
        if not pending:
            return True
        # Fast path: one Testall while every peer is healthy; a failure shows as an exception, and the
        # careful per-request path below then finds who failed.
        healthy = not self.dead and not self.fenced
        if healthy:
            try:
                if MPI.Request.Testall([req for req, _, _ in pending]):
                    pending.clear()
                    return True
            except MPI.Exception as exc:
                if not is_failure_error(exc) and exc.Get_error_class() != MPI.ERR_IN_STATUS:
                    raise
                healthy = False
        now = time.monotonic()
        if not healthy:
            # Testall may already have freed a request that completed in error: learn every failure MPI
            # knows first, so that request's peer is abandoned, never taken for a completed transfer.
            self.check_failures()
            self._test_each(ex)
        self._poll_notices_if_due(force=not healthy, since=start)
        if self.fenced:
            for req, kind, peer in pending:
                self._abandon(req, kind, (ex.sends if kind == "send" else ex.recvs)[peer])
            pending.clear()
            self.raise_if_fenced()
        if not pending:
            return True
        if now - beat[0] > limit / 4:
            self._heartbeat()
            beat[0] = now
        late = {peer for _, _, peer in pending if now - max(start, self.last_seen.get(peer, start)) > limit}
        if late:
            self.check_failures()
            self.declare_dead(late - self.dead, f"timed out after {limit:g} s")
        return not pending

    def _test_each(self, ex: Exchange) -> None:
        """Test an exchange's requests one at a time: drop completed ones, abandon dead peers' ones."""
        still = []
        for req, kind, peer in ex.pending:
            if not self.alive(peer):
                self._abandon(req, kind, (ex.sends if kind == "send" else ex.recvs)[peer])
                continue
            try:
                done = req.Test()
            except MPI.Exception as exc:
                if not is_failure_error(exc):
                    raise
                self.declare_dead([peer], "reported failed by MPI")
                done = True
            if not done:
                still.append((req, kind, peer))
        ex.pending[:] = still

    def barrier(self, timeout: float | None = None, *, ok: bool = True) -> set[int]:
        """Synchronize with the live ranks: a one-byte exchange with every live peer, with a deadline.

        The byte says whether this process is ``ok`` (e.g. it holds its inputs); returns the live peers that
        said they are not. A live peer's answer reaches every live rank, so the set is the same on all of
        them (unless a peer dies or is fenced off during the barrier: callers agree on it later).

        Raises
        ------
        Fenced
            If this process learns that it was declared dead.
        """
        token = np.full(1, int(ok), dtype=np.int8)
        peers = [p for p in range(self.size) if p != self.rank]
        flags = {p: np.ones(1, dtype=np.int8) for p in peers}
        self.exchange({p: token for p in peers}, flags, tag=NOTICE_TAG - 1, timeout=timeout)
        return {p for p, flag in flags.items() if self.alive(p) and not flag[0]}

    def _post(self, pending: list, kind: str, peer: int, start) -> None:  # type: ignore[type-arg, no-untyped-def]
        try:
            pending.append((start(), kind, peer))
        except MPI.Exception as exc:
            if not is_failure_error(exc):
                raise
            self.declare_dead([peer], "reported failed by MPI")

    def _abandon(self, req: MPI.Request, kind: str, buf: np.ndarray) -> None:
        # A receive from a dead peer is cancelled, so a late message can never land in a reused buffer; a send
        # cannot be cancelled safely, so its buffer is kept alive for as long as the detector lives.
        if kind == "recv":
            try:
                req.Cancel()
                req.Wait()
            except MPI.Exception:
                pass
        else:
            self._orphans.append((req, buf))


class Exchange:
    """Operations of one exchange in flight (see :meth:`FailureDetector.start_exchange`)."""

    def __init__(self, sends: dict[int, np.ndarray], recvs: dict[int, np.ndarray]) -> None:
        self.sends, self.recvs = sends, recvs
        self.pending: list[tuple[MPI.Request, str, int]] = []
