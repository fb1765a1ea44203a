"""Sleeping waits on MPI requests and other conditions, with a deadline: the one poll loop of the project.

With more ranks than cores (and a post-processing thread beside the application), MPI's blocking waits
busy-poll and steal the core from the very process everyone is waiting for. Every wait in ftkit therefore
tests its condition, sleeps a short and growing pause (the GIL is released meanwhile), and tests again,
until the condition holds or the deadline passes. Each test also progresses MPI's transfers.

Deadlines are absolute values of :func:`time.monotonic` (seconds); :func:`deadline_after` makes one.
This module imports only :mod:`ftkit.errors`, so every layer (storage, checkpoint, failure, linalg) may
use it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from .errors import TimeoutFailure

__all__ = ["deadline_after", "poll_until", "wait_requests", "FIRST_SLEEP", "MAX_SLEEP"]

#: First pause (seconds) between two tests.
FIRST_SLEEP = 2e-5
#: Default longest pause (seconds) between two tests.
MAX_SLEEP = 1e-3


def deadline_after(timeout: float | None) -> float | None:
    """Return the absolute monotonic deadline ``timeout`` seconds from now (None or inf: no deadline)."""
    if timeout is None or math.isinf(timeout):
        return None
    return time.monotonic() + float(timeout)


def poll_until(test: Callable[[], bool], deadline: float | None, what: str, *,
               max_sleep: float = MAX_SLEEP, growth: float = 1.5) -> None:
    """Call ``test()`` until it returns true, sleeping between calls; give up at ``deadline``.

    Parameters
    ----------
    test
        The condition; exceptions it raises (e.g. ``MPI.Exception`` for a failed peer) propagate.
    deadline
        Absolute :func:`time.monotonic` time in seconds, or None to wait without limit (only for waits
        whose peers are covered by another failure mechanism).
    what
        What is being waited for, for the error message.
    max_sleep
        Longest pause between two tests, seconds.
    growth
        Factor by which the pause grows after each unsuccessful test.

    Raises
    ------
    TimeoutFailure
        If ``deadline`` passes before the condition holds.
    """
    pause = FIRST_SLEEP
    while not test():
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutFailure(f"{what}: no answer before the deadline (raise failure_timeout if the "
                                 "machine is just slow)")
        time.sleep(pause)
        pause = min(pause * growth, max_sleep)


def wait_requests(requests: Sequence[Any], deadline: float | None = None, what: str = "MPI wait", *,
                  max_sleep: float = MAX_SLEEP) -> None:
    """Wait for every MPI request in ``requests`` without spinning (``Testall`` with growing sleeps).

    Raises
    ------
    TimeoutFailure
        If ``deadline`` passes first; the requests are left pending.
    mpi4py.MPI.Exception
        If MPI completes a request in error (callers turn it into a ``ProcessFailure``).
    """
    pending = list(requests)
    if not pending:
        return
    if len(pending) == 1:
        poll_until(pending[0].Test, deadline, what, max_sleep=max_sleep)
        return
    from mpi4py import MPI

    poll_until(lambda: MPI.Request.Testall(pending), deadline, what, max_sleep=max_sleep)
