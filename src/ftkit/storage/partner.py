"""L2: partner copies of checkpoint files between the members of a group, streamed in bounded chunks.

Contract. Every function here is collective over ``comm``, a communicator holding *one process per group
member, in member order* (member ``i`` is ``comm`` rank ``i``). A process may act for a member that is not
itself (a node's head rank acting for one of its application ranks): it only needs to see the member's
files, whose paths it passes in. Member ``i``'s data file is copied to member ``(i + 1) % n`` (its partner,
see :meth:`ftkit.topology.Topology.partner`), which stores it under its own ``copy_path``; so member ``i``'s
``copy_path`` holds member ``(i - 1) % n``'s data file, byte for byte. Files are never held in memory whole:
at most two chunks (one sent, one received) of ``chunk_size`` bytes are in flight per process, and a
received file appears under its final name only once complete and fsynced.

Recovery (:func:`assess_partner` then :func:`rebuild_partner`) brings back lost data files from the
partner copies and re-creates lost copies, so the group is protected again afterwards. A member's data is
lost for good when its partner's copy is lost too (e.g. two neighbouring nodes of the ring).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import RecoveryError, StorageError
from ._stream import AtomicWriter, file_size, read_into
from .local import LocalLevel

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["DEFAULT_CHUNK_SIZE", "transfer_file", "partner_copy", "PartnerPlan", "assess_partner",
           "rebuild_partner", "PartnerLevel"]

#: Bytes per message when streaming a file (memory per process: two such buffers).
DEFAULT_CHUNK_SIZE = 4 << 20

_TAG_SIZE = 7301
_TAG_DATA = 7302

PathLike = str | os.PathLike[str]


def transfer_file(comm: MPI.Comm, send_path: PathLike | None, dest: int, recv_path: PathLike | None,
                  source: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Send ``send_path`` to rank ``dest`` while receiving rank ``source``'s file into ``recv_path``.

    Either direction may be switched off with ``MPI.PROC_NULL`` (and a None path). The received file is
    written atomically (temporary name, fsync, rename). Point-to-point; both sides must call it.

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

    Returns
    -------
    int
        Bytes received (0 when nothing was received).

    Raises
    ------
    StorageError
        If the file to send is missing (the receiver raises too, naming the sender) or cannot be written.
    """
    from mpi4py import MPI

    send_on = dest != MPI.PROC_NULL
    recv_on = source != MPI.PROC_NULL
    if send_on and send_path is None or recv_on and recv_path is None:
        raise StorageError("transfer_file: a path is needed for each direction that is not MPI.PROC_NULL")
    send_len = np.array([file_size(send_path) if send_on else -1], np.int64)
    recv_len = np.array([-1], np.int64)
    MPI.Request.Waitall([comm.Isend(send_len, dest, _TAG_SIZE), comm.Irecv(recv_len, source, _TAG_SIZE)])
    if send_on and send_len[0] < 0:
        raise StorageError(f"cannot send {send_path}: file is missing")
    if recv_on and recv_len[0] < 0:
        raise StorageError(f"rank {source} of the group has no file to send for {recv_path}")
    n_send = -(-int(send_len[0]) // chunk_size) if send_on else 0
    n_recv = -(-int(recv_len[0]) // chunk_size) if recv_on else 0
    sbuf = np.empty(min(chunk_size, max(int(send_len[0]), 1)), np.uint8) if n_send else None
    rbuf = np.empty(min(chunk_size, max(int(recv_len[0]), 1)), np.uint8) if n_recv else None
    writer = AtomicWriter(recv_path) if recv_on else None  # type: ignore[arg-type]
    fd = os.open(send_path, os.O_RDONLY) if n_send else -1  # type: ignore[arg-type]
    try:
        for c in range(max(n_send, n_recv)):
            reqs = []
            if c < n_recv:
                rlen = min(chunk_size, int(recv_len[0]) - c * chunk_size)
                reqs.append(comm.Irecv([rbuf, rlen, MPI.BYTE], source, _TAG_DATA))  # type: ignore[list-item]
            if c < n_send:
                slen = min(chunk_size, int(send_len[0]) - c * chunk_size)
                read_into(fd, c * chunk_size, sbuf[:slen], int(send_len[0]))  # type: ignore[index]
                reqs.append(comm.Isend([sbuf, slen, MPI.BYTE], dest, _TAG_DATA))
            MPI.Request.Waitall(reqs)
            if c < n_recv:
                writer.pwrite(rbuf[:rlen], c * chunk_size)  # type: ignore[union-attr,index]
        if writer is not None:
            writer.commit()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    return int(recv_len[0]) if recv_on else 0


def partner_copy(comm: MPI.Comm, data_path: PathLike, copy_path: PathLike, *,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Copy each member's ``data_path`` to the next member's ``copy_path`` (a ring over ``comm``).

    Collective over ``comm`` (one process per group member, member order, at least 2 members).

    Returns
    -------
    int
        Bytes of the partner copy this process stored.

    Raises
    ------
    StorageError
        If a data file is missing or a copy cannot be written.
    """
    n, i = comm.Get_size(), comm.Get_rank()
    if n < 2:
        raise StorageError("partner_copy needs a group of at least 2 members (one per node)")
    return transfer_file(comm, data_path, (i + 1) % n, copy_path, (i - 1) % n, chunk_size=chunk_size)


@dataclass(frozen=True)
class PartnerPlan:
    """Which L2 files of a group survive: ``have_data[i]`` (member i's own file) and ``have_copy[i]``
    (the copy of member ``i - 1``'s file that member i stores)."""

    have_data: tuple[bool, ...]
    have_copy: tuple[bool, ...]

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.have_data)

    @property
    def lost_members(self) -> tuple[int, ...]:
        """Members whose data file must be rebuilt."""
        return tuple(i for i, ok in enumerate(self.have_data) if not ok)

    @property
    def unrecoverable(self) -> tuple[int, ...]:
        """Members whose data file and its partner copy are both lost."""
        n = self.size
        return tuple(i for i in self.lost_members if not self.have_copy[(i + 1) % n])

    @property
    def recoverable(self) -> bool:
        """True when every lost data file still has its partner copy."""
        return not self.unrecoverable

    @property
    def intact(self) -> bool:
        """True when nothing is lost (no data file, no copy)."""
        return all(self.have_data) and all(self.have_copy)

    def describe(self, names: Sequence[str] | None = None) -> str:
        """Say what is lost, naming members by ``names`` (default ``member i``)."""
        nm = list(names) if names is not None else [f"member {i}" for i in range(self.size)]
        n = self.size
        parts = [f"{nm[i]} lost its file and its partner copy on {nm[(i + 1) % n]}"
                 for i in self.unrecoverable]
        return "; ".join(parts) if parts else "recoverable"


def assess_partner(comm: MPI.Comm, data_path: PathLike, copy_path: PathLike,
                   validate: Callable[[Path], bool] | None = None) -> PartnerPlan:
    """Check this member's data file and stored copy, and share the result within the group (collective).

    Parameters
    ----------
    validate
        Returns True when a checkpoint file (data or copy: the same format) is intact, e.g. by checking its
        checksums; default: the file exists and is not empty.
    """
    check = validate or (lambda p: file_size(p) > 0)
    mine = (bool(check(Path(data_path))), bool(check(Path(copy_path))))
    allv = comm.allgather(mine)
    return PartnerPlan(tuple(a for a, _ in allv), tuple(b for _, b in allv))


def rebuild_partner(comm: MPI.Comm, plan: PartnerPlan, data_path: PathLike, copy_path: PathLike, *,
                    names: Sequence[str] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> PartnerPlan:
    """Restore lost data files from partner copies, then re-create lost copies (collective over the group).

    Parameters
    ----------
    plan
        The result of :func:`assess_partner` (the same on every member).
    names
        How to name members in errors (e.g. ``"rank 5 on node 2"``).

    Returns
    -------
    PartnerPlan
        The plan after repair (everything present).

    Raises
    ------
    RecoveryError
        On every member, when some member lost both its file and its partner copy; nothing is written then.
    """
    from mpi4py import MPI

    if not plan.recoverable:
        raise RecoveryError(f"L2 partner copies cannot recover the group: {plan.describe(names)}")
    n, i = comm.Get_size(), comm.Get_rank()
    nxt, prv = (i + 1) % n, (i - 1) % n
    # Step 1: the partner of each lost member sends its copy back.
    dest = prv if not plan.have_data[prv] else MPI.PROC_NULL
    source = nxt if not plan.have_data[i] else MPI.PROC_NULL
    transfer_file(comm, copy_path if dest != MPI.PROC_NULL else None, dest,
                  data_path if source != MPI.PROC_NULL else None, source, chunk_size=chunk_size)
    # Step 2: every lost copy is sent again from the (now restored) original.
    dest = nxt if not plan.have_copy[nxt] else MPI.PROC_NULL
    source = prv if not plan.have_copy[i] else MPI.PROC_NULL
    transfer_file(comm, data_path if dest != MPI.PROC_NULL else None, dest,
                  copy_path if source != MPI.PROC_NULL else None, source, chunk_size=chunk_size)
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

