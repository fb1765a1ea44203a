"""The manifest: the one file that says which checkpoints exist and which of their levels are complete.

``meta_dir/manifest.json`` is written only by application rank 0, always atomically (temporary name, fsync,
rename, fsync dir), and always *after* the files it names are complete: a checkpoint that is not in the
manifest does not exist, whatever files lie around. A level's files are durable when the level is committed,
except the levels listed in the entry's ``extra["unsynced"]`` (L2 partner copies and L3 parity files whose
fsync runs in the background after the commit, see :class:`~ftkit.storage._fsutil.BackgroundSyncs`): such a
level counts for recovery (its files are read and verified like any other) but not for pruning, so the
previous checkpoint complete at that level is kept until the list is cleared. Schema (version 1)::

    {"format": "ftkit-manifest", "version": 1,
     "exec_id": "2026-12-02_16-40-00-ab12", "nranks": 8, "created": 1.7e9, "updated": 1.7e9,
     "status": "running" | "kept",      # "kept": finalize() kept the last checkpoint (keep_last_ckpt = 1)
     "dirs": {"ckpt_dir": "/abs", "glbl_dir": "/abs", "meta_dir": "/abs"},   # where the files are
     "checkpoints": [                    # in commit order (seq increasing)
        {"id": 3, "seq": 2, "level": 4, "time": 1.7e9,
         "levels": {"1": false, "4": true},       # per level: is that level's copy complete on every rank?
         "nodes": [0, 0, 1, 1, ...],              # node of every rank when the checkpoint was taken
         "files": [{"size": 123, "digest": "<16 hex>"}, ...],   # per rank: size and header digest
         "extra": {...}}                          # free for extensions (L3 code, dCP chains, snapshot count,
                                                  # "unsynced": [2] levels not yet durable)
     ]}

A reader may assume: ids are unique; ``files`` has one entry per rank; the file of rank r at any level is
byte-identical to the one described by ``files[r]`` (same size, same header digest).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._paths import check_plain_name
from ..errors import FormatError, StorageError, UnsafePathError
from ._fsutil import atomic_write_bytes

__all__ = ["MANIFEST_NAME", "RankFile", "CheckpointEntry", "Manifest", "read_manifest", "write_manifest",
           "manifest_path", "plan_prune", "ManifestStore"]

MANIFEST_NAME = "manifest.json"
_VERSION = 1


def manifest_path(meta_dir: str | Path) -> Path:
    """Return the path of the manifest in ``meta_dir``."""
    return Path(meta_dir) / MANIFEST_NAME


@dataclass(frozen=True)
class RankFile:
    """One rank's checkpoint file: size (bytes) and header digest (16 hex digits)."""

    size: int
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "digest": self.digest}


@dataclass
class CheckpointEntry:
    """One committed checkpoint."""

    id: int
    seq: int
    level: int
    time: float
    levels: dict[int, bool]
    nodes: list[int]
    files: list[RankFile]
    extra: dict[str, Any] = field(default_factory=dict)

    def complete(self, level: int) -> bool:
        """Whether ``level``'s copy of this checkpoint is complete on every rank."""
        return bool(self.levels.get(level, False))

    @property
    def complete_levels(self) -> list[int]:
        """Levels whose copy is complete, ascending."""
        return sorted(lv for lv, ok in self.levels.items() if ok)

    @property
    def unsynced_levels(self) -> frozenset[int]:
        """Complete levels whose files may not be durable yet (``extra["unsynced"]``, see the module doc)."""
        return frozenset(self.extra.get("unsynced", ()))

    @property
    def total_bytes(self) -> int:
        """Sum of the ranks' file sizes (bytes)."""
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "seq": self.seq, "level": self.level, "time": self.time,
                "levels": {str(k): bool(v) for k, v in sorted(self.levels.items())},
                "nodes": list(self.nodes),
                "files": [f.to_json() for f in self.files], "extra": self.extra}


@dataclass
class Manifest:
    """The whole manifest of one run (see the module docstring for the schema)."""

    exec_id: str
    nranks: int
    created: float
    updated: float = 0.0
    status: str = "running"
    checkpoints: list[CheckpointEntry] = field(default_factory=list)
    dirs: dict[str, str] = field(default_factory=dict)   # ckpt_dir, glbl_dir, meta_dir (absolute)

    def entry(self, ckpt_id: int) -> CheckpointEntry:
        """Return the checkpoint with id ``ckpt_id``; raise KeyError if there is none."""
        for e in self.checkpoints:
            if e.id == ckpt_id:
                return e
        raise KeyError(ckpt_id)

    def newest_first(self) -> list[CheckpointEntry]:
        """Checkpoints, newest (highest seq) first."""
        return sorted(self.checkpoints, key=lambda e: e.seq, reverse=True)

    @property
    def next_id(self) -> int:
        """Smallest id greater than every existing one (1 for an empty manifest)."""
        return max((e.id for e in self.checkpoints), default=0) + 1

    @property
    def next_seq(self) -> int:
        return max((e.seq for e in self.checkpoints), default=0) + 1

    def to_json(self) -> dict[str, Any]:
        return {"format": "ftkit-manifest", "version": _VERSION, "exec_id": self.exec_id,
                "nranks": self.nranks,
                "created": self.created, "updated": self.updated, "status": self.status,
                "dirs": dict(self.dirs), "checkpoints": [e.to_json() for e in self.checkpoints]}

    def dumps(self) -> str:
        """Serialise to JSON text."""
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    @classmethod
    def loads(cls, text: str, where: str = "manifest") -> Manifest:
        """Parse and check manifest JSON text.

        Raises
        ------
        FormatError
            Naming the field that is missing or malformed; any parse failure of the text (deep nesting,
            huge numbers...) is reported as this error too.
        """
        try:
            return _parse(text, where)
        except FormatError:
            raise
        except Exception as exc:  # RecursionError, MemoryError, ValueError, KeyError, TypeError...
            raise FormatError(f"{where}: malformed manifest ({type(exc).__name__}: {_short(exc)}): the "
                              "manifest is damaged") from exc


_MAX_INT = 2**63 - 1
#: Keys ``dirs`` may hold.
DIR_KEYS = ("ckpt_dir", "glbl_dir", "meta_dir")


def _short(v: Any, limit: int = 80) -> str:
    r = str(v)
    return r if len(r) <= limit else r[:limit] + "..."


def _parse(text: str, where: str) -> Manifest:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{where}: not valid JSON ({exc}): the manifest is damaged") from exc
    if not isinstance(doc, dict) or doc.get("format") != "ftkit-manifest":
        raise FormatError(f"{where}: not an ftkit manifest")
    if type(doc.get("version")) is not int or doc.get("version") != _VERSION:
        raise FormatError(f"{where}: manifest version {_short(repr(doc.get('version')))} is not supported "
                          f"(this ftkit reads version {_VERSION})")
    nranks = _nonneg(doc["nranks"], "nranks")
    if nranks == 0:
        raise FormatError(f"{where}: 'nranks' is 0: a run has at least one rank")
    entries = [_parse_entry(e, nranks, where) for e in _list(doc["checkpoints"], "checkpoints")]
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise FormatError(f"{where}: checkpoint id(s) {dup} listed more than once: the manifest is damaged")
    try:
        exec_id = check_plain_name(doc["exec_id"], "exec_id")
    except UnsafePathError as exc:
        raise FormatError(f"{where}: {exc}") from exc
    status = doc.get("status", "running")
    if status not in ("running", "kept"):
        raise FormatError(f"{where}: unknown status {_short(repr(status))}")
    return Manifest(exec_id=exec_id, nranks=nranks, created=_time(doc["created"], "created"),
                    updated=_time(doc.get("updated", 0.0), "updated"), status=status, checkpoints=entries,
                    dirs=_dirs(doc.get("dirs", {}), where))


def _parse_entry(e: Any, nranks: int, where: str) -> CheckpointEntry:
    if not isinstance(e, dict):
        raise FormatError(f"{where}: a checkpoint entry is not an object")
    files = [RankFile(_nonneg(f["size"], "size"), _digest(f["digest"])) for f in _list(e["files"], "files")]
    nodes = [_nonneg(n, "nodes") for n in _list(e["nodes"], "nodes")]
    # A checkpoint may come from another rank count than the run's (written before an elastic restart).
    if len(files) != len(nodes) or not files:
        raise FormatError(f"{where}: checkpoint {_short(e.get('id'))} lists {len(files)} files and "
                          f"{len(nodes)} nodes (one of each per rank)")
    raw_levels = e["levels"]
    if not isinstance(raw_levels, dict) or not all(
            isinstance(k, str) and k.isdigit() and len(k) <= 2 and isinstance(v, bool)
            for k, v in raw_levels.items()):
        raise FormatError(f"{where}: checkpoint {_short(e.get('id'))}: 'levels' is not an object of "
                          "level number -> true/false")
    extra = e.get("extra", {})
    if not isinstance(extra, dict):
        raise FormatError(f"{where}: checkpoint {_short(e.get('id'))}: 'extra' is not an object")
    unsynced = extra.get("unsynced", [])
    # Levels not yet durable are levels of the entry (whatever the level table of this process holds).
    if not isinstance(unsynced, list) or not all(type(lv) is int and str(lv) in raw_levels
                                                 for lv in unsynced):
        raise FormatError(f"{where}: checkpoint {_short(e.get('id'))}: 'extra.unsynced' = "
                          f"{_short(repr(unsynced))} is not a list of the entry's level numbers "
                          f"{sorted(raw_levels, key=int)}")
    return CheckpointEntry(id=_nonneg(e["id"], "id"), seq=_nonneg(e["seq"], "seq"),
                           level=_nonneg(e["level"], "level"), time=_time(e["time"], "time"),
                           levels={int(k): v for k, v in raw_levels.items()}, nodes=nodes, files=files,
                           extra=extra)


def _dirs(dirs: Any, where: str) -> dict[str, str]:
    if not isinstance(dirs, dict):
        raise FormatError(f"{where}: 'dirs' is not an object of paths")
    for key, v in dirs.items():
        if key not in DIR_KEYS:
            raise FormatError(f"{where}: 'dirs' holds unknown key {_short(repr(key))} (allowed: "
                              f"{', '.join(DIR_KEYS)})")
        if not isinstance(v, str) or not os.path.isabs(v) or "\0" in v:
            raise FormatError(f"{where}: dirs.{key} = {_short(repr(v))} is not an absolute path")
    return dict(dirs)


def _list(v: Any, name: str) -> list[Any]:
    if not isinstance(v, list):
        raise FormatError(f"manifest field {name!r} is not a list")
    return v


def _time(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise FormatError(f"manifest field {name!r} = {_short(repr(v))} is not a finite number of seconds")
    return float(v)


def _nonneg(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_INT:
        raise FormatError(f"manifest field {name!r} = {_short(repr(v))} is not a non-negative 64-bit integer")
    return v


def _digest(v: Any) -> str:
    if not isinstance(v, str) or len(v) != 16 or any(c not in "0123456789abcdef" for c in v):
        raise FormatError(f"manifest digest {_short(repr(v))} is not 16 hex digits")
    return v


def read_manifest(meta_dir: str | Path) -> Manifest | None:
    """Read ``meta_dir/manifest.json``; return None if there is none.

    Raises
    ------
    FormatError
        If the manifest exists but is damaged or of another format.
    """
    p = manifest_path(meta_dir)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"{p}: cannot read the manifest: {exc.strerror or exc}") from exc
    return Manifest.loads(text, str(p))


def write_manifest(meta_dir: str | Path, manifest: Manifest) -> None:
    """Commit ``manifest`` to ``meta_dir/manifest.json`` atomically and durably."""
    manifest.updated = time.time()
    try:
        atomic_write_bytes(manifest_path(meta_dir), manifest.dumps().encode())
    except OSError as exc:
        raise StorageError(f"cannot commit the manifest in {meta_dir}: {exc.strerror or exc}") from exc


def plan_prune(manifest: Manifest, *, keep_all_l4: bool = False) -> list[int]:
    """Return the ids of checkpoints no longer needed.

    Kept: the newest checkpoint (whatever its state: its background work may be in flight), and for every
    level the newest checkpoint complete and durable at that level (an older L4 checkpoint survives newer L1
    ones; a level still in ``extra["unsynced"]`` does not count, so an older durable one is kept); with
    ``keep_all_l4`` every checkpoint complete at L4 (FTI's ``keep_l4_ckpt``).
    """
    newest = manifest.newest_first()
    keep: set[int] = set()
    if newest:
        keep.add(newest[0].id)
    seen_levels: set[int] = set()
    for e in newest:
        for lv in e.complete_levels:
            if lv not in seen_levels and lv not in e.unsynced_levels:
                seen_levels.add(lv)
                keep.add(e.id)
        if keep_all_l4 and e.complete(4):
            keep.add(e.id)
    return [e.id for e in manifest.checkpoints if e.id not in keep]


class ManifestStore:
    """The in-memory manifest of a running job, replicated on every rank, written by the writer rank only.

    Every rank applies the same updates in the same order (they are built from collectively gathered data),
    so all ranks agree on the manifest without reading it back; only ``writer`` touches the file. A lock makes
    updates safe from a background post-processing thread.
    """

    def __init__(self, meta_dir: Path, manifest: Manifest, writer: bool) -> None:
        self.meta_dir = Path(meta_dir)
        self.manifest = manifest
        self.writer = writer
        self.lock = threading.RLock()

    def commit(self) -> None:
        """Write the manifest (writer rank only)."""
        with self.lock:
            if self.writer:
                write_manifest(self.meta_dir, self.manifest)

    def add(self, entry: CheckpointEntry) -> None:
        """Add a checkpoint entry (not yet committed)."""
        with self.lock:
            if any(e.id == entry.id for e in self.manifest.checkpoints):
                raise StorageError(f"checkpoint id {entry.id} is already in the manifest")
            self.manifest.checkpoints.append(entry)

    def set_levels(self, ckpt_id: int, levels: dict[int, bool]) -> None:
        """Record which levels of checkpoint ``ckpt_id`` are complete (not yet committed)."""
        with self.lock:
            self.manifest.entry(ckpt_id).levels.update(levels)

    def drop(self, ids: Iterable[int]) -> None:
        """Remove checkpoints ``ids`` from the manifest (not yet committed)."""
        gone = set(ids)
        with self.lock:
            self.manifest.checkpoints = [e for e in self.manifest.checkpoints if e.id not in gone]
