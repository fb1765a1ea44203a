"""The collective half of the locate-and-rebuild engine: which rank holds which old rank's file when each
host sees only its own node-local disk, rebuilding lost files across hosts, and moving bytes from the rank
that holds them to the rank that needs them.

Used by elastic recovery (:mod:`ftkit.checkpoint.reshard`) on any communicator whose ranks may sit on other
hosts than the ranks that wrote the checkpoint (a relaunch on other nodes, the survivors after a shrink).
The single-host half is :class:`~ftkit.storage.repair.copies.RunCopies` (where a file is, open and check it)
and
:func:`~ftkit.storage.repair.checkpoints.repair_group` (rebuild a group's files where they are all visible).

1. :func:`locate` — every rank reports which files of the old ranks its host holds
   (:meth:`RunCopies.present`); for each old rank, the cheapest level somebody holds is tried by one holder
   (the least loaded), which checks the copy's header against the manifest; a copy that fails is reported and
   the next level is tried, round after round (at most one round per source level). The answer is the same on
   every rank: the holder and level of each old rank's file, its header bytes, or why none was found.
2. :func:`rebuild_groups` — for an L3 group with a lost file, the rank whose host holds the most of the
   group's data and parity files becomes its decoder; the members' files it lacks are sent to it
   (:func:`ftkit.storage.groupcode.partner_copy.transfer_file`, written under the same path on its host), it
   rebuilds the group (:func:`~ftkit.storage.repair.checkpoints.repair_group`), and the files it only received
   are removed again. The rebuilt files are then found on the decoder's host by :func:`locate`.
3. :func:`exchange` — one ``Alltoallv`` of byte buffers with a deadline: the holders' reads sent to the ranks
   that asked for them.

With every node directory visible to every rank (emulated nodes on one file system), every rank holds every
file: no bytes move between ranks and each rank reads what it needs itself, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._paths import check_inside
from ...errors import FtkitError, ProcessFailure
from ..format.container import copy_file
from ..groupcode._collective import allgather_json, wait_collective
from ..groupcode.partner_copy import transfer_file
from .checkpoints import entry_groups, repair_group
from .copies import RunCopies, base_level, parity_level, source_levels

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["Holder", "Located", "locate", "locate_or_rebuild", "fetch", "rebuild_groups", "exchange"]

#: What a damaged, missing or unreachable file raises while it is checked, copied or rebuilt.
_DAMAGED = (FtkitError, OSError, ValueError, KeyError, IndexError, TypeError)


@dataclass(frozen=True)
class Holder:
    """An old rank's verified copy: the rank that checked it, its level, its header bytes."""

    rank: int
    level: int
    raw: bytes


@dataclass
class Located:
    """The outcome of :func:`locate` (the same on every rank).

    ``holders[old]``: the copy found, or None; ``why[old]``: what each level lacked; ``sees[q]``: the
    ``(old, level)`` pairs rank ``q``'s host holds.
    """

    holders: dict[int, Holder | None]
    why: dict[int, list[str]]
    sees: list[set[tuple[int, int]]]

    def direct(self, rank: int, old: int) -> bool:
        """Whether ``rank`` can read old rank ``old``'s found copy itself (its host holds that file)."""
        h = self.holders.get(old)
        return h is not None and (old, h.level) in self.sees[rank]


def _presence(comm: MPI.Comm, copies: RunCopies, olds: Sequence[int], timeout: float | None,
              what: str) -> list[set[tuple[int, int]]]:
    mine = [[o, copies.present(o)] for o in olds]
    every = allgather_json(comm, [m for m in mine if m[1]], timeout, what)
    return [{(int(o), int(lv)) for o, lvs in got for lv in lvs} for got in every]


def locate(comm: MPI.Comm, copies: RunCopies, olds: Sequence[int], timeout: float | None,
           what: str = "locating the old files", levels: Sequence[int] | None = None) -> Located:
    """Find a holder and a verified header of each of ``olds``' files at ``levels`` (default:
    :func:`~ftkit.storage.repair.copies.source_levels`; collective, see the module doc).

    Raises
    ------
    TimeoutFailure
        If a rank does not take part within ``timeout`` seconds.
    mpi4py.MPI.Exception
        If a rank failed (with ULFM).
    """
    me = comm.Get_rank()
    sees = _presence(comm, copies, olds, timeout, what)
    holders: dict[int, Holder | None] = {o: None for o in olds}
    why: dict[int, list[str]] = {o: [] for o in olds}
    tried = source_levels() if levels is None else levels
    left = {o: [lv for lv in tried if copies.entry.complete(lv)] for o in olds}
    load = [0] * comm.Get_size()
    while True:
        assign: dict[int, tuple[int, int]] = {}
        for o in olds:
            while holders[o] is None and left[o]:
                lv = left[o].pop(0)
                who = [q for q, s in enumerate(sees) if (o, lv) in s]
                if not who:
                    why[o].append(f"L{lv}: not on any host of this job")
                    continue
                q = min(who, key=lambda r: (load[r], r))
                load[q] += 1
                assign[o] = (q, lv)
                break
        if not assign:
            break
        mine = []
        for o, (q, lv) in assign.items():
            if q == me:
                found, reason = copies.find(o, levels=(lv,))
                mine.append([o, found.raw.decode("ascii") if found else None, reason])
        for got in allgather_json(comm, mine, timeout, what):
            for o, text, reason in got:
                q, lv = assign[int(o)]
                if text is None:
                    why[int(o)].append(reason)
                else:
                    holders[int(o)] = Holder(q, lv, text.encode("ascii"))
    return Located(holders, why, sees)


def locate_or_rebuild(comm: MPI.Comm, copies: RunCopies, olds: Sequence[int], timeout: float | None,
                      chunk_size: int, what: str,
                      levels: Sequence[int] | None = None) -> tuple[Located, set[int]]:
    """:func:`locate`; then, for the files found nowhere when the checkpoint is complete at L3,
    :func:`rebuild_groups` and :func:`locate` again. Returns the outcome and the old ranks whose file was
    decoded (collective)."""
    found = locate(comm, copies, olds, timeout, what, levels)
    lost = [o for o in olds if found.holders[o] is None]
    rebuilt: set[int] = set()
    if lost and copies.entry.complete(parity_level()):
        problems = rebuild_groups(comm, copies, lost, timeout, chunk_size, what)
        again = locate(comm, copies, lost, timeout, what, levels)
        for o in lost:
            found.holders[o] = again.holders[o]
            if found.holders[o] is None:
                found.why[o] += problems or ["L3: not rebuilt"]
            else:
                rebuilt.add(o)
        found.sees = [a | b for a, b in zip(found.sees, again.sees, strict=True)]
    return found, rebuilt


def fetch(comm: MPI.Comm, copies: RunCopies, olds: Sequence[int], timeout: float | None,
          chunk_size: int = 4 << 20, what: str = "fetching checkpoint files") -> tuple[Located, set[int]]:
    """Bring each rank ``o`` of ``olds`` (ranks of ``comm`` that wrote the checkpoint as the same rank) its
    L1 file from wherever a node-local copy of it is (its L1 file or partner copy on another host, or an L3
    group decoded across hosts): :func:`locate_or_rebuild`, then one transfer per file from its holder into
    rank ``o``'s L1 path (a copy on its own host is copied there). Collective; a failed transfer leaves the
    file missing (the caller verifies it). Returns what :func:`locate_or_rebuild` returns."""
    local = copies.node_local(source_levels())
    found, rebuilt = locate_or_rebuild(comm, copies, olds, timeout, chunk_size, what, local)
    me, base = comm.Get_rank(), base_level()
    for o in olds:
        h = found.holders[o]
        if h is None or me not in (o, h.rank) or (h.level == base and found.direct(o, o)):
            continue
        try:
            if h.rank == o or found.direct(o, o):
                if me == o:
                    copy_file(copies.path(h.level, o), copies.path(base, o))
            elif me == o:
                transfer_file(comm, None, _null(), copies.path(base, o), h.rank, chunk_size=chunk_size,
                              timeout=timeout)
            else:
                transfer_file(comm, copies.path(h.level, o), o, None, _null(), chunk_size=chunk_size,
                              timeout=timeout)
        except ProcessFailure:
            raise
        except _DAMAGED:
            continue  # the receiver's file stays missing: its verification says so
    return found, rebuilt


def rebuild_groups(comm: MPI.Comm, copies: RunCopies, lost: Sequence[int], timeout: float | None,
                   chunk_size: int = 4 << 20, what: str = "rebuilding L3 groups") -> list[str]:
    """Decode the L3 groups holding a file of ``lost`` old ranks, each on the rank that holds most of its
    files (collective; see the module doc); return what failed (the same list on every rank).

    Raises
    ------
    TimeoutFailure
        If a rank does not take part within ``timeout`` seconds.
    mpi4py.MPI.Exception
        If a rank failed (with ULFM).
    """
    entry, me = copies.entry, comm.Get_rank()
    groups = [tuple(g) for g in entry_groups(entry) if any(r in g for r in lost)]
    members = sorted({r for g in groups for r in g})
    sees = _presence(comm, copies, members, timeout, what)
    load = [0] * comm.Get_size()
    plan = []  # (group, decoder, [(sender, member, level)])
    for g in groups:
        files = [(r, lv) for r in g for lv in (base_level(), parity_level())]
        dec = max(range(len(sees)), key=lambda q: (sum(f in sees[q] for f in files), -load[q], -q))
        load[dec] += 1
        sends = [(min(q for q, s in enumerate(sees) if f in s), *f) for f in files
                 if f not in sees[dec] and any(f in s for s in sees)]
        plan.append((g, dec, sends))
    errors: dict[tuple[int, ...], str] = {}
    received = []
    for g, dec, sends in plan:
        for sender, r, lv in sends:
            if me not in (sender, dec):
                continue
            path = copies.stored_path(lv, r)
            try:
                check_inside(path, copies.ckpt_dir, f"L3 group of old ranks {list(g)}")
                if me == dec:
                    transfer_file(comm, None, _null(), path, sender, chunk_size=chunk_size, timeout=timeout)
                    received.append(path)
                else:
                    transfer_file(comm, path, dec, None, _null(), chunk_size=chunk_size, timeout=timeout)
            except ProcessFailure:
                raise
            except _DAMAGED as exc:
                errors.setdefault(g, f"L3 group of old ranks {list(g)}: moving {path.name}: {exc}")
    for g, dec, _ in plan:
        if dec == me and g not in errors:
            errors[g] = _repair(copies, g)
    for p in received:
        p.unlink(missing_ok=True)  # a surviving member's file, only lent to the decoder
    gathered = allgather_json(comm, [e for e in errors.values() if e], timeout, what)
    return sorted({e for errs in gathered for e in errs})


def _null() -> int:
    from mpi4py import MPI

    return int(MPI.PROC_NULL)


def _repair(copies: RunCopies, g: tuple[int, ...]) -> str:
    """Rebuild one L3 group whose files are all visible here; return what failed, or ``""``."""
    entry = copies.entry
    data = [copies.stored_path(base_level(), r) for r in g]
    parity = [copies.stored_path(parity_level(), r) for r in g]
    try:
        for p in data + parity:
            check_inside(p, copies.ckpt_dir, f"L3 group of old ranks {list(g)}")
        repair_group(parity_level(), copies.exec_id, entry, g, data, parity)
    except _DAMAGED as exc:
        return f"L3 group of old ranks {list(g)}: {exc}"
    return ""


def exchange(comm: MPI.Comm, send: Sequence[np.ndarray], recv: Sequence[int], timeout: float | None,
             what: str) -> list[np.ndarray]:
    """Send ``send[q]`` (bytes) to every rank ``q`` and receive ``recv[p]`` bytes from every rank ``p``
    (collective, one ``Alltoallv`` waited for at most ``timeout`` seconds); return the received buffers.

    Raises
    ------
    TimeoutFailure
        If a rank does not take part in time.
    mpi4py.MPI.Exception
        If a rank failed (with ULFM).
    """
    from mpi4py import MPI

    scounts = [int(b.size) for b in send]
    sbuf = np.concatenate([np.ascontiguousarray(b, np.uint8).reshape(-1) for b in send]) if send else \
        np.zeros(0, np.uint8)
    rbuf = np.empty(max(1, sum(recv)), np.uint8)
    sdis = [sum(scounts[:q]) for q in range(len(scounts))]
    rdis = [sum(recv[:p]) for p in range(len(recv))]
    sbuf = sbuf if sbuf.size else np.zeros(1, np.uint8)
    req: Any = comm.Ialltoallv([sbuf, (scounts, sdis), MPI.BYTE], [rbuf, (list(recv), rdis), MPI.BYTE])
    wait_collective(req, (sbuf, rbuf), timeout, what)
    return [rbuf[d:d + n] for d, n in zip(rdis, recv, strict=True)]
