"""L3: erasure-coded groups of checkpoint files (topology-aware Reed-Solomon, or XOR), streamed in chunks.

Contract. Every function here is collective over ``comm``, a communicator holding *one process per group
member, in member order* (member ``i`` is ``comm`` rank ``i``, the group's members sit on distinct nodes). A
process may act for a member that is not itself -- a node's head rank encoding for one of its application
ranks -- it only needs to see that member's files, whose paths it passes. Member ``i`` holds one data file
(any size; sizes may differ: the code treats the files as zero-padded to the largest, the padding is never
stored) and stores one parity file (:mod:`ftkit.storage.groupcode.parity`):

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

The machinery is split by concern: :mod:`._collective` (error guard, worker thread, polling allgather),
:mod:`._rs_group` and :mod:`._xor_group` (each code's share of a member), :mod:`.group_plan` (what
survives, the majority parity header rule). This module holds the public operations and the level.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from ...errors import CheckpointNotFoundError, RecoveryError, StorageError
from .._fsutil import BackgroundSyncs
from .._stream import AtomicWriter, file_digest, file_size
from ..format.source import ByteSource
from ..placement.node_local import LocalLevel
from ._collective import ErrorGuard, agree_errors, allgather_json, close_fd, member_names, open_or_none
from ._rs_group import Timers, file_reader, rs_encode, rs_rebuild, source_reader, source_viewer
from ._xor_group import xor_encode, xor_rebuild
from .parity import ParityHeader, payload_offset_for, verify_parity, write_parity_header
from .partner_copy import DEFAULT_TIMEOUT
from .plan import (
    CODES,
    DEFAULT_MEMORY,
    MAX_CHUNK,
    GroupPlan,
    check_code,
    chunk_size_for,
    data_matches,
    encoding_tag,
    majority_header,
    member_parity,
    parity_overhead,
)

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["CODES", "DEFAULT_MEMORY", "MAX_CHUNK", "GroupPlan", "encode_group", "assess_group",
           "rebuild_group", "chunk_size_for", "parity_overhead", "EncodedLevel", "PARITY_SUFFIX",
           "encoding_tag"]

#: File name suffix of parity files.
PARITY_SUFFIX = ".parity"

PathLike = str | os.PathLike[str]


def encode_group(comm: MPI.Comm, data_path: PathLike, parity_path: PathLike, *, code: str = "rs",
                 tag: str = "", memory: int = DEFAULT_MEMORY, names: Sequence[str] | None = None,
                 stats: dict[str, float] | None = None, timeout: float | None = DEFAULT_TIMEOUT,
                 data_bytes: ByteSource | None = None, syncs: BackgroundSyncs | None = None) -> ParityHeader:
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
        fsync and rename, ``total``), plus ``chunk_bytes``, ``chunks`` and ``viewed`` (chunks of this
        member's data sent and encoded from ``data_bytes`` without a copy).
    timeout
        Seconds to wait for the other members at each collective step (None: no deadline; default as L2,
        :data:`ftkit.storage.groupcode.partner_copy.DEFAULT_TIMEOUT`).
    data_bytes
        The bytes of ``data_path`` when the caller has them in memory (``rs`` reads them from there; see
        :mod:`ftkit.storage.pending`).
    syncs
        Hand the parity file's fsync to this background batch (see
        :class:`~ftkit.storage._fsutil.BackgroundSyncs`).

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
    TimeoutFailure
        If a member does not take part in a step within ``timeout`` (it is alive but stuck): on every
        member that goes on (see :mod:`ftkit.storage.groupcode._collective`); no parity file is committed.
    """
    check_code(code)
    if comm.Get_size() < 2:
        raise StorageError("an encoded group needs at least 2 members (one per node)")
    return _encode(comm, data_path, parity_path, code, tag, memory, names, write=True, stats=stats,
                   timeout=timeout, data_bytes=data_bytes if code == "rs" else None, syncs=syncs)



def _encode(comm: MPI.Comm, data_path: PathLike, parity_path: PathLike, code: str, tag: str, memory: int,
            names: Sequence[str] | None, write: bool, stats: dict[str, float] | None = None, *,
            timeout: float | None, data_bytes: ByteSource | None = None,
            syncs: BackgroundSyncs | None = None) -> ParityHeader:
    t_start = time.perf_counter()
    timers = Timers()
    n, i = comm.Get_size(), comm.Get_rank()
    my_size = data_bytes.size if data_bytes is not None else file_size(data_path)
    mapped = data_bytes is not None and data_bytes.supports_map
    shared = allgather_json(comm, [my_size, mapped], timeout, "L3 encoding: sharing the data file sizes")
    sizes = tuple(int(x) for x, _ in shared)
    mapped = all(m for _, m in shared)   # every member sends its chunks from memory, or none does
    if min(sizes) < 0:
        nm = member_names(names, n)
        raise StorageError("cannot encode the group: data file missing on "
                           + ", ".join(nm[m] for m, s in enumerate(sizes) if s < 0))
    guard = ErrorGuard()
    writer: AtomicWriter | None = None
    fd = -1
    data_hash = xxhash.xxh3_64()
    par_hash = xxhash.xxh3_64()
    offset = payload_offset_for(n)
    with guard:
        fd = open_or_none(data_path if data_bytes is None else None)
        if write:
            writer = AtomicWriter(parity_path, writeback=syncs is None)
    try:
        if code == "rs":
            read = file_reader(fd, sizes[i]) if data_bytes is None else source_reader(data_bytes, sizes[i])
            view = source_viewer(data_bytes, sizes[i]) if mapped and data_bytes is not None else None
            plen = rs_encode(comm, read, sizes, memory, writer, offset, data_hash, par_hash, guard, timers,
                             timeout, view)
            my_digest = data_hash.hexdigest()
        else:
            plen = xor_encode(comm, fd, sizes, memory, writer, offset, par_hash, guard, timeout)
            my_digest = ""
            with guard:
                my_digest = file_digest(data_path)
        digests = tuple(str(d) for d in allgather_json(comm, my_digest, timeout,
                                                       "L3 encoding: sharing the data digests"))
        header = ParityHeader(code=code, k=n, index=i, sizes=sizes, digests=digests, payload_offset=offset,
                              payload_length=plen, payload_digest=par_hash.hexdigest(), tag=tag)
        if writer is not None:
            t0 = time.perf_counter()
            with guard:
                write_parity_header(writer, header)
                writer.commit(syncs)
            timers.add("commit", time.perf_counter() - t0)
        agree_errors(comm, guard, "L3 encoding", names, timeout=timeout)
        if stats is not None:
            timers["total"] = time.perf_counter() - t_start
            stats.update(timers)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        close_fd(fd)
    return header



def assess_group(comm: MPI.Comm, data_path: PathLike, parity_path: PathLike, *, code: str = "rs",
                 tag: str | None = None, validate_data: Callable[[Path], bool] | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT) -> GroupPlan:
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
    timeout
        Seconds to wait for the other members at each collective step (None: no deadline).

    Raises
    ------
    TimeoutFailure
        If a member does not take part in a step within ``timeout``.
    """
    check_code(code)
    n, i = comm.Get_size(), comm.Get_rank()
    mine = member_parity(parity_path, n, i, tag)
    shared = allgather_json(comm, asdict(mine) if mine is not None else None, timeout,
                            "L3 assessment: sharing the parity headers")
    headers = [_header(h) if h is not None else None for h in shared]
    ok = data_matches(data_path, majority_header(headers), i, validate_data)
    return GroupPlan.from_headers(code, headers, [bool(x) for x in allgather_json(
        comm, bool(ok), timeout, "L3 assessment: sharing which data files are intact")])


def _header(fields: dict[str, Any]) -> ParityHeader:
    """A peer's parity header from :func:`dataclasses.asdict` sent as JSON (lists back to tuples)."""
    return ParityHeader(**{**fields, "sizes": tuple(fields["sizes"]), "digests": tuple(fields["digests"])})



def rebuild_group(comm: MPI.Comm, plan: GroupPlan, data_path: PathLike, parity_path: PathLike, *,
                  tag: str = "", memory: int = DEFAULT_MEMORY, names: Sequence[str] | None = None,
                  timeout: float | None = DEFAULT_TIMEOUT) -> GroupPlan:
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
    timeout
        Seconds to wait for the other members at each collective step (None: no deadline).

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
    TimeoutFailure
        If a member does not take part in a step within ``timeout``; nothing is committed.
    """
    full = plan.repaired()
    if plan.intact:
        return full
    if not plan.recoverable:
        raise RecoveryError(f"L3 ({plan.code}) group cannot be rebuilt: {plan.describe(names)}")
    i = comm.Get_rank()
    h = plan.header
    if h is None or not plan.lost_data:
        # Every data file is there: re-encode, writing only the parity files that were lost.
        new = _encode(comm, data_path, parity_path, plan.code, h.tag if h is not None else tag, memory, names,
                      write=not plan.have_parity[i], timeout=timeout)
        return plan.repaired(new)
    guard = ErrorGuard()
    want_data = not plan.have_data[i]
    want_parity = not plan.have_parity[i]
    dwriter = pwriter = None
    fd_data = fd_par = -1
    par_hash = xxhash.xxh3_64()
    with guard:
        if plan.have_data[i]:
            fd_data = open_or_none(data_path)
        if plan.have_parity[i]:
            fd_par = open_or_none(parity_path)
        if want_data:
            dwriter = AtomicWriter(data_path)
        if want_parity:
            pwriter = AtomicWriter(parity_path)
    try:
        if plan.code == "rs":
            rs_rebuild(comm, plan, h, fd_data, fd_par, dwriter, pwriter, par_hash, memory, guard, timeout)
        else:
            xor_rebuild(comm, plan, h, fd_data, fd_par, dwriter, pwriter, par_hash, memory, guard, timeout)
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
        agree_errors(comm, guard, f"L3 ({plan.code}) rebuild", names, RecoveryError, timeout=timeout)
    except BaseException:
        for w in (dwriter, pwriter):
            if w is not None:
                w.abort()
        raise
    finally:
        close_fd(fd_data)
        close_fd(fd_par)
    return full



class EncodedLevel(LocalLevel):
    """Level 3 storage: each rank's parity file, on its own node.

    Layout: ``ckpt_dir/node<n>/<exec_id>/l3/ckpt<id>/rank<r>.parity`` (see
    :mod:`ftkit.storage.groupcode.parity`). The parity file is not a checkpoint file: :meth:`verify` checks
    its own header and payload checksum, and it cannot be read into arrays (the data comes back by
    :func:`rebuild_group`).
    """

    level = 3
    name = "encoded"
    supports_read = False
    supports_direct_write = False  # written by post-processing, not from the arrays
    file_suffix = PARITY_SUFFIX


    def verify(self, ckpt_id: int, rank: int, expect_digest: str | None = None) -> ParityHeader:  # type: ignore[override]
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
