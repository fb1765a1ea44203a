"""Offline inspection and repair of a checkpoint's L2/L3 redundancy: ``ftkit rebuild DIR`` (and the L2/L3
part of ``ftkit ls`` / ``ftkit verify``).

``ftkit rebuild`` works in one process that sees every node-local directory (emulated nodes, or node
directories gathered on one machine), like SCR's ``scr_index --build``: for each checkpoint of the run's
manifest that is complete at L2 or L3 (or the one given with ``--id``), it checks every group's files,
rebuilds missing or damaged L1 files from the partner copies or by decoding, and re-creates lost copies and
parity files. The group layout is the one recorded at checkpoint time (``group_size`` in the manifest
entry, else ``--group-size``). A group that lost more than its redundancy covers is reported, and the
exit code is 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._paths import check_inside
from ..errors import FtkitError, StorageError
from ..topology import plan_topology
from .base import StorageLevel
from .format import read_header, verify_file
from .group_plan import encoding_tag
from .levels import make_level
from .locate import find_manifest, run_roots
from .manifest import CheckpointEntry, Manifest
from .offline import assess_group_files, assess_partner_files, rebuild_group_files, rebuild_partner_files
from .parity import read_parity_header, verify_parity

__all__ = ["entry_groups", "check_redundancy", "repair_checkpoint", "add_parser", "run_rebuild"]


def entry_groups(entry: CheckpointEntry, group_size: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Return the L2/L3 groups of ``entry`` (ranks), from its node map and its recorded ``group_size``.

    Raises
    ------
    TopologyError
        If the node map cannot be split into groups of that size.
    """
    k = int(entry.extra.get("group_size", group_size or 4))
    return plan_topology(entry.nodes, 0, group_size=k).groups


def _source_of(groups: Sequence[Sequence[int]], rank: int) -> int:
    for g in groups:
        if rank in g:
            return g[(list(g).index(rank) - 1) % len(g)]
    raise StorageError(f"rank {rank} is in no group")


def check_redundancy(storage: StorageLevel, entry: CheckpointEntry, deep: bool,
                     group_size: int | None = None) -> list[str]:
    """Return the problems of ``entry``'s files at L2 or L3 (``storage``): missing, wrong size, damaged.

    Without ``deep`` only existence, sizes and headers are checked; with it every byte is re-hashed.
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
            if storage.level == 2:
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
    return problems


def repair_checkpoint(ckpt_dir: Path, glbl_dir: Path, manifest: Manifest, entry: CheckpointEntry,
                      group_size: int | None = None, log: Any = print) -> bool:
    """Check and repair ``entry``'s L1 files and L2/L3 redundancy, group by group; True if all is whole.

    Every file touched is first checked to lie inside ``ckpt_dir`` (no symbolic link leading out). A group
    that cannot be repaired -- too much lost, a damaged or unreadable file, an unsafe path -- is reported
    in one line and the other groups are still repaired.

    Raises
    ------
    TopologyError
        If the entry's node map cannot be split into groups.
    """
    groups = entry_groups(entry, group_size)
    l1 = make_level(1, ckpt_dir, glbl_dir, manifest.exec_id, entry.nodes)
    ok = True
    for lv in (2, 3):
        if not entry.complete(lv):
            continue
        red = make_level(lv, ckpt_dir, glbl_dir, manifest.exec_id, entry.nodes)
        for gi, g in enumerate(groups):
            what = (f"checkpoint {entry.id} L{lv} group {gi} (ranks {list(g)} on nodes "
                    f"{[entry.nodes[r] for r in g]})")
            data = [l1.path(entry.id, r) for r in g]
            extra = [red.path(entry.id, r) for r in g]
            try:
                for p in data + extra:
                    check_inside(p, ckpt_dir, f"{what}")
                log(f"{what}: " + _repair_group(lv, manifest, entry, g, data, extra))
            except (FtkitError, OSError) as exc:
                ok = False
                log(f"{what}: CANNOT REPAIR: {exc}")
    return ok


def _repair_group(lv: int, manifest: Manifest, entry: CheckpointEntry, g: Sequence[int], data: list[Path],
                  extra: list[Path]) -> str:
    """Repair one group's L1 files and its L2 copies / L3 parity files; say what was done."""
    names = [f"rank {r} (node {entry.nodes[r]})" for r in g]
    if lv == 2:
        want = {data[i]: entry.files[r].digest for i, r in enumerate(g)}
        want.update({extra[i]: entry.files[g[i - 1]].digest for i in range(len(g))})

        def valid(p: Path) -> bool:
            try:
                verify_file(p, expect_digest=want[p])
                return True
            except (FtkitError, OSError):
                return False

        plan = assess_partner_files(data, extra, valid)
        if plan.intact:
            return "intact"
        rebuild_partner_files(plan, data, extra, names)
        lost = [names[i] for i in plan.lost_members]
        copies = [names[i] for i, c in enumerate(plan.have_copy) if not c]
    else:
        code = str(entry.extra.get("l3_code", "rs"))
        tag = encoding_tag(manifest.exec_id, entry.id)
        gplan = assess_group_files(data, extra, code=code, tag=tag)
        if gplan.intact:
            return "intact"
        rebuild_group_files(gplan, data, extra, tag=tag, names=names)
        lost = [names[i] for i in gplan.lost_data]
        copies = [names[i] for i in gplan.lost_parity]
    for i, r in enumerate(g):
        verify_file(data[i], expect_digest=entry.files[r].digest)
    kind = "partner copies" if lv == 2 else "parity files"
    return f"rebuilt L1 files of {lost or 'none'}; re-created {kind} of {copies or 'none'}"


def run_rebuild(args: argparse.Namespace) -> int:
    """Carry out ``ftkit rebuild``; return 0 if every checkpoint considered is whole afterwards, else 1."""
    found = find_manifest(args.dir)
    if found is None:
        raise StorageError(f"no ftkit manifest under {args.dir}: give the run's meta_dir, its parent, or its "
                           "config file")
    meta_dir, m = found
    ckpt_dir, glbl_dir = run_roots(meta_dir, m)
    if args.ckpt_dir:
        ckpt_dir = Path(args.ckpt_dir)
    entries = [e for e in m.newest_first() if e.complete(2) or e.complete(3)]
    if args.id is not None:
        entries = [e for e in m.checkpoints if e.id == args.id]
        if not entries:
            raise StorageError(f"checkpoint {args.id} is not in the manifest of run {m.exec_id}: "
                               "see `ftkit ls`")
    if not entries:
        print(f"run {m.exec_id}: no checkpoint with L2/L3 redundancy: nothing to rebuild")
        return 0
    ok = True
    for e in entries:
        ok = repair_checkpoint(ckpt_dir, glbl_dir, m, e, args.group_size) and ok
    return 0 if ok else 1


def add_parser(subparsers: Any) -> None:
    """Register the ``rebuild`` subcommand."""
    p = subparsers.add_parser(
        "rebuild", help="repair missing or damaged checkpoint files offline from their L2/L3 redundancy",
        description="Rebuild the missing or damaged L1 files of a run's checkpoints from their partner "
                    "copies (L2) or by decoding their group (L3), and re-create lost copies and parity "
                    "files. Needs every node-local directory visible from here (e.g. emulated nodes). DIR: "
                    "the run's meta_dir, its parent, or its config file. Exit code 1 if some group cannot "
                    "be repaired.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--id", type=int, default=None, help="only this checkpoint (default: every L2/L3 one)")
    p.add_argument("--group-size", type=int, default=None,
                   help="group size, if the manifest does not record it (default 4)")
    p.add_argument("--ckpt-dir", default=None, help="node-local root, if it moved since the run")
    p.set_defaults(func=run_rebuild)
