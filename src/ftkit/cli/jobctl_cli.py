"""``ftkit halt`` and ``ftkit flush``: act on a run from the job script or a login node.

``ftkit halt META_DIR [--at TIME | --after SECONDS | --cancel | --show]`` writes, removes or shows the halt
record (:mod:`.halt`) that a running job reads at its next exit check; ``ftkit flush META_DIR`` copies the
newest complete checkpoint to L4 and commits it (:mod:`.flush`). ``META_DIR`` is the run's ``meta_dir``, its
parent or its config file, as for ``ftkit ls``.

Exit codes (docs/cli.md): 0 done; 1 ``flush`` found only part of the checkpoint from here; 2 a usage error or
nothing to act on (no run in ``META_DIR``, a halt time in the past, nothing complete to flush), with nothing
changed. ``--json`` prints one JSON object on standard output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..storage._progress import wants_progress
from ..storage.halt import HaltRecord, halt_path, read_halt, remove_halt, who, write_halt
from ..storage.repair.flush import flush_run
from ..storage.repair.locate import RunPlace, locate_run
from ..storage.runactivity import run_activity
from ..walltime import parse_end_time

__all__ = ["add_parser", "run_halt", "run_flush"]


def _run(target: str) -> RunPlace:
    if not Path(target).exists():
        raise StorageError(f"{target}: no such file or directory (give the run's meta_dir, its parent, or "
                           "its config file)")
    place = locate_run(target)
    if place is None:
        raise StorageError(f"no ftkit run in {target} (no manifest.json): give the meta_dir of a run that "
                           "has started (its job writes the manifest at start-up)")
    return place


def _emit(doc: dict[str, Any], code: int) -> int:
    print(json.dumps({**doc, "exit_code": code}))
    return code


def _halt_time(args: argparse.Namespace, now: float) -> float | None:
    if args.after is not None:
        if not args.after > 0:
            raise StorageError(f"--after {args.after}: give a number of seconds > 0 (no option: halt at the "
                               "next step)")
        return now + float(args.after)
    if args.at is not None:
        at = parse_end_time(args.at, "--at")
        if at <= now:
            raise StorageError(f"--at {args.at}: that time is in the past (now is "
                               f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}): nothing was written; give a "
                               "future time, or no option to halt at the next step")
        return at
    return None


def run_halt(args: argparse.Namespace) -> int:
    """Carry out ``ftkit halt``: write (default), cancel or show the run's halt record."""
    place = _run(args.dir)
    meta = place.meta_dir
    current = read_halt(meta)
    if args.show:
        line = current.describe() if current else "no halt record"
        if args.json:
            return _emit({"command": "halt", "action": "show", "meta_dir": str(meta),
                          "record": current.to_json() if current else None}, 0)
        print(f"{meta}: {line}")
        return 0
    if args.cancel:
        pending = current is not None and current.state == "pending"
        if pending:
            remove_halt(meta)
        line = "pending halt cancelled" if pending else (
            "no pending halt to cancel" + (f" ({current.describe()})" if current else ""))
        if args.json:
            return _emit({"command": "halt", "action": "cancel", "meta_dir": str(meta), "cancelled": pending,
                          "record": current.to_json() if current else None}, 0)
        print(f"{meta}: {line}")
        return 0
    now = time.time()
    record = HaltRecord("pending", now, _halt_time(args, now), who())
    write_halt(meta, record)
    if args.json:
        return _emit({"command": "halt", "action": "request", "meta_dir": str(meta),
                      "record": record.to_json()}, 0)
    print(f"{halt_path(meta)}: {record.describe()}; a running job checkpoints and exits at its next exit "
          "check (about two seconds of compute), a job started later at its first")
    return 0


def run_flush(args: argparse.Namespace) -> int:
    """Carry out ``ftkit flush``: exit 0 once the checkpoint is committed at L4, 1 if incomplete from here."""
    place = _run(args.dir)
    act = run_activity(place.meta_dir)
    if act.state == "running":  # a killed job's lock on another host looks live for up to 2 minutes
        print(f"ftkit flush: warning: the run lock says a job may still run ({act.detail}); flush after it "
              "ends, or its next manifest commit hides this one", file=sys.stderr)
    say = (lambda line: None) if args.json else print
    report = flush_run(place, Path(args.ckpt_dir) if args.ckpt_dir else None, log=say,
                       progress=wants_progress(args))
    code = 1 if report.result == "incomplete" else 0
    if args.json:
        return _emit({"command": "flush", **report.to_json()}, code)
    print(report.describe())
    return code


def add_parser(subparsers: Any) -> None:
    """Register the ``halt`` and ``flush`` subcommands."""
    h = subparsers.add_parser(
        "halt", help="ask a running job to checkpoint and exit cleanly (now, at a time, or cancel)",
        description="Write a halt request in the run's meta_dir: a running job checkpoints at [ftkit] "
                    "exit_level and exits cleanly at its next exit check (should_exit()); the job that "
                    "stops for it marks it done. Exit code 2 (nothing written) if META_DIR holds no run or "
                    "the time is in the past.")
    h.add_argument("dir", metavar="META_DIR", help="the run's meta_dir, its parent, or its config file")
    when = h.add_mutually_exclusive_group()
    when.add_argument("--at", default=None, metavar="TIME",
                      help="halt at TIME: ISO 8601 with a zone, or seconds since the epoch")
    when.add_argument("--after", type=float, default=None, metavar="SECONDS", help="halt SECONDS from now")
    when.add_argument("--cancel", action="store_true", help="remove a pending halt request")
    when.add_argument("--show", action="store_true", help="show the halt record")
    h.add_argument("--json", action="store_true", help="print one JSON object instead of text (docs/cli.md)")
    h.set_defaults(func=run_halt)
    f = subparsers.add_parser(
        "flush", help="copy the newest complete checkpoint to L4 after a job (srun on every node)",
        description="Copy the newest complete checkpoint of the run to L4 from wherever it survives (L1 "
                    "files, L2 partner copies, an L3 decode), verify every file and commit level 4 in the "
                    "manifest, so the next job recovers from L4 once node-local disks are purged. "
                    "Idempotent. Exit code 1 if some ranks' files were found nowhere from here, 2 if "
                    "nothing complete survives (nothing changed).")
    f.add_argument("dir", metavar="META_DIR", help="the run's meta_dir, its parent, or its config file")
    f.add_argument("--ckpt-dir", default=None, help="node-local root, if not where the manifest says")
    f.add_argument("--json", action="store_true", help="print one JSON object instead of text (docs/cli.md)")
    f.set_defaults(func=run_flush)
