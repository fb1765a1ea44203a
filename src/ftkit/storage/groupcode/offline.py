"""Offline repair of L2/L3 redundancy in one process that sees every member's files (``ftkit rebuild``).

The same decisions as the collective versions in :mod:`ftkit.storage.groupcode.partner_copy` and
:mod:`ftkit.storage.groupcode.erasure` (same checks, same file formats, same results byte for byte), for the
case where all node-local directories are visible from one machine: emulated nodes, or node directories
gathered after a job. Memory stays bounded by chunking, as online.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import xxhash

from ...errors import RecoveryError
from .._stream import AtomicWriter, byte_view, file_digest, file_size, read_into
from ..format.container import copy_file
from .parity import ParityHeader, payload_offset_for, write_parity_header
from .plan import (
    DEFAULT_MEMORY,
    GroupPlan,
    PartnerPlan,
    check_code,
    chunk_size_for,
    data_matches,
    majority_header,
    member_parity,
    rs_code,
    xor_segment,
)

__all__ = ["assess_partner_files", "rebuild_partner_files", "assess_group_files", "rebuild_group_files"]

PathLike = str | os.PathLike[str]


def assess_partner_files(data_paths: Sequence[PathLike], copy_paths: Sequence[PathLike],
                         validate: Callable[[Path], bool] | None = None) -> PartnerPlan:
    """Return which data files and partner copies of a group survive (``copy_paths[i]`` holds member i-1)."""
    check = validate or (lambda p: file_size(p) > 0)
    return PartnerPlan(tuple(bool(check(Path(p))) for p in data_paths),
                       tuple(bool(check(Path(p))) for p in copy_paths))


def rebuild_partner_files(plan: PartnerPlan, data_paths: Sequence[PathLike], copy_paths: Sequence[PathLike],
                          names: Sequence[str] | None = None) -> PartnerPlan:
    """Restore lost data files from partner copies and re-create lost copies.

    Raises
    ------
    RecoveryError
        When a member lost its data file and its partner copy.
    """
    if not plan.recoverable:
        raise RecoveryError(f"L2 partner copies cannot recover the group: {plan.describe(names)}")
    for holder, member in plan.restores():
        copy_file(copy_paths[holder], data_paths[member])
    for member, holder in plan.recopies():
        copy_file(data_paths[member], copy_paths[holder])
    n = plan.size
    return PartnerPlan((True,) * n, (True,) * n)


def assess_group_files(data_paths: Sequence[PathLike], parity_paths: Sequence[PathLike], *, code: str = "rs",
                       tag: str | None = None) -> GroupPlan:
    """Check every data and parity file of an encoded group (as :func:`.encoded.assess_group` does)."""
    check_code(code)
    n = len(data_paths)
    headers = [member_parity(p, n, i, tag) for i, p in enumerate(parity_paths)]
    ref = majority_header(headers)
    have_data = [data_matches(p, ref, i) for i, p in enumerate(data_paths)]
    return GroupPlan.from_headers(code, headers, have_data)


def rebuild_group_files(plan: GroupPlan, data_paths: Sequence[PathLike], parity_paths: Sequence[PathLike], *,
                        tag: str = "", memory: int = DEFAULT_MEMORY,
                        names: Sequence[str] | None = None) -> GroupPlan:
    """Rebuild lost data files, then re-create lost parity files of an encoded group.

    Raises
    ------
    RecoveryError
        When the group lost more than its code repairs, or a rebuilt file does not match its digest.
    """
    full = plan.repaired()
    if plan.intact:
        return full
    if not plan.recoverable:
        raise RecoveryError(f"L3 ({plan.code}) group cannot be rebuilt: {plan.describe(names)}")
    h = plan.header
    if plan.lost_data:
        assert h is not None
        if plan.code == "rs":
            _rs_rebuild(plan, h, data_paths, parity_paths, memory)
        else:
            _xor_rebuild_data(plan, h, data_paths, parity_paths, memory)
    lost_parity = plan.lost_parity if plan.code == "xor" or not plan.lost_data else ()
    if lost_parity:
        _encode_rows(plan.code, data_paths, parity_paths, lost_parity, h.tag if h is not None else tag,
                     memory)
    return full


def _verify_and_commit(w: AtomicWriter, digest: str, path: PathLike) -> None:
    if file_digest(w.tmp) != digest:
        w.abort()
        raise RecoveryError(f"rebuilt data file {path} does not match its recorded digest")
    w.commit()


def _rs_rebuild(plan: GroupPlan, h: ParityHeader, data_paths: Sequence[PathLike],
                parity_paths: Sequence[PathLike], memory: int) -> None:
    """Rebuild lost data and lost parity of an RS group together, chunk by chunk."""
    n = plan.size
    chosen = plan.rs_sources()
    wanted = [m for m in plan.lost_data] + [n + m for m in plan.lost_parity]
    length = max(h.sizes)
    z = chunk_size_for(length, memory, n + len(wanted))
    bufs = {f: np.empty(z, np.uint8) for f in chosen}
    outs = {w: np.empty(z, np.uint8) for w in wanted}
    fds = {f: os.open(data_paths[f] if f < n else parity_paths[f - n], os.O_RDONLY) for f in chosen}
    writers = {w: AtomicWriter(data_paths[w] if w < n else parity_paths[w - n]) for w in wanted}
    hashes = {w: xxhash.xxh3_64() for w in wanted if w >= n}
    code = rs_code(n)
    try:
        for start in range(0, length, z):
            lc = min(z, length - start)
            frags = {}
            for f in chosen:
                if f < n:
                    read_into(fds[f], start, bufs[f][:lc], h.sizes[f])
                else:
                    read_into(fds[f], h.payload_offset + start, bufs[f][:lc],
                              h.payload_offset + h.payload_length)
                frags[f] = bufs[f][:lc]
            code.reconstruct_into(frags, wanted, [outs[w][:lc] for w in wanted])
            for w in wanted:
                out = outs[w][:lc]
                if w < n:
                    keep = max(0, min(lc, h.sizes[w] - start))
                    if keep:
                        writers[w].pwrite(np.ascontiguousarray(out[:keep]), start)
                else:
                    hashes[w].update(byte_view(np.ascontiguousarray(out)))
                    writers[w].pwrite(np.ascontiguousarray(out), h.payload_offset + start)
        for w in wanted:
            if w < n:
                _verify_and_commit(writers[w], h.digests[w], data_paths[w])
            else:
                write_parity_header(writers[w], ParityHeader(
                    code="rs", k=n, index=w - n, sizes=h.sizes, digests=h.digests,
                    payload_offset=h.payload_offset, payload_length=h.payload_length,
                    payload_digest=hashes[w].hexdigest(), tag=h.tag))
                writers[w].commit()
    finally:
        for wr in writers.values():
            wr.abort()
        for fd in fds.values():
            os.close(fd)


def _xor_rebuild_data(plan: GroupPlan, h: ParityHeader, data_paths: Sequence[PathLike],
                      parity_paths: Sequence[PathLike], memory: int) -> None:
    """Rebuild the one lost data file of an XOR group: each of its cells is the XOR of its column."""
    n = plan.size
    (t,) = plan.lost_data
    seg = h.payload_length
    q = chunk_size_for(seg, memory, 2)
    acc = np.empty(q, np.uint8)
    cell = np.empty(q, np.uint8)
    fds = {m: os.open(data_paths[m], os.O_RDONLY) for m in range(n) if m != t}
    pfds = {m: os.open(parity_paths[m], os.O_RDONLY) for m in range(n) if m != t}
    w = AtomicWriter(data_paths[t])
    try:
        for j in range(n):
            if j == t:
                continue
            st = j if j < t else j - 1
            for off in range(0, seg, q):
                lq = min(q, seg - off)
                read_into(pfds[j], h.payload_offset + off, acc[:lq], h.payload_offset + seg)
                for m in range(n):
                    if m in (t, j):
                        continue
                    s = j if j < m else j - 1
                    read_into(fds[m], s * seg + off, cell[:lq], h.sizes[m])
                    np.bitwise_xor(acc[:lq], cell[:lq], out=acc[:lq])
                keep = max(0, min(lq, h.sizes[t] - (st * seg + off)))
                if keep:
                    w.pwrite(acc[:keep], st * seg + off)
        _verify_and_commit(w, h.digests[t], data_paths[t])
    finally:
        w.abort()
        for fd in [*fds.values(), *pfds.values()]:
            os.close(fd)


def _encode_rows(code_name: str, data_paths: Sequence[PathLike], parity_paths: Sequence[PathLike],
                 rows: Sequence[int], tag: str, memory: int) -> None:
    """Write the parity files of members ``rows`` from the (complete) data files."""
    n = len(data_paths)
    sizes = tuple(file_size(p) for p in data_paths)
    digests = tuple(file_digest(p) for p in data_paths)
    offset = payload_offset_for(n)
    fds = [os.open(p, os.O_RDONLY) for p in data_paths]
    writers = {r: AtomicWriter(parity_paths[r]) for r in rows}
    hashes = {r: xxhash.xxh3_64() for r in rows}
    try:
        if code_name == "rs":
            length = max(sizes)
            z = chunk_size_for(length, memory, n + 1)
            bufs = np.empty((n, z), np.uint8)
            out = np.empty(z, np.uint8)
            code = rs_code(n)
            for start in range(0, length, z):
                lc = min(z, length - start)
                data = [np.ascontiguousarray(bufs[m, :lc]) for m in range(n)]
                for m in range(n):
                    read_into(fds[m], start, data[m], sizes[m])
                for r in rows:
                    code.encode_into(data, [out[:lc]], parity_indices=[r])
                    hashes[r].update(byte_view(out[:lc]))
                    writers[r].pwrite(out[:lc], offset + start)
            plen = length
        else:
            plen = xor_segment(max(sizes), n)
            q = chunk_size_for(plen, memory, 2)
            acc = np.empty(q, np.uint8)
            cell = np.empty(q, np.uint8)
            for r in rows:
                for off in range(0, plen, q):
                    lq = min(q, plen - off)
                    acc[:lq] = 0
                    for m in range(n):
                        if m == r:
                            continue
                        s = r if r < m else r - 1
                        read_into(fds[m], s * plen + off, cell[:lq], sizes[m])
                        np.bitwise_xor(acc[:lq], cell[:lq], out=acc[:lq])
                    hashes[r].update(byte_view(acc[:lq]))
                    writers[r].pwrite(acc[:lq], offset + off)
        for r in rows:
            write_parity_header(writers[r], ParityHeader(
                code=code_name, k=n, index=r, sizes=sizes, digests=digests, payload_offset=offset,
                payload_length=plen, payload_digest=hashes[r].hexdigest(), tag=tag))
            writers[r].commit()
    finally:
        for w in writers.values():
            w.abort()
        for fd in fds:
            os.close(fd)
