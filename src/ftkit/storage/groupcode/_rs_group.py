"""Reed-Solomon groups (``rs``): one member's share of encoding and of rebuilding, chunk by chunk.

Member ``i`` of a ``k``-member group stores parity row ``i`` of ``RSCode(k, k)`` computed over the
members' data files (zero-padded to the largest). Encoding is pipelined on two sets of buffers: a worker
thread encodes and writes chunk c (the codec and ``pwrite`` release the GIL) while the calling thread reads
and exchanges chunk c+1. Every step a member may fail runs inside an :class:`ErrorGuard`, so the member keeps
taking part in the collectives (see :mod:`ftkit.storage.groupcode._collective`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._stream import AtomicWriter, byte_view, read_into
from ..format.source import ByteSource
from ._collective import ErrorGuard, Worker, allgather_in_place, send_to_all, wait_collective
from .parity import ParityHeader
from .plan import MAX_CHUNK, GroupPlan, chunk_size_for, rs_code

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["Timers", "rs_encode", "rs_rebuild", "Reader", "Viewer", "file_reader", "source_reader",
           "source_viewer"]

#: Fills a chunk buffer with a member's data from a byte offset (zeros past the end of the data).
Reader = Callable[[int, np.ndarray], None]
#: A member's data bytes ``[offset, offset + n)`` without a copy (a view of the memory holding them), or None
#: when they are not in one piece of memory (then the :data:`Reader` copies them).
Viewer = Callable[[int, int], "np.ndarray | None"]


def file_reader(fd: int, size: int) -> Reader:
    """Read a data file of ``size`` bytes from ``fd`` (see :func:`ftkit.storage._stream.read_into`)."""
    return lambda start, out: read_into(fd, start, out, size)


def source_viewer(src: ByteSource, size: int) -> Viewer | None:
    """Views of a data file's bytes held in memory by ``src`` (None if ``src`` cannot map its bytes)."""
    if not src.supports_map:
        return None

    def view(start: int, n: int) -> np.ndarray | None:
        if start + n > size:   # the chunk reaches into the zero padding: copied by the reader
            return None
        mapped = src.map(start, n)
        return None if mapped is None else np.frombuffer(mapped, np.uint8)
    return view


def source_reader(src: ByteSource, size: int) -> Reader:
    """Copy a data file of ``size`` bytes from ``src`` (e.g. its bytes in memory), zero-padded."""
    def read(start: int, out: np.ndarray) -> None:
        avail = max(0, min(out.nbytes, size - start))
        if avail:
            src.read_into(start, byte_view(out)[:avail])
        out[avail:] = 0
    return read


class Timers(dict):  # type: ignore[type-arg]
    """Seconds per phase of an encoding (a dict, so callers get plain numbers)."""

    def add(self, key: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``key``."""
        self[key] = self.get(key, 0.0) + seconds


def rs_encode(comm: MPI.Comm, read: Reader, sizes: tuple[int, ...], memory: int, writer: AtomicWriter | None,
               offset: int, data_hash: Any, par_hash: Any, guard: ErrorGuard, timers: Timers,
               timeout: float | None, view: Viewer | None = None) -> int:
    """This member's share of encoding (collective): parity row ``i`` written at ``offset`` of ``writer``.

    ``view`` (the data in memory, e.g. the protected arrays of an inline L3 checkpoint; given on every member
    or on none): each chunk of this member's data is hashed, sent (an ``Alltoallv`` of the one row,
    :func:`~ftkit.storage.groupcode._collective.send_to_all`, instead of an in-place ``Allgather``) and
    encoded where it lies, without a copy into the exchange buffer (a chunk not in one piece of memory is
    still copied).

    Length: one pipeline (read or view, hash, exchange, hand-off to the worker) with its timers.
    """
    n, i = comm.Get_size(), comm.Get_rank()
    length = max(sizes)
    # Two sets of n + 1 chunk buffers (gathered rows + parity row) so that chunk c+1 is read and exchanged
    # while a worker thread encodes and writes chunk c; with ``view``, one more per set: this member's row
    # when it is copied (a send buffer inside the receive buffer would alias it: Open MPI's non-blocking
    # collectives take a send buffer at the receive buffer's address for IN_PLACE).
    extra = 1 if view is not None else 0
    z = min(chunk_size_for(length, memory, 2 * (n + 1 + extra)), max(MAX_CHUNK, 4096))
    starts = range(0, length, z)
    nbuf = 2 if writer is not None and len(starts) > 1 else 1
    gathered = [np.zeros(n * z, np.uint8) for _ in range(nbuf)]
    outs = [np.empty(z, np.uint8) for _ in range(nbuf)]
    own = [np.zeros(z, np.uint8) for _ in range(nbuf)] if view is not None else None
    code = rs_code(n)
    wguard = ErrorGuard()  # the worker's own: the calling thread writes ``guard`` meanwhile
    timers.update(chunk_bytes=float(z), chunks=float(len(starts)))

    def work(b: int, start: int, lc: int, rows: list[np.ndarray]) -> None:
        with wguard:
            out = outs[b][:lc]
            c0, t0 = time.thread_time(), time.perf_counter()
            code.encode_into(rows, [out], parity_indices=[i])
            t1 = time.perf_counter()
            timers.add("codec", t1 - t0)
            timers.add("codec_cpu", time.thread_time() - c0)
            par_hash.update(byte_view(out))
            t2 = time.perf_counter()
            timers.add("parity_hash", t2 - t1)
            if guard.ok and wguard.ok:
                writer.pwrite(out, offset + start)  # type: ignore[union-attr]
            timers.add("write", time.perf_counter() - t2)

    pool = Worker() if nbuf == 2 else None
    try:
        for c, start in enumerate(starts):
            b = c % nbuf
            t0 = time.perf_counter()
            if pool is not None:
                pool.wait(b)  # chunk c-2 is done with buffer set b
            lc = min(z, length - start)
            rows = list(gathered[b][:n * lc].reshape(n, lc))
            if own is not None:
                rows[i] = own[b][:lc]
            t1 = time.perf_counter()
            mine = None
            with guard:
                if guard.ok:
                    mine = view(start, lc) if view is not None else None
                    if mine is None:
                        read(start, rows[i])
            if mine is not None:
                rows[i] = mine
                timers.add("viewed", 1.0)
            t2 = time.perf_counter()
            with guard:
                if guard.ok:
                    data_hash.update(byte_view(rows[i])[:max(0, min(lc, sizes[i] - start))])
            t3 = time.perf_counter()
            if view is None:   # every member passes a view or none (see encoded._encode)
                allgather_in_place(comm, gathered[b][:n * lc], timeout, "L3 encoding: exchanging a chunk")
            else:
                send_to_all(comm, rows[i], gathered[b][:n * lc], i, timeout,
                            "L3 encoding: exchanging a chunk")
            t4 = time.perf_counter()
            timers.add("wait", t1 - t0)
            timers.add("read", t2 - t1)
            timers.add("data_hash", t3 - t2)
            timers.add("exchange", t4 - t3)
            if writer is None:
                continue
            if pool is not None:
                pool.submit(b, work, b, start, lc, rows)
            else:
                work(b, start, lc, rows)
        if pool is not None:
            t0 = time.perf_counter()
            pool.wait_all()
            timers.add("wait", time.perf_counter() - t0)
    finally:
        if pool is not None:
            pool.close()
    if guard.ok and not wguard.ok:
        guard.error = wguard.error
    return length


def rs_rebuild(comm: MPI.Comm, plan: GroupPlan, h: ParityHeader, fd_data: int, fd_par: int,
                dwriter: AtomicWriter | None, pwriter: AtomicWriter | None, par_hash: Any, memory: int,
                guard: ErrorGuard, timeout: float | None) -> None:
    from mpi4py import MPI

    n, i = comm.Get_size(), comm.Get_rank()
    sources = plan.rs_sources()
    contrib = [[f for f in (m, n + m) if f in sources] for m in range(n)]
    frag_ids = [f for c in contrib for f in c]
    wanted = ([i] if dwriter is not None else []) + ([n + i] if pwriter is not None else [])
    length = max(h.sizes)
    z = chunk_size_for(length, memory, n + 4)
    gathered = np.empty(n * z, np.uint8)
    mine = np.empty(len(contrib[i]) * z, np.uint8)
    rebuilt = [np.empty(z, np.uint8) for _ in wanted]
    code = rs_code(n)
    size_i = h.sizes[i]
    for start in range(0, length, z):
        lc = min(z, length - start)
        with guard:
            if guard.ok:
                for s, f in enumerate(contrib[i]):
                    if f < n:
                        read_into(fd_data, start, mine[s * lc:(s + 1) * lc], size_i)
                    else:
                        read_into(fd_par, h.payload_offset + start, mine[s * lc:(s + 1) * lc],
                                  h.payload_offset + h.payload_length)
        counts = [len(c) * lc for c in contrib]
        displs = [sum(counts[:m]) for m in range(n)]
        req = comm.Iallgatherv([mine, counts[i], MPI.BYTE], [gathered, (counts, displs), MPI.BYTE])
        wait_collective(req, (mine, gathered), timeout, "L3 rebuild: exchanging a chunk")
        if not wanted:
            continue
        rows = gathered[:n * lc].reshape(n, lc)
        outs = [r[:lc] for r in rebuilt]
        code.reconstruct_into(dict(zip(frag_ids, rows, strict=True)), wanted, outs)
        for w, out in zip(wanted, outs, strict=True):
            with guard:
                if not guard.ok:
                    continue
                if w < n:
                    keep = max(0, min(lc, size_i - start))
                    if keep:
                        dwriter.pwrite(np.ascontiguousarray(out[:keep]), start)  # type: ignore[union-attr]
                else:
                    par_hash.update(byte_view(np.ascontiguousarray(out[:lc])))
                    pwriter.pwrite(np.ascontiguousarray(out[:lc]), h.payload_offset + start)  # type: ignore[union-attr]


