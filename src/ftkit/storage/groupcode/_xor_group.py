"""XOR groups (``xor``, SCR's scheme): one member's share of encoding and of rebuilding, chunk by chunk.

Each data file is cut into k-1 segments laid out in a k x k grid whose diagonal is parity: column j's
parity (stored by member j) is the XOR of the one segment of every other member in column j. Chunks are
exchanged with a reduce-scatter (encoding) or a reduce to the lost member (rebuild), bitwise XOR on
64-bit words, each waited for at most ``timeout`` seconds. Every step a member may fail runs inside an
:class:`ErrorGuard`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._stream import AtomicWriter, byte_view, read_into
from ._collective import ErrorGuard, wait_collective
from .parity import ParityHeader
from .plan import GroupPlan, chunk_size_for, xor_segment

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["xor_cells", "xor_encode", "xor_rebuild"]


def xor_cells(fd: int, rows: np.ndarray, me: int, seg: int, off: int, size: int) -> None:
    """Fill row j (j != me) of ``rows`` with this member's cell of column j at offset ``off``."""
    n, lq = rows.shape
    for j in range(n):
        if j == me:
            continue
        s = j if j < me else j - 1
        read_into(fd, s * seg + off, rows[j], size)


def xor_encode(comm: MPI.Comm, fd: int, sizes: tuple[int, ...], memory: int, writer: AtomicWriter | None,
                offset: int, par_hash: Any, guard: ErrorGuard, timeout: float | None) -> int:
    from mpi4py import MPI

    n, i = comm.Get_size(), comm.Get_rank()
    seg = xor_segment(max(sizes), n)
    # The reduce-scatter's own temporaries (up to two more n-block buffers on some ranks) count too.
    q = chunk_size_for(seg, memory, 3 * n + 1)
    send = np.zeros(n * q, np.uint8)
    recv = np.empty(q, np.uint8)
    for off in range(0, seg, q):
        lq = min(q, seg - off)
        rows = send[:n * lq].reshape(n, lq)
        rows[i] = 0
        with guard:
            if guard.ok:
                xor_cells(fd, rows, i, seg, off, sizes[i])
        words = send[:n * lq].view(np.uint64)
        req = comm.Ireduce_scatter_block(words, recv[:lq].view(np.uint64), op=MPI.BXOR)
        wait_collective(req, (send, recv), timeout, "L3 encoding: reducing a chunk")
        if writer is not None:
            par_hash.update(byte_view(recv)[:lq])
            with guard:
                if guard.ok:
                    writer.pwrite(recv[:lq], offset + off)
    return seg


def xor_rebuild(comm: MPI.Comm, plan: GroupPlan, h: ParityHeader, fd_data: int, fd_par: int,
                 dwriter: AtomicWriter | None, pwriter: AtomicWriter | None, par_hash: Any, memory: int,
                 guard: ErrorGuard, timeout: float | None) -> None:
    from mpi4py import MPI

    n, i = comm.Get_size(), comm.Get_rank()
    (t,) = plan.lost_data
    seg = h.payload_length
    q = chunk_size_for(seg, memory, 4 * n + 1)  # send + receive blocks + the reduction's temporaries
    send = np.zeros(n * q, np.uint8)
    recv = np.zeros(n * q, np.uint8) if i == t else None
    size_i = h.sizes[i]
    for off in range(0, seg, q):
        lq = min(q, seg - off)
        rows = send[:n * lq].reshape(n, lq)
        rows[:] = 0
        with guard:
            if guard.ok:
                if fd_data >= 0:
                    xor_cells(fd_data, rows, i, seg, off, size_i)
                if fd_par >= 0:
                    read_into(fd_par, h.payload_offset + off, rows[i], h.payload_offset + h.payload_length)
        rbuf = recv[:n * lq].view(np.uint64) if recv is not None else None
        req = comm.Ireduce(send[:n * lq].view(np.uint64), rbuf, op=MPI.BXOR, root=t)
        wait_collective(req, (send, recv), timeout, "L3 rebuild: reducing a chunk")
        if i != t:
            continue
        got = recv[:n * lq].reshape(n, lq)  # type: ignore[index]
        with guard:
            if not guard.ok:
                continue
            for j in range(n):
                if j == i:
                    if pwriter is not None:
                        par_hash.update(byte_view(got[j]))
                        pwriter.pwrite(got[j], h.payload_offset + off)
                    continue
                s = j if j < i else j - 1
                lo = s * seg + off
                keep = max(0, min(lq, size_i - lo))
                if keep:
                    dwriter.pwrite(got[j][:keep], lo)  # type: ignore[union-attr]

