"""``ftkit ls``, ``ftkit verify`` and ``ftkit rebuild``: inspect, check and repair checkpoints offline.

``DIR`` is a run's ``meta_dir`` (it holds ``manifest.json``, which records where the files are), a directory
one level above it (e.g. a run directory holding ``meta/``, ``local/``, ``global/``), or an FTI-style config
file; ``--root`` reads a moved run's directories under a new place (:mod:`.locate` says where files are
looked for). Without any manifest, the ``.ftk`` files found where a run keeps them (``DIR`` as a run
directory, a ``ckpt_dir`` or a ``glbl_dir``: ``[local/]node<n>/<run>/l<N>/ckpt<id>/`` and
``[global/]<run>/l4/ckpt<id>/``; never the whole tree below ``DIR``) are listed and verified on their own.

Exit codes (docs/cli.md): 0 all is well; 1 damage found (a missing or damaged file, a checkpoint
``rebuild`` could not repair); 2 a usage error or nothing to act on (no such path, no manifest and no
checkpoint file, a manifest without checkpoints, a damaged manifest). ``--json`` prints one JSON object on
standard output instead of the text (its schema is in docs/cli.md); progress is drawn on standard error only
when it is a terminal and ``--json`` is not given.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..errors import CorruptionError, FtkitError, StorageError
from ..storage._progress import Progress, wants_progress
from ..storage.export import __doc__ as export_doc
from ..storage.export import export_checkpoint
from ..storage.format.compressed import stored_size
from ..storage.format.container import read_header, verify_file
from ..storage.levels import make_level, numbers
from ..storage.manifest import MANIFEST_NAME
from ..storage.placement.level_storage import FILE_SUFFIX
from ..storage.repair.checkpoints import GroupRepair, check_entry, entry_files, repair_checkpoint
from ..storage.repair.locate import RunPlace, locate_run
from ..storage.runactivity import run_activity

__all__ = ["add_parser", "run_ls", "run_verify", "run_rebuild", "run_export"]

def _file_patterns() -> tuple[str, ...]:
    """Where a run's files can be below ``DIR`` (run directory, ckpt_dir, glbl_dir), never deeper: a level
    directory of the level table (``l<n>``)."""
    dirs = "l[" + "".join(str(n) for n in numbers()) + "]"
    return tuple(f"{'*/' * depth}{dirs}/ckpt*/*{FILE_SUFFIX}" for depth in range(1, 4))


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _place(args: argparse.Namespace) -> RunPlace | None:
    if not Path(args.dir).exists():
        raise StorageError(f"{args.dir}: no such file or directory (give the run's meta_dir, its parent, or "
                           "its config file)")
    return locate_run(args.dir, getattr(args, "root", None))


def _run_json(place: RunPlace) -> dict[str, Any]:
    m = place.manifest
    if m.status == "kept":
        status, detail = "kept", "finalize() kept the last checkpoint"
    else:
        act = run_activity(place.meta_dir)
        status, detail = act.state, act.detail
    return {"exec_id": m.exec_id, "nranks": m.nranks, "status": status, "status_detail": detail,
            "manifest": str(place.meta_dir / MANIFEST_NAME), "meta_dir": str(place.meta_dir),
            "ckpt_dir": str(place.ckpt_dir), "glbl_dir": str(place.glbl_dir)}


def _emit(doc: dict[str, Any], code: int) -> int:
    print(json.dumps({**doc, "exit_code": code}))
    return code


def run_ls(args: argparse.Namespace) -> int:
    """Carry out ``ftkit ls``: one line per checkpoint (id, level, ranks, size, complete?); exit 1 if a file
    is missing or has the wrong size, 2 if there is nothing to list."""
    place = _place(args)
    if place is None:
        return _ls_files(Path(args.dir), args.json)
    m, run = place.manifest, _run_json(place)
    rows: list[dict[str, Any]] = []
    for e in sorted(m.checkpoints, key=lambda e: e.seq):
        problems = check_entry(place.ckpt_dir, place.glbl_dir, m, e, deep=False)
        rows.append({"id": e.id, "seq": e.seq, "level": e.level, "time": e.time,
                     "levels_complete": list(e.complete_levels),
                     "levels_pending": [lv for lv, ok in sorted(e.levels.items()) if not ok],
                     "levels_unsynced": sorted(e.unsynced_levels), "ranks": len(e.files),
                     "bytes": e.total_bytes, "complete": not problems and bool(e.complete_levels),
                     "problems": problems, **_l4_stored(place, e)})
    code = 1 if any(r["problems"] for r in rows) else 0
    if args.json:
        return _emit({"command": "ls", "run": run, "checkpoints": rows}, code)
    print(f"run {m.exec_id}: {m.nranks} ranks, manifest {run['manifest']}, status {run['status']} "
          f"({run['status_detail']})")
    print(f"{'id':>6} {'level':>5} {'levels complete':<16} {'ranks':>5} {'size':>11}  complete?")
    for r in rows:
        levels = ",".join(f"L{lv}" for lv in r["levels_complete"]) or "-"
        state = "yes" if r["complete"] else "no"
        if r["levels_pending"]:
            state += f" (pending: {','.join(f'L{lv}' for lv in r['levels_pending'])})"
        if r["levels_unsynced"]:
            state += f" (fsync in the background: {','.join(f'L{lv}' for lv in r['levels_unsynced'])})"
        if r.get("l4_ratio", 1.0) != 1.0:
            state += f" (L4 compressed: {_human(r['l4_stored_bytes'])}, ratio {r['l4_ratio']:.2f})"
        if r["problems"]:
            state += f" ({len(r['problems'])} file problem(s), e.g. {r['problems'][0]})"
        print(f"{r['id']:>6} {r['level']:>5} {levels:<16} {r['ranks']:>5} {_human(r['bytes']):>11}  {state}")
    if not rows:
        print("(no checkpoints)")
    return code


def _l4_stored(place: RunPlace, e: Any) -> dict[str, Any]:
    """Bytes the entry's L4 copies take on disk and the compression ratio (logical / stored), if at L4."""
    if not e.complete(4) or e.extra.get("dcp"):
        return {}
    storage = make_level(4, place.ckpt_dir, place.glbl_dir, place.manifest.exec_id, e.nodes)
    try:
        sizes = [stored_size(storage.path(e.id, r)) for r in range(len(e.files))]
    except (FtkitError, OSError):
        return {}
    stored = sum(s for _, s in sizes)
    ratio = round(sum(n for n, _ in sizes) / stored, 4) if stored else 1.0
    return {"l4_stored_bytes": stored, "l4_ratio": ratio}


def _scan(root: Path) -> list[Path]:
    return sorted({p for pattern in _file_patterns() for p in root.glob(pattern) if p.is_file()})


def _ls_files(root: Path, as_json: bool) -> int:
    files = _scan(root)
    groups: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    sizes: dict[tuple[str, int, int], int] = defaultdict(int)
    bad = []
    for f in files:
        try:
            h = read_header(f)
        except FtkitError:
            bad.append(str(f))
            continue
        key = (h.exec_id, h.ckpt_id, h.level)
        groups[key].append(h.rank)
        sizes[key] += h.file_size
    code = 2 if not files else 1 if bad else 0
    rows: list[dict[str, Any]] = [
        {"exec_id": run, "id": cid, "level": lv, "ranks": len(ranks), "bytes": sizes[(run, cid, lv)]}
        for (run, cid, lv), ranks in sorted(groups.items())]
    if as_json:
        return _emit({"command": "ls", "run": None, "files": len(files), "unreadable": bad,
                      "checkpoints": rows}, code)
    if not files:
        print(f"no ftkit manifest or checkpoint files in {root} (looked where a run keeps them: "
              f"{', '.join(_file_patterns())})")
        return code
    print(f"no manifest under {root}: listing {len(files)} checkpoint file(s) (completeness unknown)")
    print(f"{'run':<28} {'id':>6} {'level':>5} {'ranks':>5} {'size':>11}")
    for r in rows:
        print(f"{r['exec_id']:<28} {r['id']:>6} {r['level']:>5} {r['ranks']:>5} {_human(r['bytes']):>11}")
    if bad:
        print(f"{len(bad)} file(s) have unreadable headers: run `ftkit verify {root}`")
    return code


def run_verify(args: argparse.Namespace) -> int:
    """Carry out ``ftkit verify``: re-hash every file; print damaged ones; exit 1 if any is damaged, 2 if
    there is no file to verify."""
    place = _place(args)
    damaged: list[dict[str, Any]] = []
    if place is not None:
        m = place.manifest
        entries = sorted(m.checkpoints, key=lambda e: e.seq)
        paths = [p for e in entries for p in entry_files(place.ckpt_dir, place.glbl_dir, m, e)]
    else:
        paths = _scan(Path(args.dir))
    with Progress("verify", len(paths), sum(_size(p) for p in paths), wants_progress(args)) as prog:
        def done(path: Path) -> None:
            prog.add(_size(path), 1)

        if place is not None:
            for e in entries:
                damaged += [{"checkpoint": e.id, "problem": p} for p in
                            check_entry(place.ckpt_dir, place.glbl_dir, m, e, deep=True, done=done)]
        else:
            for f in paths:
                try:
                    verify_file(f)
                except (FtkitError, OSError) as exc:
                    damaged.append({"checkpoint": None, "problem": str(exc)})
                done(f)
    code = 2 if not paths else 1 if damaged else 0
    if args.json:
        return _emit({"command": "verify", "run": _run_json(place) if place else None,
                      "files": len(paths), "bytes": sum(_size(p) for p in paths), "damaged": damaged}, code)
    for d in damaged:
        where = "" if d["checkpoint"] is None else f"checkpoint {d['checkpoint']} "
        print(f"DAMAGED {where}{d['problem']}")
    print(f"verified {len(paths)} file(s): {len(damaged)} damaged"
          + ("" if paths else f" (nothing to verify in {args.dir})"))
    return code


def run_rebuild(args: argparse.Namespace) -> int:
    """Carry out ``ftkit rebuild``: repair every L2/L3 group, then check the rest; exit 0 if every
    checkpoint considered is whole afterwards, 1 if some could not be repaired, 2 if there is none."""
    place = _place(args)
    if place is None:
        raise StorageError(f"no ftkit manifest under {args.dir}: give the run's meta_dir, its parent, or its "
                           "config file")
    m = place.manifest
    ckpt, glbl = (Path(args.ckpt_dir) if args.ckpt_dir else place.ckpt_dir), place.glbl_dir
    entries = m.newest_first()
    if args.id is not None:
        entries = [e for e in entries if e.id == args.id]
        if not entries:
            raise StorageError(f"checkpoint {args.id} is not in the manifest of run {m.exec_id}: "
                               "see `ftkit ls`")
    # L1 and L2/L3 files are checked (and repaired) group by group; the other levels afterwards.
    plan = [(e, [lv for lv in (2, 3) if e.complete(lv)]) for e in entries]
    rest = [(e, [lv for lv in e.complete_levels if not (red and lv <= 3)]) for e, red in plan]
    paths = [p for e, red in plan for lv in red for p in entry_files(ckpt, glbl, m, e, (1, lv))]
    paths += [p for e, levels in rest for p in entry_files(ckpt, glbl, m, e, levels)]
    say = (lambda line: None) if args.json else print
    groups: list[GroupRepair] = []
    unrepaired: list[dict[str, Any]] = []
    with Progress("rebuild", len(paths), sum(_size(p) for p in paths), wants_progress(args)) as prog:
        def done(path: Path) -> None:
            prog.add(_size(path), 1)

        for e, red in plan:
            if red:
                groups += repair_checkpoint(ckpt, glbl, m, e, args.group_size, log=say, done=done)
        for e, levels in rest:
            problems = check_entry(ckpt, glbl, m, e, deep=True, levels=levels, done=done)
            if problems:
                unrepaired.append({"checkpoint": e.id, "problems": problems})
    failed = sorted({g.checkpoint for g in groups if g.result == "failed"} |
                    {u["checkpoint"] for u in unrepaired})
    code = 2 if not entries else 1 if failed else 0
    if args.json:
        return _emit({"command": "rebuild", "run": _run_json(place),
                      "groups": [g._asdict() for g in groups], "unrepaired": unrepaired,
                      "failed_checkpoints": failed}, code)
    for u in unrepaired:
        print(f"checkpoint {u['checkpoint']}: CANNOT REPAIR: {len(u['problems'])} damaged or missing "
              f"file(s) that no L2/L3 redundancy rebuilds, e.g. {u['problems'][0]}")
    if not entries:
        print(f"run {m.exec_id}: no checkpoint: nothing to rebuild")
    else:
        print(f"rebuild of run {m.exec_id}: {len(entries)} checkpoint(s), "
              + (f"could not repair {', '.join(map(str, failed))}" if failed else "all whole"))
    return code


def run_export(args: argparse.Namespace) -> int:
    """Carry out ``ftkit export`` (:func:`.export.export_checkpoint`); exit 1 if a file is damaged."""
    fmt, out = args.to
    if fmt not in ("hdf5", "npy"):
        raise StorageError(f"--to {fmt}: use --to hdf5 OUT.h5 or --to npy OUTDIR")
    _place(args)  # a missing DIR is a usage error (2)
    try:
        with Progress("export", 0, 0, wants_progress(args)) as prog:
            attrs = export_checkpoint(args.dir, fmt, out, args.id, root=args.root, progress=prog)
    except CorruptionError as exc:
        if args.json:
            return _emit({"command": "export", "error": str(exc)}, 1)
        print(f"ftkit export: damaged: {exc}")
        return 1
    if args.json:
        return _emit({"command": "export", "format": fmt, "out": str(out), "datasets": prog.files,
                      "bytes": _tree_size(Path(out)), "attributes": attrs}, 0)
    print(f"exported checkpoint {attrs['checkpoint_id']} (level {attrs['level']}) of run {attrs['run_id']} "
          f"to {out}")
    return 0


def _tree_size(path: Path) -> int:
    return sum(_size(p) for p in path.rglob("*")) if path.is_dir() else _size(path)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="the run's meta_dir, its parent, or its config file")
    p.add_argument("--root", default=None, metavar="NEW",
                   help="the run was moved: read its recorded directories under NEW (relative to the "
                        "deepest directory holding all of them)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text (docs/cli.md)")


def add_parser(subparsers: Any) -> None:
    """Register the ``ls``, ``verify`` and ``rebuild`` subcommands."""
    p = subparsers.add_parser("ls", help="list checkpoints (id, level, ranks, size, complete?)",
                              description="List the checkpoints of a run and whether its job still runs. "
                                          "Exit code 0, 1 if a file is missing or has the wrong size, 2 if "
                                          "there is nothing to list.")
    _add_common(p)
    p.set_defaults(func=run_ls)
    v = subparsers.add_parser("verify", help="re-hash every checkpoint file; exit 1 if any is damaged",
                              description="Check every file of every committed checkpoint (header, size, "
                                          "xxh3 of every section). Exit code 1 if any file is damaged or "
                                          "missing, 2 if there is no file to verify.")
    _add_common(v)
    v.set_defaults(func=run_verify)
    r = subparsers.add_parser(
        "rebuild", help="repair missing or damaged checkpoint files offline from their L2/L3 redundancy",
        description="Rebuild the missing or damaged L1 files of a run's checkpoints from their partner "
                    "copies (L2) or by decoding their group (L3), and re-create lost copies and parity "
                    "files; then check every other file. Needs every node-local directory visible from "
                    "here (e.g. emulated nodes). Exit code 1 if some checkpoint could not be repaired "
                    "(each is reported), 2 if the run has no checkpoint.")
    _add_common(r)
    r.add_argument("--id", type=int, default=None, help="only this checkpoint (default: every one)")
    r.add_argument("--group-size", type=int, default=None,
                   help="group size, if the manifest does not record it (default 4)")
    r.add_argument("--ckpt-dir", default=None, help="node-local root, if it moved since the run")
    r.set_defaults(func=run_rebuild)
    e = subparsers.add_parser("export", help="write a checkpoint's arrays to HDF5 or .npy files",
                              description=(export_doc or "").splitlines()[0] + " Exit code 1 if a file "
                              "is damaged, 2 if there is nothing to export or OUT exists.")
    _add_common(e)
    e.add_argument("--to", nargs=2, metavar=("FORMAT", "OUT"), required=True,
                   help="hdf5 OUT.h5, or npy OUTDIR")
    e.add_argument("--id", type=int, default=None, help="checkpoint id (default: the newest complete one)")
    e.set_defaults(func=run_export)
