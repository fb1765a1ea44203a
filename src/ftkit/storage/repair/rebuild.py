"""The group step of the locate-and-rebuild engine: what an L2/L3 group of a checkpoint lost, and its rebuild.

Every rebuild of a group's files goes through here: the recovery chain's L2/L3 steps
(:mod:`ftkit.checkpoint.levels.partner`, :mod:`ftkit.checkpoint.levels.encoded`: one process per member,
each seeing its member's files), and the offline rebuild where every member's files are visible in one
process (:func:`ftkit.storage.repair.checkpoints.repair_group`: ``ftkit rebuild``, ``ftkit flush``, the
elastic decode of :mod:`ftkit.storage.repair.holders`).

- :class:`GroupFiles` names the group's files as this process sees them.
- :func:`assess` decides which are lost, with one validity rule per level: an L1 file or a partner copy is
  valid when it verifies against the manifest's digest of the rank it belongs to; a parity file by
  :func:`~ftkit.storage.groupcode.plan.member_parity` and the group's majority header.
- The plan it returns (:class:`~ftkit.storage.groupcode.plan.PartnerPlan`,
  :class:`~ftkit.storage.groupcode.plan.GroupPlan`) says where the survivors are and which file is rebuilt
  from which (``restores``, ``recopies``, ``rs_sources``).
- :func:`rebuild` carries it out, across processes with ``comm``
  (:func:`~ftkit.storage.groupcode.partner_copy.rebuild_partner`,
  :func:`~ftkit.storage.groupcode.erasure.rebuild_group`) or in this process without
  (:func:`~ftkit.storage.groupcode.offline.rebuild_partner_files`,
  :func:`~ftkit.storage.groupcode.offline.rebuild_group_files`), with the same results byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import FtkitError
from ...topology import partner_source_in
from ..format.container import DEFAULT_CHUNK, verify_file
from ..groupcode.erasure import assess_group, rebuild_group
from ..groupcode.offline import (
    assess_group_files,
    assess_partner_files,
    rebuild_group_files,
    rebuild_partner_files,
)
from ..groupcode.partner_copy import DEFAULT_TIMEOUT, PartnerLevel, assess_partner, rebuild_partner
from ..groupcode.plan import GroupPlan, PartnerPlan, encoding_tag
from ..levels import LEVEL_CLASSES
from ..manifest import CheckpointEntry

__all__ = ["GroupFiles", "assess", "rebuild"]

#: What a damaged, missing or unreadable file raises while it is verified.
_DAMAGED = (FtkitError, OSError, ValueError, KeyError, IndexError, TypeError)


@dataclass(frozen=True)
class GroupFiles:
    """One L2/L3 group's files of checkpoint ``entry``, as one process sees them.

    Parameters
    ----------
    level
        The level of the redundancy (a partner-copy or an encoded level of the table).
    exec_id
        The run's identity (it names an encoding).
    entry
        The checkpoint's manifest entry.
    ranks
        The group's ranks, in member order.
    data, extra
        The L1 files and the level's files (partner copies, parity) this process sees: one per member in
        member order without ``comm``; this process's member's only with ``comm``.
    comm
        None: every member's files are visible here. Else a communicator of one process per member, in
        member order (collective calls).
    chunk_bytes
        Bytes per read or message while verifying and copying.
    timeout
        Seconds to wait for the other members at each collective step (None: no deadline).
    default_code
        The L3 code when the entry does not record one.
    """

    level: int
    exec_id: str
    entry: CheckpointEntry
    ranks: tuple[int, ...]
    data: tuple[Path, ...]
    extra: tuple[Path, ...]
    comm: Any = None
    chunk_bytes: int = DEFAULT_CHUNK
    timeout: float | None = DEFAULT_TIMEOUT
    default_code: str = "rs"

    @property
    def partner(self) -> bool:
        """Whether the level keeps partner copies (else: parity files of a group code)."""
        return issubclass(LEVEL_CLASSES[self.level], PartnerLevel)

    @property
    def names(self) -> list[str]:
        """The members for messages: ``rank r (node n)``."""
        return [f"rank {r} (node {self.entry.nodes[r]})" for r in self.ranks]

    @property
    def code(self) -> str:
        """The group code of an encoded level (the entry's ``l3_code``)."""
        return str(self.entry.extra.get("l3_code", self.default_code))

    @property
    def tag(self) -> str:
        """The identity of the checkpoint's encoding, recorded in its parity files."""
        return encoding_tag(self.exec_id, self.entry.id)

    def members(self) -> list[int]:
        """The members whose files ``data`` and ``extra`` are (in that order)."""
        return [self.comm.Get_rank()] if self.comm is not None else list(range(len(self.ranks)))

    def owners(self) -> dict[Path, int]:
        """The rank whose checkpoint file each visible L1 file and partner copy must be."""
        out = {}
        for m, d, x in zip(self.members(), self.data, self.extra, strict=True):
            out[x] = partner_source_in(self.ranks, self.ranks[m])
            out[d] = self.ranks[m]  # after the copy: a file named twice is its own rank's
        return out

    def valid(self, path: Path) -> bool:
        """Whether ``path`` (an L1 file or partner copy) verifies against its owner's manifest digest."""
        try:
            owner = self.owners()[path]
            verify_file(path, expect_digest=self.entry.files[owner].digest, chunk_bytes=self.chunk_bytes)
            return True
        except _DAMAGED:
            return False


def assess(files: GroupFiles) -> PartnerPlan | GroupPlan:
    """Decide which files of the group are lost (collective over ``files.comm`` when it is given).

    Raises
    ------
    TimeoutFailure
        If a member does not take part in a step within ``files.timeout`` seconds.
    """
    if files.partner:
        if files.comm is None:
            return assess_partner_files(files.data, files.extra, files.valid)
        return assess_partner(files.comm, files.data[0], files.extra[0], files.valid, timeout=files.timeout)
    if files.comm is None:
        return assess_group_files(files.data, files.extra, code=files.code, tag=files.tag)
    return assess_group(files.comm, files.data[0], files.extra[0], code=files.code, tag=files.tag,
                        timeout=files.timeout)


def rebuild(files: GroupFiles, plan: PartnerPlan | GroupPlan) -> None:
    """Rebuild the lost files of ``plan`` (the result of :func:`assess`, the same on every member), so the
    group is whole and protected again (collective over ``files.comm`` when it is given).

    Raises
    ------
    RecoveryError
        When the group lost more than its redundancy covers (nothing is written then), or a rebuilt file does
        not match its recorded digest.
    StorageError
        When a file cannot be read or written (on every member, with ``comm``).
    TimeoutFailure
        If a member does not take part in a step within ``files.timeout`` seconds.
    """
    names = files.names
    if isinstance(plan, PartnerPlan):
        if files.comm is None:
            rebuild_partner_files(plan, files.data, files.extra, names)
        else:
            rebuild_partner(files.comm, plan, files.data[0], files.extra[0], names=names,
                            chunk_size=files.chunk_bytes, timeout=files.timeout)
    elif files.comm is None:
        rebuild_group_files(plan, files.data, files.extra, tag=files.tag, names=names)
    else:
        rebuild_group(files.comm, plan, files.data[0], files.extra[0], tag=files.tag, names=names,
                      timeout=files.timeout)
