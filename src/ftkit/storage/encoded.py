"""L3: erasure-coded groups of checkpoint files (topology-aware Reed-Solomon, or XOR), streamed in chunks.

Contract. Every function here is collective over ``comm``, a communicator holding *one process per group
member, in member order* (member ``i`` is ``comm`` rank ``i``, the group's members sit on distinct nodes). A
process may act for a member that is not itself -- a node's head rank encoding for one of its application
ranks -- it only needs to see that member's files, whose paths it passes. Member ``i`` holds one data file
(any size; sizes may differ: the code treats the files as zero-padded to the largest, the padding is never
stored) and stores one parity file (:mod:`ftkit.storage.parity`):

* ``rs`` -- FTI's scheme: Reed-Solomon with k data and k parity fragments (M = K), member ``i`` storing
  parity row ``i`` of ``RSCode(k, k)``. Any k of the 2k files rebuild everything, so the group survives the
  loss of k/2 of its nodes (a node takes one data and one parity file with it), and more when the files
  are lost without their node.
* ``xor`` -- SCR's XOR scheme: each data file is cut into k-1 segments laid out in a k x k grid whose
  diagonal is parity: column j's parity (stored by member j) is the XOR of the one segment of every other
  member in column j. Parity per member is 1/(k-1) of the largest file, and the group survives the loss of
  any one member (data and parity), i.e. one node.

Memory: files are processed in chunks sized so that every process holds at most ``memory`` bytes of
buffers (default 48 MiB), whatever the file sizes. RS encoding is pipelined on two sets of buffers: a
worker thread encodes and writes chunk c (the codec and ``pwrite`` release the GIL) while the calling
thread reads and exchanges chunk c+1. Chunks are exchanged with MPI collectives (allgather
for RS encoding, reduce-scatter with bitwise XOR for XOR), so each chunk costs (k-1) chunk transfers per
member -- the same volume as FTI's ring of m sends.

Recovery is two steps so that callers can agree across groups before writing anything:
:func:`assess_group` checks every file (parity: header and payload checksum; data: size and xxh3 digest
recorded in the parity headers) and shares the result; :func:`rebuild_group` rebuilds lost data files and
re-creates lost parity files, so the group is protected again. An I/O error on one member is reported on
every member (no member is left waiting in a collective).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from ..errors import CheckpointNotFoundError, ConfigError, FtkitError, RecoveryError, StorageError
from ._stream import AtomicWriter, byte_view, file_digest, file_size, read_into
from .local import LocalLevel
from .parity import ParityHeader, payload_offset_for, verify_parity, write_parity_header

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["CODES", "DEFAULT_MEMORY", "MAX_CHUNK", "GroupPlan", "encode_group", "assess_group",
           "rebuild_group", "chunk_size_for", "parity_overhead", "EncodedLevel", "PARITY_SUFFIX",
           "encoding_tag"]

#: File name suffix of parity files.
PARITY_SUFFIX = ".parity"

#: Codes an encoded group can use.
CODES = ("rs", "xor")
#: Default bound (bytes) on the buffers one process uses while encoding or rebuilding a group.
DEFAULT_MEMORY = 48 << 20
#: Largest RS encoding chunk (bytes per member): bigger chunks only delay the start of the pipeline.
MAX_CHUNK = 4 << 20

PathLike = str | os.PathLike[str]


@functools.lru_cache(maxsize=16)
def _rs(n: int) -> Any:
    from ..codec import RSCode

    return RSCode(n, n)


def encoding_tag(exec_id: str, ckpt_id: int) -> str:
    """Identity recorded in the parity files of checkpoint ``ckpt_id`` of run ``exec_id``."""
    return f"{exec_id}/ckpt{ckpt_id}"


def _check_code(code: str) -> None:
    if code not in CODES:
        raise ConfigError(f"l3_code = {code!r}: allowed values are {', '.join(CODES)}")


def chunk_size_for(length: int, memory: int, slots: int, align: int = 4096) -> int:
    """Return the chunk size (bytes) that keeps ``slots`` buffers within ``memory`` bytes.

    The result is a multiple of ``align``, at least ``align``, and no larger than needed for ``length``.
    """
    z = max(align, (memory // max(slots, 1)) // align * align)
    return min(z, max(align, -(-length // align) * align))


def parity_overhead(code: str, sizes: Sequence[int]) -> int:
    """Return the parity bytes one member stores for a group with data files of ``sizes`` bytes."""
    _check_code(code)
    big = max(sizes) if sizes else 0
    return big if code == "rs" else _xor_segment(big, len(sizes))


def _xor_segment(length: int, n: int) -> int:
    seg = -(-length // (n - 1)) if n > 1 else length
    return -(-seg // 8) * 8


class _Guard:
    """Remember the first local error inside a collective loop instead of leaving the loop.

    Leaving the loop early would leave the other members waiting in the next collective; instead the
    member keeps taking part (with stale buffers) and every member learns of the error at the end.
    """

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __enter__(self) -> _Guard:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if ev is not None and self.error is None and isinstance(ev, (OSError, FtkitError, ValueError)):
            self.error = ev
        return ev is not None and isinstance(ev, (OSError, FtkitError, ValueError))

    @property
    def ok(self) -> bool:
        return self.error is None


def _agree(comm: MPI.Comm, guard: _Guard, what: str, names: Sequence[str] | None,
           exc_type: type[FtkitError] = StorageError) -> None:
    errors = comm.allgather(None if guard.ok else str(guard.error))
    bad = [(m, e) for m, e in enumerate(errors) if e is not None]
    if bad:
        nm = _names(names, comm.Get_size())
        raise exc_type(f"{what} failed: " + "; ".join(f"{nm[m]}: {e}" for m, e in bad))


def _names(names: Sequence[str] | None, n: int) -> list[str]:
    return list(names) if names is not None else [f"member {m}" for m in range(n)]


def _open(path: PathLike | None) -> int:
    return os.open(path, os.O_RDONLY) if path is not None else -1  # type: ignore[arg-type]


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


# ----------------------------------------------------------------------------------------------- encoding

def encode_group(comm: MPI.Comm, data_path: PathLike, parity_path: PathLike, *, code: str = "rs",
                 tag: str = "", memory: int = DEFAULT_MEMORY,
                 names: Sequence[str] | None = None, stats: dict[str, float] | None = None) -> ParityHeader:
    """Encode the group's data files; every member stores its parity file at ``parity_path`` (collective).

    Parameters
    ----------
    comm
        One process per member, in member order (at least 2 members).
    data_path
        This member's data file (read only).
    parity_path
        Where this member's parity file goes (written atomically; the directory is created if needed).
    code
        ``"rs"`` or ``"xor"`` (see the module docstring).
    tag
        Identity of this encoding (e.g. ``"ckpt-7"``), recorded in every parity file.
    memory
        Bound on buffer memory per process, bytes.
    names
        How to name members in errors (e.g. ``"rank 5 on node 2"``).
    stats
        If given, filled with where this member's time went, in seconds (``read``, ``data_hash``,
        ``exchange``: the collective, ``codec`` and ``codec_cpu``: the codec's wall and thread CPU time,
        ``parity_hash``, ``write``, ``wait``: the caller waiting for the worker thread, ``commit``: header,
        fsync and rename, ``total``), plus ``chunk_bytes`` and ``chunks``.

    Returns
    -------
    ParityHeader
        The header of the parity file written by this member.

    Raises
    ------
    ConfigError
        Unknown ``code``.
    StorageError
        On every member, if some member's data file is missing or a parity file cannot be written.
    """
    _check_code(code)
    if comm.Get_size() < 2:
        raise StorageError("an encoded group needs at least 2 members (one per node)")
    return _encode(comm, data_path, parity_path, code, tag, memory, names, write=True, stats=stats)


class _Timers(dict):  # type: ignore[type-arg]
    """Seconds per phase of an encoding (a dict, so callers get plain numbers)."""

    def add(self, key: str, seconds: float) -> None:
        self[key] = self.get(key, 0.0) + seconds


def _encode(comm: MPI.Comm, data_path: PathLike, parity_path: PathLike, code: str, tag: str, memory: int,
            names: Sequence[str] | None, write: bool, stats: dict[str, float] | None = None) -> ParityHeader:
    t_start = time.perf_counter()
    timers = _Timers()
    n, i = comm.Get_size(), comm.Get_rank()
    sizes = tuple(comm.allgather(file_size(data_path)))
    if min(sizes) < 0:
        nm = _names(names, n)
        raise StorageError("cannot encode the group: data file missing on "
                           + ", ".join(nm[m] for m, s in enumerate(sizes) if s < 0))
    guard = _Guard()
    writer: AtomicWriter | None = None
    fd = -1
    data_hash = xxhash.xxh3_64()
    par_hash = xxhash.xxh3_64()
    offset = payload_offset_for(n)
    with guard:
        fd = _open(data_path)
        if write:
            writer = AtomicWriter(parity_path)
    try:
        if code == "rs":
            plen = _rs_encode(comm, fd, sizes, memory, writer, offset, data_hash, par_hash, guard, timers)
            my_digest = data_hash.hexdigest()
        else:
            plen = _xor_encode(comm, fd, sizes, memory, writer, offset, par_hash, guard)
            my_digest = ""
            with guard:
                my_digest = file_digest(data_path)
        digests = tuple(comm.allgather(my_digest))
        header = ParityHeader(code=code, k=n, index=i, sizes=sizes, digests=digests, payload_offset=offset,
                              payload_length=plen, payload_digest=par_hash.hexdigest(), tag=tag)
        if writer is not None:
            t0 = time.perf_counter()
            with guard:
                write_parity_header(writer, header)
                writer.commit()
            timers.add("commit", time.perf_counter() - t0)
        _agree(comm, guard, "L3 encoding", names)
        if stats is not None:
            timers["total"] = time.perf_counter() - t_start
            stats.update(timers)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        _close(fd)
    return header


def _rs_encode(comm: MPI.Comm, fd: int, sizes: tuple[int, ...], memory: int, writer: AtomicWriter | None,
               offset: int, data_hash: Any, par_hash: Any, guard: _Guard, timers: _Timers) -> int:
    n, i = comm.Get_size(), comm.Get_rank()
    length = max(sizes)
    # Two sets of n + 1 chunk buffers (gathered rows + parity row) so that chunk c+1 is read and exchanged
    # while a worker thread encodes and writes chunk c.
    z = min(chunk_size_for(length, memory, 2 * (n + 1)), max(MAX_CHUNK, 4096))
    starts = range(0, length, z)
    nbuf = 2 if writer is not None and len(starts) > 1 else 1
    gathered = [np.zeros(n * z, np.uint8) for _ in range(nbuf)]
    outs = [np.empty(z, np.uint8) for _ in range(nbuf)]
    code = _rs(n)
    wguard = _Guard()  # the worker's own: the calling thread writes ``guard`` meanwhile
    timers.update(chunk_bytes=float(z), chunks=float(len(starts)))

    def work(b: int, start: int, lc: int) -> None:
        with wguard:
            out = outs[b][:lc]
            c0, t0 = time.thread_time(), time.perf_counter()
            code.encode_into(list(gathered[b][:n * lc].reshape(n, lc)), [out], parity_indices=[i])
            t1 = time.perf_counter()
            timers.add("codec", t1 - t0)
            timers.add("codec_cpu", time.thread_time() - c0)
            par_hash.update(byte_view(out))
            t2 = time.perf_counter()
            timers.add("parity_hash", t2 - t1)
            if guard.ok and wguard.ok:
                writer.pwrite(out, offset + start)  # type: ignore[union-attr]
            timers.add("write", time.perf_counter() - t2)

    pool = _Worker() if nbuf == 2 else None
    try:
        for c, start in enumerate(starts):
            b = c % nbuf
            t0 = time.perf_counter()
            if pool is not None:
                pool.wait(b)  # chunk c-2 is done with buffer set b
            lc = min(z, length - start)
            rows = gathered[b][:n * lc].reshape(n, lc)
            t1 = time.perf_counter()
            with guard:
                if guard.ok:
                    read_into(fd, start, rows[i], sizes[i])
            t2 = time.perf_counter()
            with guard:
                if guard.ok:
                    data_hash.update(byte_view(rows[i])[:max(0, min(lc, sizes[i] - start))])
            t3 = time.perf_counter()
            _allgather(comm, gathered[b][:n * lc])  # each member's block is lc bytes
            t4 = time.perf_counter()
            timers.add("wait", t1 - t0)
            timers.add("read", t2 - t1)
            timers.add("data_hash", t3 - t2)
            timers.add("exchange", t4 - t3)
            if writer is None:
                continue
            if pool is not None:
                pool.submit(b, work, b, start, lc)
            else:
                work(b, start, lc)
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


#: Longest sleep (seconds) between two tests of a pending chunk exchange; 0 waits in MPI instead.
_POLL_MAX_SLEEP = 5e-4


def _allgather(comm: MPI.Comm, buf: np.ndarray) -> None:
    # MPI's blocking wait spins on a core; with ranks sharing cores (and the worker thread encoding the
    # previous chunk) the spinning steals the CPU the peers need. Test with growing sleeps instead.
    from mpi4py import MPI

    if _POLL_MAX_SLEEP <= 0:
        comm.Allgather(MPI.IN_PLACE, buf)
        return
    req = comm.Iallgather(MPI.IN_PLACE, buf)
    delay = 2e-5
    while not req.Test():
        time.sleep(delay)
        delay = min(2 * delay, _POLL_MAX_SLEEP)


class _Worker:
    """One thread running jobs in submission order; :meth:`wait` waits for the job of one buffer set.

    Jobs are tried in order (the parity hash is fed chunk by chunk). An unexpected exception in a job is
    re-raised by the next :meth:`wait` of the caller.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._jobs: list[tuple[int, Callable[..., None], tuple[Any, ...]]] = []
        self._busy: set[int] = set()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ftkit-l3-encode", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if not self._jobs:
                    return
                b, fn, args = self._jobs.pop(0)
            try:
                if self._error is None:
                    fn(*args)
            except BaseException as exc:  # handed to the caller by wait()
                self._error = exc
            with self._cv:
                self._busy.discard(b)
                self._cv.notify_all()

    def submit(self, b: int, fn: Callable[..., None], *args: Any) -> None:
        with self._cv:
            self._busy.add(b)
            self._jobs.append((b, fn, args))
            self._cv.notify_all()

    def wait(self, b: int) -> None:
        with self._cv:
            while b in self._busy:
                self._cv.wait()
        if self._error is not None:
            raise self._error

    def wait_all(self) -> None:
        with self._cv:
            while self._busy:
                self._cv.wait()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()


def _xor_cells(fd: int, rows: np.ndarray, me: int, seg: int, off: int, size: int) -> None:
    """Fill row j (j != me) of ``rows`` with this member's cell of column j at offset ``off``."""
    n, lq = rows.shape
    for j in range(n):
        if j == me:
            continue
        s = j if j < me else j - 1
        read_into(fd, s * seg + off, rows[j], size)


def _xor_encode(comm: MPI.Comm, fd: int, sizes: tuple[int, ...], memory: int, writer: AtomicWriter | None,
                offset: int, par_hash: Any, guard: _Guard) -> int:
    from mpi4py import MPI

    n, i = comm.Get_size(), comm.Get_rank()
    seg = _xor_segment(max(sizes), n)
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
                _xor_cells(fd, rows, i, seg, off, sizes[i])
        comm.Reduce_scatter_block(send[:n * lq].view(np.uint64), recv[:lq].view(np.uint64), op=MPI.BXOR)
        if writer is not None:
            par_hash.update(byte_view(recv)[:lq])
            with guard:
                if guard.ok:
                    writer.pwrite(recv[:lq], offset + off)
    return seg


# ----------------------------------------------------------------------------------------------- recovery

@dataclass(frozen=True)
class GroupPlan:
    """What survives of an encoded group, as every member sees it after :func:`assess_group`.

    ``header`` is the reference parity header (None when no parity file survives, so the data files can
    only be re-encoded if all of them are present).
    """

    code: str
    have_data: tuple[bool, ...]
    have_parity: tuple[bool, ...]
    header: ParityHeader | None

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.have_data)

    @property
    def lost_data(self) -> tuple[int, ...]:
        """Members whose data file is missing or damaged."""
        return tuple(m for m, ok in enumerate(self.have_data) if not ok)

    @property
    def lost_parity(self) -> tuple[int, ...]:
        """Members whose parity file is missing, damaged or from another encoding."""
        return tuple(m for m, ok in enumerate(self.have_parity) if not ok)

    @property
    def intact(self) -> bool:
        """True when nothing is lost."""
        return not self.lost_data and not self.lost_parity

    @property
    def recoverable(self) -> bool:
        """True when the lost data files can be rebuilt from what survives."""
        if not self.lost_data:
            return True
        if self.header is None:
            return False
        if self.code == "rs":
            return sum(self.have_data) + sum(self.have_parity) >= self.size
        if len(self.lost_data) > 1:
            return False
        t = self.lost_data[0]
        return all(ok for m, ok in enumerate(self.have_parity) if m != t)

    def describe(self, names: Sequence[str] | None = None) -> str:
        """Say what is lost and whether the code can repair it."""
        nm = _names(names, self.size)
        lost = []
        for m in range(self.size):
            what = [w for w, ok in (("data", self.have_data[m]), ("parity", self.have_parity[m])) if not ok]
            if what:
                lost.append(f"{nm[m]} ({'+'.join(what)})")
        if not lost:
            return "nothing lost"
        k = self.size
        if self.header is None and self.lost_data:
            need = "no parity file survives"
        elif self.code == "rs":
            alive = sum(self.have_data) + sum(self.have_parity)
            need = f"RS({k},{k}) needs {k} of {2 * k} files, {alive} survive"
        else:
            need = "XOR survives the loss of one member only"
        return f"lost {', '.join(lost)}; {need}"


def assess_group(comm: MPI.Comm, data_path: PathLike, parity_path: PathLike, *, code: str = "rs",
                 tag: str | None = None, validate_data: Callable[[Path], bool] | None = None) -> GroupPlan:
    """Check this member's data and parity files and share the result within the group (collective).

    A parity file counts when its header and payload checksum are intact, it is this member's row of a
    group of this size, it carries ``tag`` (when given) and agrees with the majority of the group's parity
    files. A data file counts when its size and xxh3 digest are those recorded in the parity headers (when
    no parity file survives: when ``validate_data`` accepts it, or it exists if ``validate_data`` is None).

    Parameters
    ----------
    code
        The code to assume when no parity file survives.
    tag
        The expected encoding identity (None: accept any).
    """
    _check_code(code)
    n, i = comm.Get_size(), comm.Get_rank()
    header: ParityHeader | None = None
    try:
        h = verify_parity(parity_path)
        if h.k == n and h.index == i and (tag is None or h.tag == tag):
            header = h
    except (OSError, FtkitError):
        header = None
    headers: list[ParityHeader | None] = comm.allgather(header)
    keys = Counter((h.code, h.sizes, h.digests, h.tag, h.payload_length) for h in headers if h is not None)
    ref: ParityHeader | None = None
    if keys:
        best = max(keys.values())
        for h in headers:  # type: ignore[assignment]
            if h is not None and keys[(h.code, h.sizes, h.digests, h.tag, h.payload_length)] == best:
                ref = h
                break
    have_parity = tuple(h is not None and ref is not None and h.same_encoding(ref) for h in headers)
    p = Path(data_path)
    if ref is not None:
        ok = file_size(p) == ref.sizes[i]
        if ok:
            try:
                ok = file_digest(p) == ref.digests[i]
            except OSError:
                ok = False
    else:
        ok = bool(validate_data(p)) if validate_data is not None else file_size(p) >= 0
    have_data = tuple(bool(x) for x in comm.allgather(ok))
    return GroupPlan(code=ref.code if ref is not None else code, have_data=have_data, have_parity=have_parity,
                     header=ref)


def rebuild_group(comm: MPI.Comm, plan: GroupPlan, data_path: PathLike, parity_path: PathLike, *,
                  tag: str = "", memory: int = DEFAULT_MEMORY,
                  names: Sequence[str] | None = None) -> GroupPlan:
    """Rebuild lost data files and re-create lost parity files of the group (collective).

    Parameters
    ----------
    plan
        The result of :func:`assess_group` (the same on every member).
    tag
        Encoding identity to record when every parity file was lost and the group is re-encoded.
    memory
        Bound on buffer memory per process, bytes.
    names
        How to name members in errors.

    Returns
    -------
    GroupPlan
        The group's state after repair (nothing lost).

    Raises
    ------
    RecoveryError
        On every member, when the group lost more than its code can repair (nothing is written then), or a
        rebuilt file does not match its recorded digest.
    StorageError
        On every member, when a file cannot be read or written.
    """
    full = GroupPlan(plan.code, (True,) * plan.size, (True,) * plan.size, plan.header)
    if plan.intact:
        return full
    if not plan.recoverable:
        raise RecoveryError(f"L3 ({plan.code}) group cannot be rebuilt: {plan.describe(names)}")
    i = comm.Get_rank()
    h = plan.header
    if h is None or not plan.lost_data:
        # Every data file is there: re-encode, writing only the parity files that were lost.
        new = _encode(comm, data_path, parity_path, plan.code, h.tag if h is not None else tag, memory, names,
                      write=not plan.have_parity[i])
        return GroupPlan(plan.code, full.have_data, full.have_parity, new)
    guard = _Guard()
    want_data = not plan.have_data[i]
    want_parity = not plan.have_parity[i]
    dwriter = pwriter = None
    fd_data = fd_par = -1
    par_hash = xxhash.xxh3_64()
    with guard:
        if plan.have_data[i]:
            fd_data = _open(data_path)
        if plan.have_parity[i]:
            fd_par = _open(parity_path)
        if want_data:
            dwriter = AtomicWriter(data_path)
        if want_parity:
            pwriter = AtomicWriter(parity_path)
    try:
        if plan.code == "rs":
            _rs_rebuild(comm, plan, h, fd_data, fd_par, dwriter, pwriter, par_hash, memory, guard)
        else:
            _xor_rebuild(comm, plan, h, fd_data, fd_par, dwriter, pwriter, par_hash, memory, guard)
        with guard:
            if dwriter is not None and guard.ok:
                got = file_digest(dwriter.tmp)
                if got != h.digests[i]:
                    raise RecoveryError(f"rebuilt data file {data_path} does not match its recorded digest")
                dwriter.commit()
            if pwriter is not None and guard.ok:
                write_parity_header(pwriter, ParityHeader(
                    code=h.code, k=h.k, index=i, sizes=h.sizes, digests=h.digests,
                    payload_offset=h.payload_offset, payload_length=h.payload_length,
                    payload_digest=par_hash.hexdigest(), tag=h.tag))
                pwriter.commit()
        _agree(comm, guard, f"L3 ({plan.code}) rebuild", names, RecoveryError)
    except BaseException:
        for w in (dwriter, pwriter):
            if w is not None:
                w.abort()
        raise
    finally:
        _close(fd_data)
        _close(fd_par)
    return full


def _rs_rebuild(comm: MPI.Comm, plan: GroupPlan, h: ParityHeader, fd_data: int, fd_par: int,
                dwriter: AtomicWriter | None, pwriter: AtomicWriter | None, par_hash: Any, memory: int,
                guard: _Guard) -> None:
    from mpi4py import MPI

    n, i = comm.Get_size(), comm.Get_rank()
    ndata = sum(plan.have_data)
    chosen_par = [m for m in range(n) if plan.have_parity[m]][:n - ndata]
    contrib = [([m] if plan.have_data[m] else []) + ([n + m] if m in chosen_par else []) for m in range(n)]
    frag_ids = [f for c in contrib for f in c]
    wanted = ([i] if dwriter is not None else []) + ([n + i] if pwriter is not None else [])
    length = max(h.sizes)
    z = chunk_size_for(length, memory, n + 4)
    gathered = np.empty(n * z, np.uint8)
    mine = np.empty(len(contrib[i]) * z, np.uint8)
    code = _rs(n)
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
        comm.Allgatherv([mine, counts[i], MPI.BYTE], [gathered, (counts, displs), MPI.BYTE])
        if not wanted:
            continue
        rows = gathered[:n * lc].reshape(n, lc)
        outs = _reconstruct(code, dict(zip(frag_ids, rows, strict=True)), wanted)
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
    if dwriter is not None and size_i == 0:
        pass  # an empty data file: the writer already created it


def _reconstruct(code: Any, fragments: dict[int, np.ndarray], wanted: list[int]) -> list[np.ndarray]:
    res = code.reconstruct(fragments, wanted)
    if isinstance(res, dict):
        return [res[w] for w in wanted]
    return list(res)


def _xor_rebuild(comm: MPI.Comm, plan: GroupPlan, h: ParityHeader, fd_data: int, fd_par: int,
                 dwriter: AtomicWriter | None, pwriter: AtomicWriter | None, par_hash: Any, memory: int,
                 guard: _Guard) -> None:
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
                    _xor_cells(fd_data, rows, i, seg, off, size_i)
                if fd_par >= 0:
                    read_into(fd_par, h.payload_offset + off, rows[i], h.payload_offset + h.payload_length)
        rbuf = recv[:n * lq].view(np.uint64) if recv is not None else None
        comm.Reduce(send[:n * lq].view(np.uint64), rbuf, op=MPI.BXOR, root=t)
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


class EncodedLevel(LocalLevel):
    """Level 3 storage: each rank's parity file, on its own node.

    Layout: ``ckpt_dir/node<n>/<exec_id>/l3/ckpt<id>/rank<r>.parity`` (see :mod:`ftkit.storage.parity`). The
    parity file is not a checkpoint file: :meth:`verify` checks its own header and payload checksum, and it
    cannot be read into arrays (the data comes back by :func:`rebuild_group`).
    """

    level = 3
    name = "encoded"
    supports_read = False
    supports_direct_write = False  # written by post-processing, not from the arrays
    file_suffix = PARITY_SUFFIX


    def verify(self, ckpt_id: int, rank: int, expect_digest: str | None = None) -> Any:
        """Check ``rank``'s parity file (header and payload checksum); return its :class:`ParityHeader`.

        ``expect_digest`` is ignored (the manifest's digests describe the data files, which the parity
        header records itself).

        Raises
        ------
        CheckpointNotFoundError, FormatError, CorruptionError
            Naming the file and what is wrong.
        """
        p = self.path(ckpt_id, rank)
        if not p.exists():
            raise CheckpointNotFoundError(f"{p}: parity file is missing")
        return verify_parity(p)
