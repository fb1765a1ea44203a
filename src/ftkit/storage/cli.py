"""``ftkit ls DIR`` and ``ftkit verify DIR``: inspect and check checkpoints offline.

``DIR`` is a run's ``meta_dir`` (it holds ``manifest.json``, which records where the files are), a directory
one level above it (e.g. a run directory holding ``meta/``, ``local/``, ``global/``), or an FTI-style config
file.
Without any manifest, the ``.ftk`` files found under ``DIR`` are listed and verified on their own.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..errors import FtkitError
from .base import FILE_SUFFIX
from .format import read_header, verify_file
from .levels import LEVEL_CLASSES, make_level
from .locate import find_manifest, run_roots
from .manifest import MANIFEST_NAME, Manifest
from .repair import add_parser as add_rebuild_parser
from .repair import check_redundancy

__all__ = ["add_parser", "run_ls", "run_verify"]


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _check_entry(meta_dir: Path, m: Manifest, entry: Any, deep: bool) -> list[str]:
    """Problems of ``entry``'s files at its complete levels (existence and size; digests too if ``deep``)."""
    ckpt, glbl = run_roots(meta_dir, m)
    problems = []
    for lv in entry.complete_levels:
        if lv not in LEVEL_CLASSES:
            continue
        storage = make_level(lv, ckpt, glbl, m.exec_id, entry.nodes)
        if not storage.supports_read:  # L2 copies / L3 parity: checked against their group's files
            problems += check_redundancy(storage, entry, deep)
            continue
        for rank, f in enumerate(entry.files):
            path = storage.path(entry.id, rank)
            try:
                if deep:
                    verify_file(path, expect_digest=f.digest)
                elif not path.is_file():
                    raise FtkitError(f"{path}: missing")
                elif path.stat().st_size != f.size:
                    raise FtkitError(f"{path}: {path.stat().st_size} bytes, manifest says {f.size}")
            except (FtkitError, OSError) as exc:
                problems.append(f"L{lv} rank {rank}: {exc}")
    return problems


def run_ls(args: argparse.Namespace) -> int:
    """Carry out ``ftkit ls``: one line per checkpoint (id, level, ranks, size, complete?)."""
    found = find_manifest(args.dir)
    if found is None:
        return _ls_files(Path(args.dir))
    meta_dir, m = found
    print(f"run {m.exec_id}: {m.nranks} ranks, manifest {meta_dir / MANIFEST_NAME}, status {m.status}")
    print(f"{'id':>6} {'level':>5} {'levels complete':<16} {'ranks':>5} {'size':>11}  complete?")
    for e in sorted(m.checkpoints, key=lambda e: e.seq):
        levels = ",".join(f"L{lv}" for lv in e.complete_levels) or "-"
        pending = [f"L{lv}" for lv, ok in sorted(e.levels.items()) if not ok]
        problems = _check_entry(meta_dir, m, e, deep=False)
        state = "yes" if not problems and e.complete_levels else "no"
        if pending:
            state += f" (pending: {','.join(pending)})"
        if e.unsynced_levels:
            state += f" (fsync in the background: {','.join(f'L{lv}' for lv in sorted(e.unsynced_levels))})"
        if problems:
            state += f" ({len(problems)} file problem(s), e.g. {problems[0]})"
        print(f"{e.id:>6} {e.level:>5} {levels:<16} {len(e.files):>5} {_human(e.total_bytes):>11}  {state}")
    if not m.checkpoints:
        print("(no checkpoints)")
    return 0


def _scan(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(f"*{FILE_SUFFIX}") if p.is_file())


def _ls_files(root: Path) -> int:
    files = _scan(root)
    if not files:
        print(f"no ftkit manifest or checkpoint files under {root}")
        return 1
    groups: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    sizes: dict[tuple[str, int, int], int] = defaultdict(int)
    bad = 0
    for f in files:
        try:
            h = read_header(f)
        except FtkitError:
            bad += 1
            continue
        key = (h.exec_id, h.ckpt_id, h.level)
        groups[key].append(h.rank)
        sizes[key] += h.file_size
    print(f"no manifest under {root}: listing {len(files)} checkpoint file(s) (completeness unknown)")
    print(f"{'run':<28} {'id':>6} {'level':>5} {'ranks':>5} {'size':>11}")
    for (run, cid, lv), ranks in sorted(groups.items()):
        print(f"{run:<28} {cid:>6} {lv:>5} {len(ranks):>5} {_human(sizes[(run, cid, lv)]):>11}")
    if bad:
        print(f"{bad} file(s) have unreadable headers: run `ftkit verify {root}`")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Carry out ``ftkit verify``: re-hash every file; print damaged ones; return 1 if any is damaged."""
    found = find_manifest(args.dir)
    damaged: list[str] = []
    checked = 0
    if found is not None:
        meta_dir, m = found
        for e in sorted(m.checkpoints, key=lambda e: e.seq):
            n_files = sum(len(e.files) for lv in e.complete_levels if lv in LEVEL_CLASSES)
            checked += n_files
            damaged += [f"checkpoint {e.id} {p}" for p in _check_entry(meta_dir, m, e, deep=True)]
    else:
        for f in _scan(Path(args.dir)):
            checked += 1
            try:
                verify_file(f)
            except (FtkitError, OSError) as exc:
                damaged.append(str(exc))
    for d in damaged:
        print(f"DAMAGED {d}")
    print(f"verified {checked} file(s): {len(damaged)} damaged")
    return 1 if damaged else 0


def add_parser(subparsers: Any) -> None:
    """Register the ``ls`` and ``verify`` subcommands."""
    p = subparsers.add_parser("ls", help="list checkpoints (id, level, ranks, size, complete?)",
                              description="List the checkpoints of a run. DIR: the run's meta_dir, its "
                                          "parent, or its config file.")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=run_ls)
    v = subparsers.add_parser("verify", help="re-hash every checkpoint file; exit 1 if any is damaged",
                              description="Check every file of every committed checkpoint (header, size, "
                                          "xxh3 of every section). Exit code 1 if any file is damaged or "
                                          "missing.")
    v.add_argument("dir", metavar="DIR")
    v.set_defaults(func=run_verify)
    add_rebuild_parser(subparsers)
