"""``ckpt.should_exit()``: "should I checkpoint and stop now?", the same answer on every rank (SCR's
``SCR_Should_exit``).

The answer turns true, and stays true, on

* a signal -- SIGTERM, SIGUSR1 or SIGUSR2 (``sbatch --signal=B:USR1@120``, ``scancel -s USR1``, Flux
  ``--signal``) -- delivered to *any* rank: :class:`ExitPolicy` installs the handlers when the Checkpointer is
  built (main thread only; a Python handler installed before is still called after ours; the previous
  handlers are put back at ``finalize()``). A delivered signal no longer ends the process at once: it asks
  for a clean exit at the next check (SIGKILL, which SLURM sends ``KillWait`` seconds later, still does);
* a pending halt request in ``meta_dir`` (``ftkit halt``, :mod:`ftkit.storage.halt`) that has come due;
* the end of the allocation within the margin: ``[ftkit] exit_margin`` seconds, default twice the longest
  checkpoint seen (agreed over the ranks), at least 60 s; the end from ``[ftkit] end_time``,
  ``$FTKIT_END_TIME`` or SLURM (:mod:`ftkit.walltime`).

The first time the answer turns true -- in ``snapshot()`` or in ``should_exit()``, whichever comes first --
a checkpoint at ``[ftkit] exit_level`` (default 4) is taken and waited for before it returns, unless it would
not finish before the end (the time left is shorter than the longest checkpoint seen): then none is started
and the previous checkpoints stay. Nor does ``snapshot()`` start a scheduled checkpoint that would not
finish (with an ``exit_margin`` shorter than the checkpoints). The ``steps()`` loop ends after that step. A
halt request so honoured is marked done with the checkpoint's id, so the next job of the run continues
normally.

Cost. No collective is added per step. The ranks agree on a vector of six doubles (signal, halt due, time
left, step time, longest checkpoint, end known) with one *non-blocking* ``MPI_Iallreduce`` (maximum) on a
communicator of its own, started at a check and completed at the next one: a check every ``gap`` calls of
``snapshot()``/``should_exit()``, where ``gap`` (the same on every rank: it comes from the agreed step time)
makes about one check per :data:`CHECK_INTERVAL_S` of compute, between 1 and :data:`MAX_GAP` calls. By the
time it is completed every rank has long posted it, so the wait is a test. Rank 0 adds one ``stat`` of the
halt record per check (the file is read only when it changed). The price is latency: a request is acted on
within two checks (about two seconds of compute, at most ``2 * MAX_GAP`` steps). The contract is FTI's for
``snapshot()``: every rank calls ``snapshot()`` and ``should_exit()`` the same number of times.

With ``spare_ranks > 0`` (online recovery) the agreement runs on the application ranks only. An idle spare
holds the exit signals from the start (:meth:`ExitPolicy.idle`: a ``scancel -s USR1`` to every process does
not end it); it takes part only once promoted. Every online recovery, spare promotion or shrink rebinds the
policy to the new communicator (:meth:`ExitPolicy.rebind`, from :func:`.online.adopt.adopt_session`, on every
rank at the same point): an agreement in flight when the failure struck is abandoned (its communicator
revoked, never waited for), and every rank -- the promoted spare with the signal it held -- starts counting
calls afresh, so the checks stay at the same calls everywhere. A signal once agreed stays in every survivor's
vector; a halt stays pending in its record; nothing is lost with the dead rank but a signal only it had
received. Inside ``steps()`` a process failure in ``should_exit()`` (in its exit checkpoint too) is repaired
as in ``snapshot()``, and the answer is False in that iteration. When the job stops for ``should_exit()``,
``finalize()`` releases the idle spares (they end with exit code 0).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

from ..config import Config
from ..errors import FtkitError
from ..failure.ulfm import revoke
from ..storage.halt import HaltWatch, write_halt
from ..walltime import job_end_time
from . import _mpi, events
from .post import wait_request

__all__ = ["ExitPolicy", "CheckpointTaker", "CHECK_INTERVAL_S", "MAX_GAP", "MIN_MARGIN_S", "EXIT_SIGNALS"]

#: Seconds of compute between two checks (the gap in calls follows from the agreed step time).
CHECK_INTERVAL_S = 1.0
#: Most calls between two checks (bounds the latency in steps when steps are very short).
MAX_GAP = 256
#: The smallest default margin before the end of the allocation (seconds).
MIN_MARGIN_S = 60.0
#: The signals that ask for a clean exit.
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_NONE = -1e300   # "no value" in the maximum
_SIG, _HALT, _LEFT, _STEP, _LONGEST, _KNOWN = range(6)


class CheckpointTaker(Protocol):
    """What the exit policy uses of the Checkpointer: public methods only (this module never imports it)."""

    @property
    def protected(self) -> dict[str, Any]: ...
    @property
    def restarted(self) -> bool: ...
    def status(self) -> Any: ...
    def checkpoint(self, level: int = 1) -> int: ...
    def wait(self) -> None: ...


class ExitPolicy:
    """The exit decision of one Checkpointer (see the module docstring).

    Parameters
    ----------
    comm
        The Checkpointer's internal communicator (duplicated here: collective).
    config
        Its configuration (``exit_margin``, ``exit_level``, ``end_time``, ``meta_dir``, ``failure_timeout``).
    exec_id
        The run's id (recorded in an honoured halt request).
    enabled
        False with online recovery: no agreement, no handlers.
    dup
        The agreement's communicator, a duplicate of ``comm`` made by the caller (as
        :func:`._mpi.internal_comms` makes them; ``comm`` is then not duplicated here: not collective).

    Raises
    ------
    ConfigError
        If ``$FTKIT_END_TIME`` is not a time.
    """

    _comm: Any   # the agreement's communicator (a duplicate), None while there is none
    _req: Any    # the agreement in flight, None between checks
    _watch: HaltWatch | None

    def __init__(self, comm: Any, config: Config, exec_id: str, enabled: bool = True, *,
                 clock: Callable[[], float] = time.time, dup: Any = None) -> None:
        self._reset(config, exec_id, clock)
        self.enabled = enabled
        self._place(comm.Get_rank())
        if enabled:
            self._comm = _mpi.internal_comm(comm) if dup is None else dup
            self._install()

    def _reset(self, config: Config, exec_id: str, clock: Callable[[], float]) -> None:
        """Every attribute at its start value (no communicator, no handlers, no place)."""
        self.enabled = False
        self.rank = -1
        self.exec_id = exec_id
        self.config = config
        self.clock = clock
        self.end: float | None = None
        self.end_source = ""
        self.decided = False
        self.acted = False
        self.reasons: list[str] = []
        self.checkpoint_id: int | None = None
        self.time_left: float | None = None
        self._signal = 0
        self._longest = 0.0            # this rank's longest checkpoint (s)
        self._agreed_longest = 0.0
        self._calls = 0
        self._next_check = 1
        self._last = (clock(), 0)      # (time, calls) at the last check
        self._req = None
        self.checks = 0                # agreements started (the cost: one Iallreduce each)
        self._recv = np.zeros(6)
        self._send = np.zeros(6)
        self._watch = None
        self._previous: dict[int, Any] = {}
        self._comm = None

    def _place(self, rank: int) -> None:
        """Take application rank ``rank``: rank 0 reads the end from SLURM too and watches the halt record."""
        if rank == self.rank:
            return
        self.rank = rank
        env = dict(os.environ)
        if rank != 0:
            env.pop("SLURM_JOB_ID", None)  # only rank 0 asks squeue: its answer is the one agreed
        self.end, self.end_source = job_end_time(self.config.end_time, env)
        self._watch = HaltWatch(self.config.meta_dir, warn=_say) if rank == 0 else None

    def _install(self) -> None:
        """Install the exit signals' handlers (main thread only; once)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in EXIT_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    @classmethod
    def off(cls) -> ExitPolicy:
        """A policy that never says exit (a session being opened, before its own is made)."""
        policy = cls.__new__(cls)
        policy._reset(Config(), "", time.time)
        return policy

    @classmethod
    def idle(cls, config: Config) -> ExitPolicy:
        """The policy of an idle spare: no agreement, but the exit signals held from now on (a signal sent to
        every process neither ends it nor is lost if it is promoted: :meth:`rebind`)."""
        policy = cls.__new__(cls)
        policy._reset(config, "", time.time)
        policy._install()
        return policy

    def rebind(self, comm: Any, exec_id: str, config: Config) -> ExitPolicy:
        """Run the agreement on ``comm`` from now on (collective over it: a duplicate), with the session's
        ``config`` (a shrink may change it), after an online recovery, a spare promotion or a shrink replaced
        the session; return ``self``.

        An agreement in flight is abandoned (its communicator revoked and left, never waited for: a peer
        may be dead). Every rank of ``comm`` starts counting calls afresh, so the checks fall on the same
        calls everywhere; a decision not acted on is taken again at the next check (the signal agreed is
        kept, a halt stays pending in its record, the end of the allocation is read again).
        """
        self._abandon()
        signum, longest, previous = self._signal, self._longest, self._previous
        old_rank, watch, end = self.rank, self._watch, (self.end, self.end_source)
        self._reset(config, exec_id, self.clock)
        self._signal, self._longest, self._previous = signum, longest, previous
        self.rank, self._watch, (self.end, self.end_source) = old_rank, watch, end
        self._place(comm.Get_rank())
        self._comm = _mpi.internal_comm(comm)
        self.enabled = True
        self._install()
        return self

    def _abandon(self) -> None:
        """Drop the communicator and any agreement in flight on it (after a failure: never waits)."""
        comm, req = self._comm, self._req
        self._comm = self._req = None
        if comm is None:
            return
        if req is not None:
            with contextlib.suppress(Exception):
                revoke(comm)  # the request completes (in error) instead of waiting for a dead peer
            with contextlib.suppress(MPI.Exception):
                if not req.Test():
                    return  # still pending: the duplicate is left to MPI_Finalize
        with contextlib.suppress(MPI.Exception):
            comm.Free()

    # -- signals ------------------------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signal = signum
        prev = self._previous.get(signum)
        if callable(prev):
            prev(signum, frame)  # the application's own handler still runs (SIG_DFL/SIG_IGN: replaced)

    # -- the agreement ------------------------------------------------------------------------------------

    def checkpointed(self, seconds: float) -> None:
        """Record the blocking time of a checkpoint (the margin and the "would it finish" test use it)."""
        self._longest = max(self._longest, float(seconds))

    def poll(self) -> bool:
        """Count one call and, at a check, complete the last agreement and start the next (collective)."""
        if self.decided or not self.enabled:
            return self.decided
        self._calls += 1
        if self._calls < self._next_check:
            return False
        if self._req is not None:
            self._complete()
        if not self.decided:
            self._start()
        return self.decided

    def _start(self) -> None:
        now = self.clock()
        t0, c0 = self._last
        s = self._send
        s[:] = _NONE
        s[_SIG] = float(self._signal)
        s[_STEP] = (now - t0) / max(1, self._calls - c0)
        s[_LONGEST] = self._longest
        if self._watch is not None:
            s[_HALT] = 1.0 if self._watch.due(now) else 0.0
            if self.end is not None:
                s[_LEFT], s[_KNOWN] = self.end - now, 1.0
        self._last = (now, self._calls)
        assert self._comm is not None
        self._req = self._comm.Iallreduce(s, self._recv, op=MPI.MAX)
        self.checks += 1

    def _complete(self) -> None:
        try:
            wait_request(self._req, self.config.failure_timeout, "should_exit(): the exit agreement")
        except MPI.Exception as exc:
            raise _mpi.as_failure(exc, self._comm, "should_exit()") from exc
        self._req = None
        r = self._recv
        self._agreed_longest = float(r[_LONGEST])
        margin = self.config.exit_margin or max(MIN_MARGIN_S, 2 * self._agreed_longest)
        reasons = []
        if r[_SIG] > 0:
            self._signal = int(r[_SIG])  # kept: an agreement after a repair still counts it
            reasons.append(f"signal {signal.Signals(int(r[_SIG])).name}")
        if r[_HALT] > 0:
            reasons.append("halt request")
        if r[_KNOWN] > 0:
            self.time_left = float(r[_LEFT])
            if self.time_left <= margin:
                reasons.append(f"the allocation ends in {self.time_left:.0f} s (margin {margin:.0f} s)")
        if reasons:
            self.decided, self.reasons = True, reasons
        step = float(r[_STEP])
        gap = MAX_GAP if step <= 0 else int(min(MAX_GAP, max(1.0, CHECK_INTERVAL_S / step)))
        self._next_check = self._calls + gap

    # -- acting on it ---------------------------------------------------------------------------------------

    def should_exit(self, ckpt: CheckpointTaker) -> bool:
        """:meth:`Checkpointer.should_exit`: poll, and take the exit checkpoint the first time it is true."""
        if self.poll() and not self.acted:
            self.act(ckpt)
        return self.decided

    def finish_snapshot(self, ckpt: CheckpointTaker, level: int) -> int:
        """The end of ``snapshot()``: the exit checkpoint if the answer just turned true, else the due one."""
        if self.poll() and not self.acted:
            return self.act(ckpt)
        if level and self.time_left is not None and self.time_left <= self._agreed_longest:
            return 0  # it would not finish before the end (agreed numbers: the same skip on every rank)
        if level:
            ckpt.checkpoint(level)
        return level

    def act(self, ckpt: CheckpointTaker) -> int:
        """Take the exit checkpoint (unless it would not finish in time) and mark a halt request done;
        return the level taken, 0 if none (collective). A process failure in it leaves ``acted`` false: after
        the online recovery the decision is taken again (:meth:`rebind`)."""
        level = self.config.exit_level
        if level in (2, 3) and self.config.group_size < 2:
            level = 4  # no L2/L3 groups in this configuration
        why = "; ".join(self.reasons)
        taken = 0
        if self.time_left is not None and self.time_left <= self._agreed_longest:
            note = (f"no checkpoint: {self.time_left:.0f} s left, the longest checkpoint took "
                    f"{self._agreed_longest:.0f} s")
        elif not ckpt.protected or (ckpt.restarted and not ckpt.status().recovered):
            note = "no checkpoint: nothing new to save"
        else:
            self.checkpoint_id = ckpt.checkpoint(level)
            ckpt.wait()  # its background post-processing too: the job is about to end
            taken, note = level, f"checkpoint {self.checkpoint_id} at L{level}"
        if self._watch is not None and "halt request" in self.reasons and self._watch.record is not None:
            try:
                done = self._watch.record.honoured(self.exec_id, self.checkpoint_id)
                write_halt(self.config.meta_dir, done)
            except FtkitError as exc:
                _say(f"could not mark the halt request done: {exc}")
        self.acted = True
        events.exit_requested(self.rank, why, note)
        return taken

    def close(self) -> None:
        """Put the previous signal handlers back; free the communicator if no agreement is in flight."""
        if threading.current_thread() is threading.main_thread():
            for sig, prev in self._previous.items():
                with contextlib.suppress(ValueError, TypeError):
                    if signal.getsignal(sig) == self._on_signal:
                        signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous = {}
        comm, self._comm = self._comm, None
        if comm is None:
            return
        if self._req is not None:
            with contextlib.suppress(MPI.Exception):
                if not self._req.Test():
                    return  # never wait here (a peer may be gone): the duplicate is left to MPI_Finalize
        with contextlib.suppress(MPI.Exception):
            comm.Free()


def _say(message: str) -> None:
    """A warning of the exit policy (a damaged halt record...), through the event log."""
    events.CKPT.warning("%s", message)
