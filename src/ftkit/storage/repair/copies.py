"""Where each rank's copy of a checkpoint is, on this host: the single-host half of the locate-and-rebuild
engine.

:class:`RunCopies` answers, for one checkpoint of a run, "which level holds a verified copy of rank ``r``'s
file, and how is it read". Elastic recovery and the recovery chain's fetch (through
:mod:`ftkit.storage.repair.holders`), ``ftkit export`` (:mod:`ftkit.storage.export`) and ``ftkit flush``
(:mod:`ftkit.storage.repair.flush`) use it.

- Levels are tried cheapest first (:func:`source_levels`, from the level table): the L1 file (node-local;
  on a cluster only on the host of that node), the L2 partner copy (kept by the next member of the rank's
  group), the L4 copy: a plain file, or for an entry written with ``enable_dcp`` the differential checkpoint
  read in place (:class:`~ftkit.storage.format.dcpstore.DcpSource`). Only levels at which the entry is
  complete are tried.
- A copy is *found* when its header is intact and is the committed one: its digest is the manifest's, and it
  names the rank and the checkpoint. Section bytes are verified by the readers (chunk or section digests of
  that header).
- L3 holds parity, not files: after a decoder rebuilt a group's L1 files, ``open(3, r)`` reads the rebuilt L1
  file.
- On a cluster a node-local file is only on the host that wrote it: :meth:`RunCopies.present` says which of a
  rank's files (L1, L2 copy, L3 parity; L4 is shared) are on this host, so a collective reader can have each
  file read where it is (:mod:`ftkit.storage.repair.holders`).

Where a rank's L2 copy is kept is :func:`ftkit.topology.partner_in`, the one partner rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import FtkitError
from ...topology import partner_in
from ..format.compressed import open_source
from ..format.container import DEFAULT_CHUNK, Header, read_source_header
from ..format.dcpstore import DcpSource, dcp_dir
from ..format.source import ByteSource
from ..groupcode.erasure import EncodedLevel
from ..groupcode.partner_copy import PartnerLevel
from ..levels import LEVEL_CLASSES, make_level, spec
from ..manifest import CheckpointEntry
from ..placement.level_storage import StorageLevel
from ..placement.node_local import LocalLevel
from .checkpoints import entry_groups

__all__ = ["source_levels", "base_level", "is_parity", "parity_level", "Copy", "RunCopies"]


def source_levels() -> tuple[int, ...]:
    """The levels of the table holding a rank's checkpoint file itself or a whole copy of it (every level
    but the group parity of L3), cheapest first."""
    return tuple(lv for lv in sorted(LEVEL_CLASSES) if not is_parity(lv))


def base_level() -> int:
    """The level of the table keeping each rank's own checkpoint file on its node (L1: the file partner
    copies and parity protect, and where a rebuilt or fetched file is put)."""
    return next(lv for lv in sorted(LEVEL_CLASSES) if LEVEL_CLASSES[lv] is LocalLevel)


def is_parity(level: int) -> bool:
    """Whether ``level`` keeps group parity instead of a rank's file (L3)."""
    return issubclass(LEVEL_CLASSES[level], EncodedLevel)


def parity_level() -> int:
    """The level of the table keeping group parity (L3)."""
    return next(lv for lv in sorted(LEVEL_CLASSES) if is_parity(lv))


#: What a damaged or unreachable copy raises while its header is read.
_DAMAGED = (FtkitError, OSError, ValueError, KeyError, IndexError, TypeError)


@dataclass(frozen=True)
class Copy:
    """A rank's file found at ``level``: its checked header and the header's bytes (to send to a peer)."""

    level: int
    header: Header
    raw: bytes


class RunCopies:
    """The copies of the files of checkpoint ``entry`` of run ``exec_id``.

    Parameters
    ----------
    ckpt_dir, glbl_dir
        The run's node-local and global directories.
    exec_id
        The run's identity.
    entry
        The manifest entry of the checkpoint.
    chunk_bytes
        I/O chunk of the storage levels (bytes).
    """

    def __init__(self, ckpt_dir: Path, glbl_dir: Path, exec_id: str, entry: CheckpointEntry,
                 chunk_bytes: int = DEFAULT_CHUNK) -> None:
        self.ckpt_dir, self.glbl_dir = Path(ckpt_dir), Path(glbl_dir)
        self.exec_id, self.entry, self.chunk_bytes = exec_id, entry, chunk_bytes
        self.dcp = bool(entry.extra.get("dcp"))
        self._levels: dict[int, StorageLevel] = {}

    def storage(self, level: int) -> StorageLevel:
        """The storage of ``level`` for this checkpoint (built once)."""
        if level not in self._levels:
            self._levels[level] = make_level(level, self.ckpt_dir, self.glbl_dir, self.exec_id,
                                             self.entry.nodes, self.chunk_bytes)
        return self._levels[level]

    def path(self, level: int, rank: int) -> Path:
        """Where ``rank``'s file is kept at ``level`` as a plain file (L2: the partner copy on the next
        member of its group; L3: the L1 file a decoder rebuilt)."""
        level = base_level() if is_parity(level) else level
        holder = rank
        if issubclass(LEVEL_CLASSES[level], PartnerLevel):
            holder = partner_in(next(g for g in entry_groups(self.entry) if rank in g), rank)
        return self.storage(level).path(self.entry.id, holder)

    def stored_path(self, level: int, rank: int) -> Path:
        """The file of ``rank`` at ``level`` (L2: its partner copy; L3: its own parity file)."""
        return self.storage(level).path(self.entry.id, rank) if is_parity(level) else self.path(level, rank)

    def node_local(self, levels: Sequence[int]) -> list[int]:
        """Those of ``levels`` whose files are on the nodes (not under ``glbl_dir``, seen by every host)."""
        return [lv for lv in levels if self.storage(lv).root != self.glbl_dir]

    def present(self, rank: int, levels: Sequence[int] | None = None) -> list[int]:
        """The levels of ``levels`` (default: every level) at which the entry is complete and ``rank``'s file
        exists on this host (a level under ``glbl_dir``, the shared file system, counts as present wherever
        the entry is complete at it: it is verified when read)."""
        out = []
        for lv in sorted(LEVEL_CLASSES) if levels is None else levels:
            if not self.entry.complete(lv):
                continue
            try:
                if self.storage(lv).root == self.glbl_dir or self.stored_path(lv, rank).is_file():
                    out.append(lv)
            except _DAMAGED:
                continue  # no group layout for L2/L3: nothing there
        return out

    def open(self, level: int, rank: int) -> ByteSource:
        """A byte source of ``rank``'s file at ``level`` (close it after use).

        Raises
        ------
        CheckpointNotFoundError, StorageError, FormatError
            If that copy is missing or cannot be opened.
        """
        if self.dcp and spec(level).differential_key is not None:  # the level holding differential files
            return DcpSource(dcp_dir(self.glbl_dir, self.exec_id), rank, self.entry.id)
        return open_source(self.path(level, rank))  # a plain file, or a compressed L4 copy

    def find(self, rank: int, after: int = 0,
             levels: Sequence[int] | None = None) -> tuple[Copy | None, str]:
        """The first level of ``levels`` above ``after`` holding ``rank``'s committed file: ``(copy, "")``,
        or ``(None, why not)`` naming what each level lacked."""
        why = []
        for lv in source_levels() if levels is None else levels:
            if lv <= after or not self.entry.complete(lv):
                continue
            try:
                with self.open(lv, rank) as src:
                    header, raw = read_source_header(src)
                    name = src.name
            except _DAMAGED as exc:
                why.append(f"L{lv}: {exc}")
                continue
            if (header.digest != self.entry.files[rank].digest or header.rank != rank
                    or header.ckpt_id != self.entry.id):
                why.append(f"L{lv}: {name} is not the committed file")
                continue
            return Copy(lv, header, raw), ""
        return None, "; ".join(why) or "no level holds it"
