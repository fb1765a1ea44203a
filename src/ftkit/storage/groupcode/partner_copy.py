"""L2: partner copies of checkpoint files between the members of a group, streamed in bounded chunks.

Contract. Every function here is collective over ``comm``, a communicator holding *one process per group
member, in member order* (member ``i`` is ``comm`` rank ``i``). A process may act for a member that is not
itself (a node's head rank acting for one of its application ranks): it only needs to see the member's
files, whose paths it passes in. Member ``i``'s data file is copied to member ``(i + 1) % n`` (its partner,
see :meth:`ftkit.topology.Topology.partner`), which stores it under its own ``copy_path``; so member ``i``'s
``copy_path`` holds member ``(i - 1) % n``'s data file, byte for byte. Files are never held in memory whole:
at most three chunks of ``chunk_size`` bytes per process (one sent; one received while the previous one is
written), and a received file appears under its final name only once complete and fsynced.

Recovery (:func:`assess_partner` then :func:`rebuild_partner`) brings back lost data files from the
partner copies and re-creates lost copies, so the group is protected again afterwards. A member's data is
lost for good when its partner's copy is lost too (e.g. two neighbouring nodes of the ring).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..._wait import deadline_after, wait_requests
from ...errors import FtkitError, RecoveryError, StorageError
from ...topology import partner_index, partner_source_index
from .._fsutil import BackgroundSyncs
from .._stream import AtomicWriter, byte_view, file_size, read_into
from ..format.source import ByteSource
from ..placement.node_local import LocalLevel
from ._collective import (
    MESSAGE_BYTES,
    ErrorGuard,
    Worker,
    agree_errors,
    allgather_in_place,
    close_fd,
    decode_message,
    encode_message,
)
from .plan import PartnerPlan

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["DEFAULT_CHUNK_SIZE", "transfer_file", "partner_copy", "PartnerPlan", "assess_partner",
           "rebuild_partner", "PartnerLevel"]

#: Bytes per message when streaming a file (memory per process: at most three such buffers).
DEFAULT_CHUNK_SIZE = 4 << 20

_TAG_SIZE = 7301
_TAG_DATA = 7302
_TAG_SENDER_OK = 7303
_TAG_RECEIVER_OK = 7304

#: Default seconds to wait for a partner at each step of a transfer.
DEFAULT_TIMEOUT = 600.0

PathLike = str | os.PathLike[str]


def transfer_file(comm: MPI.Comm, send_path: PathLike | None, dest: int, recv_path: PathLike | None,
                  source: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  timeout: float | None = DEFAULT_TIMEOUT, send_bytes: ByteSource | None = None,
                  syncs: BackgroundSyncs | None = None) -> int:
    """Send ``send_path`` to rank ``dest`` while receiving rank ``source``'s file into ``recv_path``.

    Either direction may be switched off with ``MPI.PROC_NULL`` (and a None path). The received file is
    written atomically (temporary name, fsync, rename). Point-to-point; both sides must call it. A side that
    fails (a full disk, a read error) keeps taking part until the end of the transfer, then both sides
    learn each other's outcome: the file is committed only when both sides succeeded, and a failure is
    raised on both sides with its original cause.

    Parameters
    ----------
    comm
        Communicator in which ``dest`` and ``source`` are ranks.
    send_path, recv_path
        File to send, file to create from the received bytes.
    dest, source
        Peer ranks, or ``MPI.PROC_NULL``.
    chunk_size
        Bytes per message (must be the same on both sides).
    timeout
        Seconds to wait for the peer at each step (None: no deadline).
    send_bytes
        The bytes of ``send_path`` when the caller has them (e.g. in memory, see
        :mod:`ftkit.storage.pending`): sent from there instead of read from the file.
    syncs
        Hand the received file's fsync to this background batch instead of making it before the rename.

    Returns
    -------
    int
        Bytes received (0 when nothing was received).

    Raises
    ------
    StorageError
        On both sides, if the file to send is missing or unreadable or the copy cannot be written (e.g.
        ``[Errno 28] No space left on device``); the temporary file is removed.
    TimeoutFailure
        If the peer does not answer before a deadline.
    """
    from mpi4py import MPI

    if dest != MPI.PROC_NULL and send_path is None or source != MPI.PROC_NULL and recv_path is None:
        raise StorageError("transfer_file: a path is needed for each direction that is not MPI.PROC_NULL")
    t = _Transfer(comm, send_path if dest != MPI.PROC_NULL else None, dest,
                  recv_path if source != MPI.PROC_NULL else None, source, chunk_size, timeout,
                  send_bytes if dest != MPI.PROC_NULL else None, syncs)
    try:
        t.exchange_sizes()
        t.stream()
        t.finish()
    finally:
        t.close()
    return max(t.recv_len, 0)


class _Transfer:
    """The state of one :func:`transfer_file` call (a send and a receive, each possibly switched off)."""

    def __init__(self, comm: MPI.Comm, send_path: PathLike | None, dest: int, recv_path: PathLike | None,
                 source: int, chunk_size: int, timeout: float | None, send_bytes: ByteSource | None,
                 syncs: BackgroundSyncs | None) -> None:
        self.comm, self.dest, self.source, self.chunk, self.timeout = comm, dest, source, chunk_size, timeout
        self.send_path, self.recv_path, self.send_bytes, self.syncs = send_path, recv_path, send_bytes, syncs
        self.send_len = self.recv_len = -1
        self.send_guard, self.recv_guard = ErrorGuard(), ErrorGuard()
        self.writer: AtomicWriter | None = None
        self.fd = -1

    def _wait(self, reqs: list[MPI.Request], what: str) -> None:
        wait_requests(reqs, deadline_after(self.timeout), what)

    def exchange_sizes(self) -> None:
        """Tell the receiver the size of the file (-1: missing); fail on both sides if it is missing."""
        size = self.send_bytes.size if self.send_bytes is not None else file_size(self.send_path)
        send_len = np.array([size], np.int64)
        recv_len = np.array([-1], np.int64)
        self._wait([self.comm.Isend(send_len, self.dest, _TAG_SIZE),
                    self.comm.Irecv(recv_len, self.source, _TAG_SIZE)], "partner copy: exchanging sizes")
        self.send_len, self.recv_len = int(send_len[0]), int(recv_len[0])
        # A missing file is not raised here: the peer would be left streaming to (or waiting for) a process
        # that left. Both sides skip that direction (they see the same -1) and the outcome says why.
        if self.send_path is not None and self.send_len < 0:
            self.send_guard.error = StorageError(f"cannot send {self.send_path}: file is missing")
        with self.send_guard:
            if self.send_path is not None and self.send_len > 0 and self.send_bytes is None:
                self.fd = os.open(self.send_path, os.O_RDONLY)
        with self.recv_guard:
            if self.recv_path is not None and self.recv_len >= 0:
                self.writer = AtomicWriter(self.recv_path, writeback=self.syncs is None)

    def stream(self) -> None:
        """Move the bytes chunk by chunk; a failing side records its error and keeps going.

        With more than one chunk to receive, a worker thread writes chunk c (``pwrite`` releases the GIL)
        while this thread transfers chunk c+1 into a second receive buffer: the disk and the transfer overlap.
        """
        from mpi4py import MPI

        z = self.chunk
        n_send = -(-self.send_len // z) if self.send_path is not None and self.send_len > 0 else 0
        n_recv = -(-self.recv_len // z) if self.recv_path is not None and self.recv_len > 0 else 0
        sbuf = np.zeros(min(z, max(self.send_len, 1)), np.uint8) if n_send else None
        nbuf = 2 if n_recv > 1 else 1
        rbufs = [np.empty(min(z, max(self.recv_len, 1)), np.uint8) for _ in range(nbuf if n_recv else 0)]
        worker = Worker("ftkit-l2-write") if nbuf == 2 else None
        try:
            for c in range(max(n_send, n_recv)):
                b = c % nbuf
                reqs = []
                if c < n_recv:
                    if worker is not None:
                        with self.recv_guard:
                            worker.wait(b)  # the write of chunk c-2 is done: its buffer is free
                    rlen = min(z, self.recv_len - c * z)
                    reqs.append(self.comm.Irecv([rbufs[b], rlen, MPI.BYTE], self.source, _TAG_DATA))
                if c < n_send:
                    slen = min(z, self.send_len - c * z)
                    out = None
                    with self.send_guard:
                        if self.send_guard.ok:
                            out = self._next_chunk(c * z, sbuf[:slen])  # type: ignore[index]
                    reqs.append(self.comm.Isend([sbuf if out is None else out, slen, MPI.BYTE], self.dest,
                                                _TAG_DATA))
                self._wait(reqs, f"partner copy: chunk {c}")
                if c < n_recv:
                    if worker is not None:
                        worker.submit(b, self._write, rbufs[b][:rlen], c * z)
                    else:
                        with self.recv_guard:
                            self._write(rbufs[b][:rlen], c * z)
        finally:
            if worker is not None:
                with self.recv_guard:
                    worker.wait_all()
                worker.close()

    def _next_chunk(self, offset: int, buf: np.ndarray) -> memoryview | None:
        """The ``len(buf)`` bytes to send from ``offset``: a view of the caller's bytes when they are in
        memory in one piece (no copy), else None after reading them into ``buf``."""
        if self.send_bytes is None:
            read_into(self.fd, offset, buf, self.send_len)
            return None
        view = self.send_bytes.map(offset, buf.nbytes)
        if view is None:
            self.send_bytes.read_into(offset, byte_view(buf))
        return view

    def _write(self, data: np.ndarray, offset: int) -> None:
        if self.recv_guard.ok:
            self.writer.pwrite(data, offset)  # type: ignore[union-attr]

    def _swap(self, mine: str | None, to: int, frm: int, tag: int, what: str) -> str | None:
        out, got = encode_message(mine), np.zeros(MESSAGE_BYTES, np.uint8)
        self._wait([self.comm.Isend(out, to, tag), self.comm.Irecv(got, frm, tag)], what)
        return decode_message(got)

    def finish(self) -> None:
        """Agree with both peers on the outcome; commit the received file only if both sides succeeded."""
        send_err = None if self.send_guard.ok else _why(self.send_guard.error)
        sender_err = self._swap(send_err, self.dest, self.source, _TAG_SENDER_OK, "partner copy: outcome")
        if self.writer is not None:
            with self.recv_guard:
                if self.recv_guard.ok and sender_err is None:
                    self.writer.commit(self.syncs)
            self.writer.abort()
        recv_err = None if self.recv_guard.ok else _why(self.recv_guard.error)
        receiver_err = self._swap(recv_err, self.source, self.dest, _TAG_RECEIVER_OK, "partner copy: outcome")
        problems = []
        if send_err or receiver_err:
            why = [e for e in (send_err, receiver_err and f"rank {self.dest}: {receiver_err}") if e]
            problems.append(f"sending {self.send_path} to rank {self.dest}: " + "; ".join(why))
        if recv_err or sender_err:
            why = [e for e in (recv_err, sender_err and f"rank {self.source}: {sender_err}") if e]
            problems.append(f"receiving {self.recv_path} from rank {self.source}: " + "; ".join(why))
        if problems:
            raise StorageError("partner copy failed: " + " | ".join(problems))

    def close(self) -> None:
        """Release the file descriptor and any uncommitted temporary file."""
        close_fd(self.fd)
        self.fd = -1
        if self.writer is not None:
            self.writer.abort()


def _why(exc: BaseException | None) -> str:
    return str(exc) if isinstance(exc, (FtkitError, OSError)) else f"{type(exc).__name__}: {exc}"


def partner_copy(comm: MPI.Comm, data_path: PathLike, copy_path: PathLike, *,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, timeout: float | None = DEFAULT_TIMEOUT,
                 names: Sequence[str] | None = None, data_bytes: ByteSource | None = None,
                 syncs: BackgroundSyncs | None = None) -> int:
    """Copy each member's ``data_path`` to the next member's ``copy_path`` (a ring over ``comm``).

    Collective over ``comm`` (one process per group member, member order, at least 2 members). A failure
    anywhere in the ring is raised on every member, with its original cause.

    Parameters
    ----------
    timeout
        Seconds to wait for a partner at each step (None: no deadline).
    names
        How to name members in errors (e.g. ``"rank 5 on node 2"``).
    data_bytes
        The bytes of ``data_path``, when the caller has them in memory (sent from there).
    syncs
        Hand the fsync of the copy this process stores to this background batch (see
        :class:`~ftkit.storage._fsutil.BackgroundSyncs`).

    Returns
    -------
    int
        Bytes of the partner copy this process stored.

    Raises
    ------
    StorageError
        On every member, if a data file is missing or unreadable or a copy cannot be written.
    """
    n, i = comm.Get_size(), comm.Get_rank()
    if n < 2:
        raise StorageError("partner_copy needs a group of at least 2 members (one per node)")
    guard = ErrorGuard()
    got = 0
    with guard:
        got = transfer_file(comm, data_path, partner_index(i, n), copy_path, partner_source_index(i, n),
                            chunk_size=chunk_size, timeout=timeout, send_bytes=data_bytes, syncs=syncs)
    agree_errors(comm, guard, "L2 partner copy", names, timeout=timeout)
    return got


def assess_partner(comm: MPI.Comm, data_path: PathLike, copy_path: PathLike,
                   validate: Callable[[Path], bool] | None = None, *,
                   timeout: float | None = DEFAULT_TIMEOUT) -> PartnerPlan:
    """Check this member's data file and stored copy, and share the result within the group (collective).

    Parameters
    ----------
    validate
        Returns True when a checkpoint file (data or copy: the same format) is intact, e.g. by checking its
        checksums; default: the file exists and is not empty.
    timeout
        Seconds to wait for the other members (None: no deadline).

    Raises
    ------
    TimeoutFailure
        If a member does not take part within ``timeout`` seconds.
    """
    check = validate or (lambda p: file_size(p) > 0)
    flags = np.zeros((comm.Get_size(), 2), dtype=np.uint8)
    flags[comm.Get_rank()] = (check(Path(data_path)), check(Path(copy_path)))
    allgather_in_place(comm, flags, timeout, "L2 assessment")
    return PartnerPlan(tuple(bool(a) for a in flags[:, 0]), tuple(bool(b) for b in flags[:, 1]))


def rebuild_partner(comm: MPI.Comm, plan: PartnerPlan, data_path: PathLike, copy_path: PathLike, *,
                    names: Sequence[str] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                    timeout: float | None = DEFAULT_TIMEOUT) -> PartnerPlan:
    """Restore lost data files from partner copies, then re-create lost copies (collective over the group).

    Parameters
    ----------
    plan
        The result of :func:`assess_partner` (the same on every member).
    names
        How to name members in errors (e.g. ``"rank 5 on node 2"``).
    timeout
        Seconds to wait for a partner at each step (None: no deadline).

    Returns
    -------
    PartnerPlan
        The plan after repair (everything present).

    Raises
    ------
    RecoveryError
        On every member, when some member lost both its file and its partner copy; nothing is written then.
    StorageError
        On every member, when a transfer fails (with its cause, e.g. a full disk).
    """
    from mpi4py import MPI

    if not plan.recoverable:
        raise RecoveryError(f"L2 partner copies cannot recover the group: {plan.describe(names)}")
    n, i = comm.Get_size(), comm.Get_rank()
    # Step 1: the partner of each lost member sends its copy back (the plan's restores).
    dest = next((m for h, m in plan.restores() if h == i), MPI.PROC_NULL)
    source = next((h for h, m in plan.restores() if m == i), MPI.PROC_NULL)
    guard = ErrorGuard()  # a failed step is reported by every member at the end, not left waiting
    with guard:
        transfer_file(comm, copy_path if dest != MPI.PROC_NULL else None, dest,
                      data_path if source != MPI.PROC_NULL else None, source, chunk_size=chunk_size,
                      timeout=timeout)
    # Step 2: every lost copy is sent again from the (now restored) original (the plan's recopies).
    dest = next((h for m, h in plan.recopies() if m == i), MPI.PROC_NULL)
    source = next((m for m, h in plan.recopies() if h == i), MPI.PROC_NULL)
    with guard:
        transfer_file(comm, data_path if dest != MPI.PROC_NULL else None, dest,
                      copy_path if source != MPI.PROC_NULL else None, source, chunk_size=chunk_size,
                      timeout=timeout)
    agree_errors(comm, guard, "L2 rebuild", names, timeout=timeout)
    return PartnerPlan((True,) * n, (True,) * n)


class PartnerLevel(LocalLevel):
    """Level 2 storage: the partner copy each rank *holds* on its own node.

    Layout: ``ckpt_dir/node<n>/<exec_id>/l2/ckpt<id>/rank<r>.ftk`` on rank ``r``'s node ``n``, holding the
    checkpoint file of ``r``'s partner source (the previous member of its group), byte-identical to that
    rank's L1 file (its header names the source rank). Paths are keyed by the holder so that every rank
    finds, verifies and removes the file on its own node without knowing the group layout; the group layout
    lives in :mod:`ftkit.topology` and the checkpoint's manifest entry.
    """

    level = 2
    name = "partner"
    supports_read = False
    supports_direct_write = False  # written by post-processing, not from the arrays

