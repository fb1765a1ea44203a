"""Elastic recovery: fill new boxes from the stored boxes of a checkpoint written by other ranks.

A checkpoint whose arrays were protected with a global layout (``protect(name, a, global_shape=...,
offset=...)`` or ``protect_matrix``) can be recovered by any number of ranks with any other decomposition.
:func:`restore` is the one path; it is collective over the communicator it is given (``recover()`` passes
the checkpointer's; the online-recovery loop may pass the survivors' communicator after a shrink):

1. *Sources.* Rank ``r`` of ``M`` finds a copy of the files of the old ranks ``r, r + M, ...``
   (:class:`~ftkit.storage.copies.RunCopies`): the first of the L1 file (node-local; on a cluster only where
   that node's directory is reachable), the L2 partner copy, the L4 copy (a differential L4 checkpoint is
   read in place from its block store), whose header digest is the manifest's. If some file has none and the
   checkpoint is complete at L3, the L3 groups that lost a file are decoded first (one group per rank, with
   the offline decoder of ``ftkit rebuild``) and the lost L1 files looked for again. The headers (with the
   old layouts and per-chunk digests) are sent to every rank: each file's header is read once.
2. *Checks,* the same on every rank: every old file holds the protected names with a layout; dtype and global
   shape unchanged; the old boxes and the new boxes each tile the global array (or replicate it). Any
   problem is a :class:`~ftkit.errors.RecoveryError` (:class:`~ftkit.errors.ShapeMismatchError` for dtype or
   global shape) naming the array and the boxes, raised on every rank before any byte is written.
3. *Reads.* Each rank intersects its new boxes with every old box and reads only the digest chunks holding
   the byte runs it needs (see :mod:`ftkit.storage.boxread`: chunks inside one contiguous run of the target
   are read straight into it), verifying each one; a damaged copy is retried from the next level that holds
   the file. The outcome is agreed: an error on one rank raises on all.

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

from .._paths import check_inside
from ..config import Config
from ..errors import MissingCopyError, ProcessFailure, RecoveryError, ShapeMismatchError
from ..storage.boxread import read_runs
from ..storage.copies import SOURCE_LEVELS, RunCopies
from ..storage.format import Header, decode_header
from ..storage.group_plan import encoding_tag
from ..storage.layout import Layout, box_runs, coverage_problem, parse_layout
from ..storage.manifest import CheckpointEntry
from ..storage.offline import assess_group_files, rebuild_group_files
from ..storage.repair import entry_groups
from . import _mpi
from .contract import DAMAGED, make_level

__all__ = ["ReshardStats", "restore", "SOURCE_LEVELS", "layout_hint", "MissingCopyError"]


def _copies(config: Config, exec_id: str, entry: CheckpointEntry) -> RunCopies:
    return RunCopies(config.ckpt_dir, config.glbl_dir, exec_id, entry, config.io_chunk_bytes)


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
    """One old rank's file: where a verified copy is and its header."""

    level: int
    header: Header


def _parse_old(entry: CheckpointEntry, old: int, text: str) -> Header:
    raw = text.encode("ascii")
    header = decode_header(raw, xxhash.xxh3_64_intdigest(raw), f"old rank {old}")
    if header.digest != entry.files[old].digest:
        raise RecoveryError(f"checkpoint {entry.id}: old rank {old}'s header changed in transit")
    return header


def _rebuild_l3(comm: Any, timeout: float, config: Config, exec_id: str, entry: CheckpointEntry,
                lost: list[int]) -> list[str]:
    """Collective: decode the L3 groups holding a lost old file, one group per rank (the offline decoder of
    ``ftkit rebuild``: every node-local directory is visible here); return what failed."""
    groups = [list(g) for g in entry_groups(entry) if any(r in g for r in lost)]
    l1, l3 = (make_level(lv, config, exec_id, entry.nodes) for lv in (1, 3))
    errors = []
    for gi in range(comm.Get_rank(), len(groups), comm.Get_size()):
        g = groups[gi]
        try:
            data, parity = [l1.path(entry.id, r) for r in g], [l3.path(entry.id, r) for r in g]
            for p in data + parity:
                check_inside(p, config.ckpt_dir, f"L3 group of old ranks {g}")
            tag = encoding_tag(exec_id, entry.id)
            plan = assess_group_files(data, parity, code=str(entry.extra.get("l3_code", "rs")), tag=tag)
            rebuild_group_files(plan, data, parity, tag=tag, names=[f"old rank {r}" for r in g])
        except DAMAGED as exc:
            errors.append(f"L3 group of old ranks {g}: {exc}")
    gathered = _mpi.allgather(comm, errors, "elastic recovery: L3 rebuild", timeout)
    return [e for errs in gathered for e in errs]


def _find_assigned(comm: Any, timeout: float, config: Config, exec_id: str, entry: CheckpointEntry,
                   olds: list[int], extra: Any = None) -> list[list[Any]]:
    """Collective: rank ``r`` looks for the old files ``olds[r::size]``; every rank gets every answer."""
    rank, size = comm.Get_rank(), comm.Get_size()
    copies = _copies(config, exec_id, entry)
    mine = []
    for old in olds[rank::size]:
        found, why = copies.find(old)
        mine.append([old, found.level, found.raw.decode("ascii"), ""] if found else [old, 0, None, why])
    gathered = _mpi.allgather(comm, [mine, extra], "elastic recovery: sources", timeout)
    return [[f for g in gathered for f in g[0]], [g[1] for g in gathered]]


def _gather(comm: Any, timeout: float, config: Config, exec_id: str, entry: CheckpointEntry,
            targets: Mapping[str, np.ndarray],
            layouts: Mapping[str, Layout]) -> tuple[list[_Old], list[dict[str, Any]]]:
    """Collective: every old rank's verified header (L3 groups decoded first where a file is lost), and
    every new rank's layouts and dtypes."""
    new = {n: [targets[n].dtype.str, layouts[n].to_json(), list(targets[n].shape)] for n in targets}
    found, news = _find_assigned(comm, timeout, config, exec_id, entry, list(range(len(entry.files))), new)
    lost = sorted(f[0] for f in found if f[2] is None)
    rebuilt: set[int] = set()
    if lost and entry.complete(3):
        problems = _rebuild_l3(comm, timeout, config, exec_id, entry, lost)
        again = _find_assigned(comm, timeout, config, exec_id, entry, lost)[0]
        found = [f for f in found if f[2] is not None] + [
            f if f[2] is not None else [*f[:3], f"{f[3]}; {'; '.join(problems) or 'L3: not rebuilt'}"]
            for f in again]
        rebuilt = {f[0] for f in again if f[2] is not None}
    olds: list[_Old | None] = [None] * len(entry.files)
    missing = []
    for old, lv, text, why in sorted(found, key=lambda f: f[0]):
        if text is None:
            missing.append(f"old rank {old} (node {entry.nodes[old]}): {why}")
        else:
            olds[old] = _Old(3 if old in rebuilt else lv, _parse_old(entry, old, text))
    if missing:
        raise MissingCopyError(f"checkpoint {entry.id}: no verified copy of the files of {len(missing)} old "
                               "rank(s): " + "; ".join(missing[:3]) + (" ..." if len(missing) > 3 else ""))
    return [o for o in olds if o is not None], news


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
    olds, news = _gather(comm, timeout, config, exec_id, entry, targets, layouts)
    _check(entry, olds, news, partial)
    error, read, needed = None, 0, 0
    try:
        read, needed = _read_all(comm.Get_rank(), config, exec_id, entry, olds, targets, layouts)
    except ProcessFailure:
        raise
    except DAMAGED as exc:
        error = f"{type(exc).__name__}: {exc}"
    if not _mpi.all_true(comm, error is None, timeout, "elastic recovery read"):
        errors = _mpi.allgather(comm, error, "elastic recovery read", timeout)
        bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
        raise RecoveryError(f"checkpoint {entry.id}: reading the stored boxes failed: " + "; ".join(bad[:3]))
    return ReshardStats(read, needed, tuple(o.level for o in olds))


def _read_all(rank: int, config: Config, exec_id: str, entry: CheckpointEntry, olds: list[_Old],
              targets: Mapping[str, np.ndarray], layouts: Mapping[str, Layout]) -> tuple[int, int]:
    read = needed = 0
    copies = _copies(config, exec_id, entry)
    for name in sorted(targets):
        arr, new = targets[name], layouts[name]
        dest = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        sources = range(len(olds))
        if all(o.header.section(name).layout.replicated for o in olds):  # type: ignore[union-attr]
            sources = range(rank % len(olds), rank % len(olds) + 1)  # one copy, spread over the old files
        for old in sources:
            sec = olds[old].header.section(name)
            assert sec.layout is not None
            runs = box_runs(sec.layout, sec.shape, new, arr.shape, arr.itemsize)
            if not len(runs.src):
                continue
            needed += runs.total
            read += _read_old(copies, config.io_chunk_bytes, old, olds[old], sec, runs, dest)
    return read, needed


def _read_old(copies: RunCopies, piece_bytes: int, old: int, src: _Old, sec: Any, runs: Any,
              dest: memoryview) -> int:
    """Read ``runs`` of old rank ``old``'s section; a damaged copy is retried at the next level holding it
    (a decoded L3 group's file is its L1 file)."""
    level = src.level
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
