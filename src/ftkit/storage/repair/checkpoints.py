"""Offline inspection and repair of a checkpoint's L2/L3 redundancy: ``ftkit rebuild DIR`` (and the L2/L3
part of ``ftkit ls`` / ``ftkit verify``).

``ftkit rebuild`` works in one process that sees every node-local directory (emulated nodes, or node
directories gathered on one machine), like SCR's ``scr_index --build``: for each checkpoint of the run's
manifest that is complete at L2 or L3 (or the one given with ``--id``), it checks every group's files,
rebuilds missing or damaged L1 files from the partner copies or by decoding, and re-creates lost copies and
parity files. The group layout is the one recorded at checkpoint time (``group_size`` in the manifest
entry, else ``--group-size``). A group that lost more than its redundancy covers is reported, and so is
every other checkpoint with a damaged or missing file that no L2/L3 redundancy rebuilds (a checkpoint
complete at L1 or L4 only, a damaged L4 copy): the exit code is then 1. The command itself is in
:mod:`ftkit.cli.storage_cli`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..._paths import check_inside
from ...errors import FtkitError, StorageError
from ...topology import partner_source_in, plan_topology
from ..format.compressed import stored_size
from ..format.container import read_header, verify_file
from ..groupcode.parity import read_parity_header, verify_parity
from ..groupcode.partner_copy import PartnerLevel
from ..groupcode.plan import PartnerPlan, encoding_tag
from ..levels import LEVEL_CLASSES, make_level
from ..manifest import CheckpointEntry, Manifest
from ..placement.level_storage import StorageLevel
from .rebuild import GroupFiles, assess, rebuild

__all__ = ["entry_groups", "check_redundancy", "check_entry", "entry_files", "GroupRepair",
           "repair_checkpoint", "repair_group", "group_levels"]

#: Called with each file once it has been checked or repaired (for progress).
Done = Callable[[Path], None]


def _ignore(path: Path) -> None:
    return None


def entry_groups(entry: CheckpointEntry, group_size: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Return the L2/L3 groups of ``entry`` (ranks), from its node map and its recorded ``group_size``.

    Raises
    ------
    TopologyError
        If the node map cannot be split into groups of that size.
    """
    k = int(entry.extra.get("group_size", group_size or 4))
    return plan_topology(entry.nodes, 0, group_size=k).groups


def group_levels() -> list[int]:
    """The levels of the table whose files are a group's redundancy (partner copies, parity), not a rank's
    checkpoint file: those ``ftkit rebuild`` repairs group by group."""
    return [lv for lv in sorted(LEVEL_CLASSES) if not LEVEL_CLASSES[lv].supports_read]


def _source_of(groups: Sequence[Sequence[int]], rank: int) -> int:
    for g in groups:
        if rank in g:
            return partner_source_in(g, rank)
    raise StorageError(f"rank {rank} is in no group")


def check_redundancy(storage: StorageLevel, entry: CheckpointEntry, deep: bool,
                     group_size: int | None = None, done: Done = _ignore) -> list[str]:
    """Return the problems of ``entry``'s files at L2 or L3 (``storage``): missing, wrong size, damaged.

    Without ``deep`` only existence, sizes and headers are checked; with it every byte is re-hashed.
    ``done`` is called with each file's path once it is checked.
    """
    problems: list[str] = []
    try:
        groups = entry_groups(entry, group_size)
    except FtkitError as exc:
        return [f"L{storage.level}: {exc}"]
    for rank in range(len(entry.files)):
        path = storage.path(entry.id, rank)
        try:
            if not path.is_file():
                raise StorageError(f"{path}: missing")
            if isinstance(storage, PartnerLevel):
                src = _source_of(groups, rank)
                want = entry.files[src]
                if deep:
                    h = verify_file(path, expect_digest=want.digest)
                else:
                    h = read_header(path)
                    if path.stat().st_size != want.size:
                        raise StorageError(f"{path}: {path.stat().st_size} bytes, manifest says {want.size}")
                if h.rank != src:
                    raise StorageError(f"{path}: holds rank {h.rank}'s file, expected rank {src}'s")
            else:
                ph = verify_parity(path) if deep else read_parity_header(path)
                if ph.tag != encoding_tag(storage.exec_id, entry.id):
                    raise StorageError(f"{path}: parity of another checkpoint ({ph.tag})")
        except (FtkitError, OSError) as exc:
            problems.append(f"L{storage.level} rank {rank}: {exc}")
        done(path)
    return problems


def entry_files(ckpt_dir: Path, glbl_dir: Path, manifest: Manifest, entry: CheckpointEntry,
                levels: Iterable[int] | None = None) -> list[Path]:
    """The files of ``entry`` at ``levels`` (default: its complete levels), one per rank and level."""
    out = []
    for lv in entry.complete_levels if levels is None else levels:
        if lv in LEVEL_CLASSES:
            storage = make_level(lv, ckpt_dir, glbl_dir, manifest.exec_id, entry.nodes)
            out += [storage.path(entry.id, r) for r in range(len(entry.files))]
    return out


def check_entry(ckpt_dir: Path, glbl_dir: Path, manifest: Manifest, entry: CheckpointEntry, deep: bool,
                levels: Iterable[int] | None = None, done: Done = _ignore) -> list[str]:
    """Problems of ``entry``'s files at ``levels`` (default: its complete levels): existence and size, and
    every byte against its digests if ``deep``. ``done`` is called with each file's path once checked."""
    problems = []
    for lv in entry.complete_levels if levels is None else levels:
        if lv not in LEVEL_CLASSES:
            continue
        storage = make_level(lv, ckpt_dir, glbl_dir, manifest.exec_id, entry.nodes)
        if not storage.supports_read:  # L2 copies / L3 parity: checked against their group's files
            problems += check_redundancy(storage, entry, deep, done=done)
            continue
        for rank, f in enumerate(entry.files):
            path = storage.path(entry.id, rank)
            try:
                if deep:
                    verify_file(path, expect_digest=f.digest)
                elif not path.is_file():
                    raise FtkitError(f"{path}: missing")
                elif (size := stored_size(path)[0]) != f.size:  # a compressed copy: the size it holds
                    raise FtkitError(f"{path}: {size} bytes, manifest says {f.size}")
            except (FtkitError, OSError) as exc:
                problems.append(f"L{lv} rank {rank}: {exc}")
            done(path)
    return problems


class GroupRepair(NamedTuple):
    """What ``ftkit rebuild`` did with one L2/L3 group: ``result`` is ``intact``, ``repaired`` or
    ``failed``; ``detail`` says what was rebuilt, or why it could not be."""

    checkpoint: int
    level: int
    group: int
    ranks: tuple[int, ...]
    nodes: tuple[int, ...]
    result: str
    detail: str

    def describe(self) -> str:
        """The one line ``ftkit rebuild`` prints for this group."""
        what = (f"checkpoint {self.checkpoint} L{self.level} group {self.group} (ranks {list(self.ranks)} "
                f"on nodes {list(self.nodes)})")
        return f"{what}: {'CANNOT REPAIR: ' if self.result == 'failed' else ''}{self.detail}"


def repair_checkpoint(ckpt_dir: Path, glbl_dir: Path, manifest: Manifest, entry: CheckpointEntry,
                      group_size: int | None = None, log: Any = print,
                      done: Done = _ignore) -> list[GroupRepair]:
    """Check and repair ``entry``'s L1 files and L2/L3 redundancy, group by group; return what was done.

    Every file touched is first checked to lie inside ``ckpt_dir`` (no symbolic link leading out). A group
    that cannot be repaired -- too much lost, a damaged or unreadable file, an unsafe path -- is reported
    in one line (``log``) and the other groups are still repaired. ``done`` is called with every file of a
    group once the group is handled.

    Raises
    ------
    TopologyError
        If the entry's node map cannot be split into groups.
    """
    groups = entry_groups(entry, group_size)
    l1 = make_level(1, ckpt_dir, glbl_dir, manifest.exec_id, entry.nodes)
    out = []
    for lv in group_levels():
        if not entry.complete(lv):
            continue
        red = make_level(lv, ckpt_dir, glbl_dir, manifest.exec_id, entry.nodes)
        for gi, g in enumerate(groups):
            where = (entry.id, lv, gi, tuple(g), tuple(entry.nodes[r] for r in g))
            data = [l1.path(entry.id, r) for r in g]
            extra = [red.path(entry.id, r) for r in g]
            try:
                for p in data + extra:
                    check_inside(p, ckpt_dir, f"checkpoint {entry.id} L{lv} group {gi}")
                detail = repair_group(lv, manifest.exec_id, entry, g, data, extra)
                rec = GroupRepair(*where, "intact" if detail == "intact" else "repaired", detail)
            except (FtkitError, OSError) as exc:
                rec = GroupRepair(*where, "failed", str(exc))
            log(rec.describe())
            out.append(rec)
            for p in data + extra:
                done(p)
    return out


def repair_group(lv: int, exec_id: str, entry: CheckpointEntry, g: Sequence[int], data: list[Path],
                 extra: list[Path]) -> str:
    """Repair one group's L1 files ``data`` and its L2 copies / L3 parity files ``extra`` (``lv``), all
    visible here; say what was done (``"intact"`` when nothing was).

    The one offline rebuild of a group: ``ftkit rebuild``, ``ftkit flush`` and elastic recovery (after the
    group's files are brought to one rank, :mod:`ftkit.storage.repair.holders`) use it.

    Raises
    ------
    RecoveryError
        If the group lost more than its redundancy covers, or a rebuilt file does not verify.
    FtkitError, OSError
        If a file cannot be read or written.
    """
    files = GroupFiles(lv, exec_id, entry, tuple(g), tuple(data), tuple(extra))
    plan = assess(files)
    if plan.intact:
        return "intact"
    rebuild(files, plan)
    names = files.names
    if isinstance(plan, PartnerPlan):
        lost, kind = plan.lost_members, "partner copies"
        copies = [i for i, c in enumerate(plan.have_copy) if not c]
    else:
        lost, copies, kind = plan.lost_data, list(plan.lost_parity), "parity files"
    for i, r in enumerate(g):
        verify_file(data[i], expect_digest=entry.files[r].digest)
    return (f"rebuilt L1 files of {[names[i] for i in lost] or 'none'}; re-created {kind} of "
            f"{[names[i] for i in copies] or 'none'}")
