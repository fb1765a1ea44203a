"""Post-processing executors: run a checkpoint's L2/L3/L4 work inline, in a background thread, or on a head.

After a checkpoint's L1 files are written, the rest of its work (partner copy, group encoding, flush to the
parallel file system) is *post-processing*. FTI hides it behind the computation (reference 002, Figure 2)
with a dedicated thread or a dedicated process per node. Three executors share one contract:

* :class:`InlineExecutor` runs the work in the calling thread: ``submit`` returns when it is done.
* :class:`ThreadExecutor` runs it in one background thread per rank, on its own duplicated communicators
  (MPI must provide ``MPI_THREAD_MULTIPLE``; :func:`make_thread_executor` falls back to inline with a
  warning otherwise). Codec kernels and file I/O release the GIL, so the work overlaps the computation.
* Head mode (:mod:`.head`): the job's work is a :class:`~ftkit.checkpoint.head.HeadClient` request -- the
  checkpoint's file paths go by message to the node's head rank, and a thread executor waits for the answer
  while the application computes. Only application ranks write the manifest.

The contract of every executor:

- At most one checkpoint's post-processing is in flight: ``submit`` first waits for the previous one, so
  memory is bounded and checkpoints complete in order.
- A checkpoint is complete at its level only when its work succeeded on every rank: the ranks agree on the
  outcome (in head mode the heads agree first), then all run the job's ``commit`` (the manifest update,
  collective); until then, recovery uses the previous complete checkpoint.
- A failure of the background work is stored and raised by the next call (``check``, ``submit``, ``wait``,
  ``close``), never swallowed; it is raised once. Because the outcome is agreed before it is stored, every
  rank raises the same failure at the same collective call.
- Every wait on a peer has a deadline (``timeout`` seconds); a peer that does not answer becomes a
  :class:`~ftkit.errors.TimeoutFailure`, a dead one a :class:`~ftkit.errors.ProcessFailure` (raised as such,
  never wrapped in a CheckpointError, and never as a raw ``MPI.Exception``).

Priority: background post-processing should use the cores the application leaves idle (ranks waiting for
their neighbours), not delay the application's critical path. The background thread and the heads therefore
lower their own scheduling priority (:func:`lower_priority`: Linux per-thread nice, ``FTKIT_POST_NICE``,
default :data:`DEFAULT_POST_NICE`; ``0`` keeps the normal priority). Threads they start (the encoder's
worker) inherit it. The inline executor never changes the priority.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .._wait import deadline_after, wait_requests
from ..errors import CheckpointError, ConfigError, ProcessFailure, TimeoutFailure
from ..failure.detect import ft_dup, is_failure_error
from . import _mpi
from .affinity import pin_ft_thread

__all__ = ["PostComms", "PostJob", "Executor", "InlineExecutor", "ThreadExecutor",
           "thread_multiple_available", "make_thread_executor", "wait_request", "agree_outcome",
           "lower_priority", "post_nice",
           "DEFAULT_TIMEOUT", "DEFAULT_POST_NICE", "POST_NICE_ENV"]

#: Default deadline (s) for waits on a peer during post-processing.
DEFAULT_TIMEOUT = 600.0
_MAX_SLEEP = 5e-3  # s; poll back-off cap: idle waiters leave the (shared) cores to the computation


#: Environment variable: nice increment of background post-processing (0 to 19; 0 = normal priority).
POST_NICE_ENV = "FTKIT_POST_NICE"
#: Default nice increment of the background thread and the heads.
DEFAULT_POST_NICE = 10


def post_nice() -> int:
    """Return the nice increment for background post-processing: ``FTKIT_POST_NICE`` or the default.

    Raises
    ------
    ConfigError
        If ``FTKIT_POST_NICE`` is not an integer from 0 to 19.
    """
    raw = os.environ.get(POST_NICE_ENV, "").strip()
    if not raw:
        return DEFAULT_POST_NICE
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise ConfigError(f"{POST_NICE_ENV}={raw!r}: expected an integer from 0 (normal priority) to 19 "
                          "(lowest)")
    return value


def lower_priority(increment: int | None = None) -> int:
    """Lower the calling thread's scheduling priority by ``increment`` (default :func:`post_nice`).

    On Linux the nice value belongs to the thread (``setpriority`` on its thread id), so the application's
    threads keep theirs; threads started afterwards by this one inherit it. Lowering is always allowed.
    Elsewhere the nice value belongs to the whole process, so nothing is changed (nor where the call is
    refused, e.g. in a sandbox). Returns the calling thread's nice value now in effect (0 if unknown).
    """
    inc = post_nice() if increment is None else int(increment)
    if not sys.platform.startswith("linux"):
        return 0
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if inc > 0:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, current + inc))
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (AttributeError, OSError):
        return 0


def thread_multiple_available() -> bool:
    """Return whether MPI was initialized with ``MPI_THREAD_MULTIPLE`` (needed by the thread executor)."""
    return MPI.Is_initialized() and MPI.Query_thread() >= MPI.THREAD_MULTIPLE


def wait_request(req: MPI.Request, timeout: float, what: str) -> None:
    """Wait for ``req`` at most ``timeout`` seconds, sleeping between tests (the GIL is free meanwhile).

    Raises
    ------
    TimeoutFailure
        If it does not complete in time (the request is left pending).
    ProcessFailure
        If MPI reports a failed process.
    """
    try:
        wait_requests([req], deadline_after(timeout), what, max_sleep=_MAX_SLEEP)
    except MPI.Exception as exc:
        if is_failure_error(exc):
            raise ProcessFailure(f"{what}: a process failed ({exc})") from exc
        raise


def agree_outcome(comm: MPI.Comm, ok: bool, timeout: float, what: str) -> list[bool]:
    """Share a success flag with every rank of ``comm`` and return all flags (collective, with deadline).

    Raises
    ------
    TimeoutFailure, ProcessFailure
        If a rank does not take part in time, or failed.
    """
    mine = np.array([1 if ok else 0], np.int8)
    flags = np.zeros(comm.Get_size(), np.int8)
    try:
        req = comm.Iallgather(mine, flags)
    except MPI.Exception as exc:
        if is_failure_error(exc):
            raise ProcessFailure(f"{what}: a process failed ({exc})") from exc
        raise
    wait_request(req, timeout, what)
    return [bool(f) for f in flags]


@dataclass
class PostComms:
    """The communicators post-processing uses: all application ranks, and this rank's L2/L3 group."""

    app: MPI.Intracomm
    group: MPI.Intracomm | None = None
    owned: bool = False

    def dup(self) -> PostComms:
        """Return error-returning duplicates (collective over ``app``, then over ``group``)."""
        return PostComms(ft_dup(self.app), ft_dup(self.group) if self.group is not None else None, owned=True)

    def free(self) -> None:
        """Free the communicators if this object owns them."""
        if self.owned:
            for c in (self.group, self.app):
                if c is not None and c != MPI.COMM_NULL:
                    try:
                        c.Free()
                    except MPI.Exception:
                        pass
            self.owned = False


@dataclass
class PostJob:
    """One checkpoint's post-processing.

    Attributes
    ----------
    ckpt_id, level
        The checkpoint and the level its post-processing completes.
    run
        The rank's own work, given the executor's :class:`PostComms` (inline and thread executors).
    commit
        Collective over the executor's communicators, after the work succeeded on every rank: marks the
        checkpoint complete (the manifest update).
    on_done
        Called on every rank with the outcome once known (``None`` on success, else the error).
    """

    ckpt_id: int
    level: int
    run: Callable[[PostComms], None] | None = None
    commit: Callable[[PostComms], None] | None = None
    on_done: Callable[[BaseException | None], None] | None = None


def _complete(job: PostJob, comms: PostComms, timeout: float) -> None:
    """Run ``job`` on this rank, agree on the outcome over ``comms.app``, then commit; raise on failure."""
    what = f"post-processing of checkpoint {job.ckpt_id} (level {job.level})"
    local: BaseException | None = None
    try:
        if job.run is not None:
            job.run(comms)
    except Exception as exc:  # reported to every rank below, then re-raised here
        local = exc
    flags = agree_outcome(comms.app, local is None, timeout, what)
    if isinstance(local, MPI.Exception) and is_failure_error(local):
        local = ProcessFailure(f"{what}: a process failed ({local})")
    if isinstance(local, ProcessFailure):
        raise local
    if local is not None:
        raise CheckpointError(f"{what} failed on this rank: {local}") from local
    if not all(flags):
        bad = [r for r, f in enumerate(flags) if not f]
        raise CheckpointError(f"{what} failed on rank(s) {bad}; the checkpoint is not complete at level "
                              f"{job.level} and recovery will use the previous one")
    if job.commit is not None:
        job.commit(comms)


class Executor:
    """Common interface of the post-processing executors (see the module docstring for the contract)."""

    name = "base"
    #: True when ``submit`` returns before the work is done.
    asynchronous = False

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = float(timeout)
        self._error: BaseException | None = None

    def _raise_stored(self) -> None:
        err, self._error = self._error, None
        if err is not None:
            raise err

    def check(self) -> None:
        """Raise the failure of finished background work, if any (once)."""
        self._raise_stored()

    @property
    def busy(self) -> bool:
        """Whether a checkpoint's post-processing is in flight."""
        return False

    @property
    def failed(self) -> bool:
        """Whether finished background work left a failure to raise (local, non-blocking)."""
        return self._error is not None and not self.busy

    def submit(self, job: PostJob) -> None:
        """Start ``job`` after the previous job finished (and raise the previous job's failure)."""
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> None:
        """Block until no post-processing is in flight, then raise its failure if it failed.

        Raises
        ------
        TimeoutFailure
            If the work is still running after ``timeout`` seconds (default: the executor's timeout).
        """
        self._raise_stored()

    def close(self) -> None:
        """Wait for the work in flight, release resources, and raise a pending failure."""
        self.wait()


class InlineExecutor(Executor):
    """Run post-processing in the calling thread (FTI's ``inline_lN = 1``)."""

    name = "inline"

    def __init__(self, comms: PostComms, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(timeout)
        self.comms = comms

    def submit(self, job: PostJob) -> None:
        """Run ``job`` now, on every rank; return when it is complete (or raise)."""
        self._raise_stored()
        err: BaseException | None = None
        try:
            _complete(job, self.comms, self.timeout)
        except BaseException as exc:
            err = exc
            raise
        finally:
            if job.on_done is not None:
                job.on_done(err)


class ThreadExecutor(Executor):
    """Run post-processing in one background thread per rank, on private duplicated communicators.

    Parameters
    ----------
    comms
        The checkpointer's communicators; the executor duplicates them (collective) for the thread.
    timeout
        Deadline (s) for waits on peers.
    """

    name = "thread"
    asynchronous = True

    def __init__(self, comms: PostComms, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(timeout)
        self.nice = post_nice()  # read here so a bad FTKIT_POST_NICE is reported by the constructor
        self.comms = comms.dup()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        """Whether the background thread is still working."""
        return self._thread is not None and self._thread.is_alive()

    def _body(self, job: PostJob) -> None:
        err: BaseException | None = None
        try:
            lower_priority(self.nice)
            pin_ft_thread()  # onto the reserved core, when the application was pinned off it
            _complete(job, self.comms, self.timeout)
        except BaseException as exc:  # stored for the application thread, which raises it
            err = exc
            self._error = exc
        if job.on_done is not None:
            try:
                job.on_done(err)
            except BaseException as exc:
                self._error = self._error or exc

    def submit(self, job: PostJob) -> None:
        """Wait for the previous job, then start ``job`` in the background and return at once."""
        if self._closed:
            raise CheckpointError("the post-processing executor is closed (finalize() was called)")
        self.wait()
        self._thread = threading.Thread(target=self._body, args=(job,), daemon=True,
                                        name=f"ftkit-post-{job.ckpt_id}")
        self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Join the background thread (at most ``timeout`` s), then raise its failure if any."""
        t = self._thread
        if t is not None:
            limit = self.timeout if timeout is None else float(timeout)
            # join() in slices so a KeyboardInterrupt still reaches the main thread.
            deadline = time.monotonic() + limit
            while t.is_alive() and time.monotonic() < deadline:
                t.join(min(0.5, max(0.0, deadline - time.monotonic())))
            if t.is_alive():
                raise TimeoutFailure(f"background post-processing still running after {limit:.0f} s")
            self._thread = None
        self._raise_stored()

    def close(self) -> None:
        """Wait for the work in flight, free the private communicators, raise a pending failure."""
        if self._closed:
            self._raise_stored()
            return
        try:
            self.wait()
        finally:
            if not self.busy:
                self.comms.free()
                self._closed = True


def make_thread_executor(comms: PostComms, timeout: float = DEFAULT_TIMEOUT) -> Executor:
    """Return a :class:`ThreadExecutor`, or without THREAD_MULTIPLE an :class:`InlineExecutor` (and warn).

    Collective over ``comms.app`` (the thread executor duplicates communicators); every rank gets the same
    kind of executor.
    """
    ok = thread_multiple_available()
    # Every rank must take the same branch: the thread executor's Dup is collective.
    if _mpi.all_true(comms.app, ok, timeout, "post-processing set-up"):
        return ThreadExecutor(comms, timeout)
    warnings.warn("MPI was not initialized with MPI_THREAD_MULTIPLE (mpi4py.rc.thread_level): "
                  "asynchronous post-processing falls back to inline", RuntimeWarning, stacklevel=2)
    return InlineExecutor(comms, timeout)
