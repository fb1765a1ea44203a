"""Elastic recovery: fill new boxes from the stored boxes of a checkpoint written by other ranks.

A checkpoint whose arrays were protected with a global layout (``protect(name, a, global_shape=...,
offset=...)`` or ``protect_matrix``) can be recovered by any number of ranks with any other decomposition.
:func:`restore` is the one path; it is collective over the communicator it is given (``recover()`` passes
the checkpointer's; the online-recovery loop may pass the survivors' communicator after a shrink):

1. *Sources* (:func:`ftkit.storage.repair.holders.locate_or_rebuild`, the locate-and-rebuild engine). Every
   rank reports which of the old ranks' files its host holds (on a cluster a node-local file is only on the
   host that wrote it; node ids are renumbered by the new job's hosts); for each old rank, one rank holding
   its cheapest copy -- the L1 file, the L2 partner copy, the L4 copy (a differential L4 checkpoint is read in
   place from its block store) -- checks that its header digest is the manifest's. If some file has none and
   the checkpoint is complete at L3, each L3 group that lost a file is decoded on the rank holding most of
   its files (the others' files sent to it first) and the lost files looked for again. The headers (with the
   old layouts and per-chunk digests) are sent to every rank: each file's header is read once.
2. *Checks,* the same on every rank: every old file holds the protected names with a layout; dtype and global
   shape unchanged; the old boxes and the new boxes each tile the global array (or replicate it). Any
   problem is a :class:`~ftkit.errors.RecoveryError` (:class:`~ftkit.errors.ShapeMismatchError` for dtype or
   global shape) naming the array and the boxes, raised on every rank before any byte is written.
3. *Reads.* Each rank intersects its new boxes with every old box and reads only the digest chunks holding
   the byte runs it needs (see :mod:`ftkit.storage.format.boxread`: chunks inside one contiguous run of the
   target are read straight into it), verifying each one, from the files its host holds; the runs of a file
   its host does not hold are read by the file's holder and sent to it (one exchange per array, only when some
   file is held away from a rank that needs it). A damaged copy is retried from the next level that holds the
   file. The outcome is agreed: an error on one rank raises on all.

Bytes read exceed the bytes needed by at most two digest chunks per contiguous run; for a decomposition
along the slowest axis that is a fraction of a percent, for column blocks of a small array it may be the
whole file (see RESULTS.md for the figures).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash
from mpi4py import MPI

from ..config import Config
from ..errors import MissingCopyError, ProcessFailure, RecoveryError, ShapeMismatchError
from ..storage.format.boxread import read_runs
from ..storage.format.container import Header, decode_header
from ..storage.format.global_layout import Layout, Runs, box_runs, coverage_problem, parse_layout
from ..storage.manifest import CheckpointEntry
from ..storage.repair.copies import RunCopies
from ..storage.repair.holders import Located, exchange, locate_or_rebuild
from . import _mpi
from .contract import DAMAGED

__all__ = ["ReshardStats", "restore", "layout_hint", "MissingCopyError"]


@dataclass(frozen=True)
class ReshardStats:
    """What an elastic recovery did on this rank: bytes read from files and bytes its new boxes needed,
    and the level each old rank's file was read from (index = old rank)."""

    bytes_read: int
    bytes_needed: int
    source_levels: tuple[int, ...]


def layout_hint(names: Sequence[str]) -> str:
    """How to make arrays ``names`` recoverable on another rank count (for messages)."""
    return (f"arrays {sorted(names)} have no global layout: protect them with ckpt.protect(name, a, "
            "global_shape=..., offset=...) (or ckpt.protect_matrix(name, A)) in the run that checkpoints, "
            "to recover on another rank count or decomposition")


@dataclass
class _Old:
    """One old rank's file: the level it counts as read from (3 once decoded), the rank holding a verified
    copy, the level of that copy, and its header."""

    level: int
    holder: int
    read_level: int
    header: Header


def _parse_old(entry: CheckpointEntry, old: int, raw: bytes) -> Header:
    header = decode_header(raw, xxhash.xxh3_64_intdigest(raw), f"old rank {old}")
    if header.digest != entry.files[old].digest:
        raise RecoveryError(f"checkpoint {entry.id}: old rank {old}'s header changed in transit")
    return header


def _locate(comm: Any, timeout: float, config: Config, copies: RunCopies) -> tuple[list[_Old], Located]:
    """Collective: a holder and a verified header of every old rank's file, found where the file is (on a
    cluster only its host sees a node-local file); L3 groups that lost a file are decoded first."""
    entry = copies.entry
    olds = list(range(len(entry.files)))
    try:
        found, rebuilt = locate_or_rebuild(comm, copies, olds, timeout, min(config.io_chunk_bytes, 16 << 20),
                                           "elastic recovery: sources")
    except MPI.Exception as exc:
        raise _mpi.as_failure(exc, comm, "elastic recovery: sources") from exc
    out, missing = [], []
    for o in olds:
        h = found.holders[o]
        if h is None:
            missing.append(f"old rank {o} (node {entry.nodes[o]}): {'; '.join(found.why[o])}")
        else:
            out.append(_Old(3 if o in rebuilt else h.level, h.rank, h.level, _parse_old(entry, o, h.raw)))
    if missing:
        raise MissingCopyError(f"checkpoint {entry.id}: no verified copy of the files of {len(missing)} old "
                               "rank(s): " + "; ".join(missing[:3]) + (" ..." if len(missing) > 3 else ""))
    return out, found


def _check(entry: CheckpointEntry, olds: list[_Old], news: list[dict[str, Any]],
           partial: bool) -> dict[str, list[Layout]]:
    """The new layouts of every new rank, by name, after checking old and new describe the same arrays."""
    names = sorted(news[0])
    if any(sorted(n) != names for n in news):
        raise RecoveryError(f"checkpoint {entry.id}: the ranks protect different names: "
                            f"{sorted({tuple(sorted(n)) for n in news})}: protect the same names on every "
                            "rank")
    stored = sorted(s.name for s in olds[0].header.sections)
    if (not set(names) <= set(stored)) if partial else stored != names:
        raise ShapeMismatchError(f"checkpoint {entry.id} holds arrays {stored} but {names} are protected: "
                                 "protect the same names as the run that checkpointed")
    out = {}
    for name in names:
        secs = [o.header.section(name) for o in olds]
        bare = [r for r, s in enumerate(secs) if s.layout is None]
        if bare:
            raise RecoveryError(f"checkpoint {entry.id}: array {name!r} of old ranks {bare[:4]} was stored "
                                f"without a layout: " + layout_hint([name]))
        new_layouts = [parse_layout(n[name][1], n[name][2], f"array {name!r}: ") for n in news]
        dtypes = sorted({s.dtype for s in secs} | {n[name][0] for n in news})
        if len(dtypes) > 1:
            raise ShapeMismatchError(f"array {name!r}: the checkpoint holds dtype {secs[0].dtype} but the "
                                     f"protected arrays have {sorted({n[name][0] for n in news})}: protect "
                                     "arrays of the stored dtype")
        old_layouts = [s.layout for s in secs if s.layout is not None]
        old_shape, new_shape = old_layouts[0].global_shape, new_layouts[0].global_shape
        if old_shape != new_shape:
            raise ShapeMismatchError(f"array {name!r}: the checkpoint holds global shape {list(old_shape)} "
                                     f"but the new layout says {list(new_shape)}: the global shape cannot "
                                     "change")
        for what, lays in (("stored", old_layouts), ("new", new_layouts)):
            problem = coverage_problem(name, lays)
            if problem:
                raise RecoveryError(f"checkpoint {entry.id}: the {what} layout cannot be used: {problem}")
        out[name] = new_layouts
    return out


def restore(comm: Any, config: Config, exec_id: str, entry: CheckpointEntry,
            targets: Mapping[str, np.ndarray], layouts: Mapping[str, Layout], *,
            partial: bool = False) -> ReshardStats:
    """Fill ``targets`` (name → this rank's buffer) at ``layouts`` from checkpoint ``entry`` (collective).

    Works on any communicator and any number of ranks, whatever the rank count and layouts that wrote the
    checkpoint; nothing is written into a target before every check passed on every rank.

    Parameters
    ----------
    comm
        The ranks taking part (each with its own targets and layouts).
    config, exec_id
        Where the run's files are (``ckpt_dir``, ``glbl_dir``) and the run's identity.
    entry
        The manifest entry of the checkpoint to read.
    targets, layouts
        This rank's buffers and their layouts, by name (the same names on every rank).
    partial
        Allow ``targets`` to be some of the stored arrays only (``recover()`` requires all of them).

    Returns
    -------
    ReshardStats
        Bytes read and needed on this rank, source level of every old rank.

    Raises
    ------
    MissingCopyError
        On every rank, if an old rank's file has no verified copy (a RecoveryError: try an older checkpoint).
    RecoveryError
        On every rank: the layouts overlap or leave holes; an array
        was stored without a layout; a read failed on some rank (naming it).
    ShapeMismatchError
        On every rank: names, dtype or global shape differ from the stored ones.
    ProcessFailure
        If a peer failed meanwhile.
    """
    timeout = config.failure_timeout
    new = {n: [targets[n].dtype.str, layouts[n].to_json(), list(targets[n].shape)] for n in targets}
    news = _mpi.allgather(comm, new, "elastic recovery: layouts", timeout)
    copies = RunCopies(config.ckpt_dir, config.glbl_dir, exec_id, entry, config.io_chunk_bytes)
    olds, found = _locate(comm, timeout, config, copies)
    new_layouts = _check(entry, olds, news, partial)
    reader = _Reader(comm, copies, config.io_chunk_bytes, olds, found)
    for name in sorted(targets):
        reader.read(name, targets[name], new_layouts[name], [tuple(n[name][2]) for n in news], timeout)
    error, read, needed = reader.error, reader.bytes_read(timeout), reader.needed
    if not _mpi.all_true(comm, error is None, timeout, "elastic recovery read"):
        errors = _mpi.allgather(comm, error, "elastic recovery read", timeout)
        bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
        raise RecoveryError(f"checkpoint {entry.id}: reading the stored boxes failed: " + "; ".join(bad[:3]))
    return ReshardStats(read, needed, tuple(o.level for o in olds))


class _Reader:
    """This rank's reads of an elastic recovery: its own boxes, and the boxes it serves to ranks whose host
    does not hold an old file it holds (sent with one exchange per array; none when every rank reads every
    file itself, as on one file system). A read error is kept (the exchange still runs) and agreed after."""

    def __init__(self, comm: Any, copies: RunCopies, piece_bytes: int, olds: list[_Old],
                 found: Located) -> None:
        self.comm, self.copies, self.piece_bytes = comm, copies, piece_bytes
        self.olds, self.found = olds, found
        self.me, self.size = comm.Get_rank(), comm.Get_size()
        self.needed = 0
        self.served: dict[int, int] = {}  # bytes read from files for each rank's boxes
        self.error: str | None = None
        # Every rank reads what it needs itself unless some file is held only where its reader is not.
        self.moves = any(not found.direct(q, o) and olds[o].holder != q
                         for q in range(self.size) for o in range(len(olds)))

    def bytes_read(self, timeout: float) -> int:
        """Bytes read from files for this rank's boxes, here or by the ranks that served it (collective)."""
        if not self.moves:
            return self.served.get(self.me, 0)
        every = _mpi.allgather(self.comm, {str(q): n for q, n in self.served.items()},
                               "elastic recovery: bytes read", timeout)
        return sum(int(got.get(str(self.me), 0)) for got in every)

    def _sources(self, name: str, q: int) -> range:
        n = len(self.olds)
        if all(o.header.section(name).layout.replicated for o in self.olds):  # type: ignore[union-attr]
            return range(q % n, q % n + 1)  # one copy, spread over the old files
        return range(n)

    def _read(self, old: int, sec: Any, runs: Runs, dest: memoryview, q: int) -> None:
        if self.error is not None:
            return
        try:
            n = _read_old(self.copies, self.piece_bytes, old, self.olds[old], sec, runs, dest)
            self.served[q] = self.served.get(q, 0) + n
        except ProcessFailure:
            raise
        except DAMAGED as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def read(self, name: str, arr: np.ndarray, new: list[Layout], shapes: list[tuple[int, ...]],
             timeout: float) -> None:
        """Fill ``arr``, this rank's target of ``name`` (``new``, ``shapes``: every rank's layout, shape)."""
        dest = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        send: list[list[np.ndarray]] = [[] for _ in range(self.size)]
        recv, wait = [0] * self.size, []
        for q in range(self.size) if self.moves else (self.me,):
            for old in self._sources(name, q):
                sec = self.olds[old].header.section(name)
                assert sec.layout is not None
                holder = self.olds[old].holder
                mine = q == self.me
                if not mine and (holder != self.me or self.found.direct(q, old)):
                    continue
                runs = box_runs(sec.layout, sec.shape, new[q], shapes[q], arr.itemsize)
                if not len(runs.src):
                    continue
                if mine:
                    self.needed += runs.total
                if mine and (holder == self.me or self.found.direct(q, old)):
                    self._read(old, sec, runs, dest, q)
                elif mine:
                    recv[holder] += runs.total
                    wait.append((holder, runs))
                else:
                    packed, out = _packed(runs)
                    self._read(old, sec, packed, memoryview(out), q)  # type: ignore[arg-type]
                    send[q].append(out)
        if not self.moves:
            return
        try:
            got = exchange(self.comm, [np.concatenate(b) if b else np.zeros(0, np.uint8) for b in send], recv,
                           timeout, f"elastic recovery: array {name!r}")
        except MPI.Exception as exc:
            raise _mpi.as_failure(exc, self.comm, "elastic recovery read") from exc
        at = [0] * self.size
        flat = arr.reshape(-1).view(np.uint8)
        for holder, runs in wait:
            buf = got[holder]
            for d, n in zip(runs.dst.tolist(), runs.nbytes.tolist(), strict=True):
                flat[d:d + n] = buf[at[holder]:at[holder] + n]
                at[holder] += n


def _packed(runs: Runs) -> tuple[Runs, np.ndarray]:
    """``runs`` redirected into one packed buffer (in source order), and that buffer."""
    dst = np.concatenate(([0], np.cumsum(runs.nbytes)[:-1])).astype(np.int64)
    return Runs(runs.src, dst, runs.nbytes), np.empty(runs.total, np.uint8)


def _read_old(copies: RunCopies, piece_bytes: int, old: int, src: _Old, sec: Any, runs: Any,
              dest: memoryview) -> int:
    """Read ``runs`` of old rank ``old``'s section; a damaged copy is retried at the next level holding it
    (a decoded L3 group's file is its L1 file)."""
    level = src.read_level
    while True:
        try:
            with copies.open(level, old) as source:
                return read_runs(source, sec, runs, dest, piece_bytes=piece_bytes)
        except ProcessFailure:
            raise
        except DAMAGED as exc:
            nxt, _ = copies.find(old, after=level)
            if nxt is None:
                raise RecoveryError(f"old rank {old}'s file at L{level}: {exc} (no other copy)") from exc
            level = nxt.level
