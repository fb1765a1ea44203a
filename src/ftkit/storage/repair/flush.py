"""``ftkit flush``: after a job, copy the newest complete checkpoint to L4 so the next job recovers from it
even when the node-local disks are purged (SCR's ``scr_postrun`` / ``scr_flush``).

For the newest checkpoint the manifest records as complete at some level (:func:`flush_run`):

1. Already complete at L4 and every L4 file verifies: nothing to do (the command is idempotent).
2. Every rank whose L4 file is missing or does not verify gets it from the first copy found here that
   verifies against the manifest's digest: its L1 file, else its L2 partner copy (held by the next member of
   its group). It is copied as a job's post-processing L4 copy is, by the L4 level's
   :meth:`~ftkit.storage.placement.level_storage.StorageLevel.put_file` (temporary name, fsync, rename;
   large files with direct I/O), then verified again and evicted from this node's page cache.
3. Ranks still missing, when the checkpoint is complete at L2 or L3: the offline repair engine
   (:func:`.repair.repair_checkpoint`, the one ``ftkit rebuild`` uses) rebuilds their L1 files from partner
   copies or by decoding their group, where the group's node directories are visible; then step 2 again.
4. Every rank's L4 file present and verified: level 4 is committed in the manifest, read again and rewritten
   atomically under an exclusive lock (``meta_dir/ftkit.flush.lock``), so concurrent ``srun ftkit flush``
   processes on every node never lose each other's update: each copies what its node holds, and whichever
   finishes last sees every file and commits.

A node sees only its own node-local directory on a cluster, so ``srun --ntasks-per-node=1 ftkit flush`` copies
each node's files; a node lost with its disk needs its L2 copies (on the partner's node) or one process that
sees the surviving group members (emulated nodes, directories gathered on one machine) for an L3 decode.
Nothing else in the manifest changes: the next job's recovery tries the cheapest level first and, its
node-local files gone, reads L4.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._paths import check_inside
from ...errors import FtkitError, StorageError
from .._progress import Progress
from ..format.container import verify_file
from ..levels import make_level
from ..manifest import CheckpointEntry, Manifest, read_manifest, write_manifest
from .checkpoints import check_entry, group_levels, repair_checkpoint
from .copies import RunCopies, source_levels
from .locate import RunPlace

__all__ = ["FlushReport", "flush_run", "LOCK_NAME"]

LOCK_NAME = "ftkit.flush.lock"


@dataclass
class FlushReport:
    """What :func:`flush_run` did. ``result``: ``already`` (was at L4), ``flushed`` (level 4 committed now),
    ``incomplete`` (some ranks' files found nowhere from here)."""

    exec_id: str
    checkpoint: int
    result: str = "incomplete"
    copied: list[dict[str, int]] = field(default_factory=list)     # {"rank": r, "from_level": lv}
    rebuilt: list[str] = field(default_factory=list)                # lines of the repair engine
    missing: list[int] = field(default_factory=list)                # ranks with no L4 file yet

    def describe(self) -> str:
        """The summary line ``ftkit flush`` prints."""
        what = f"run {self.exec_id} checkpoint {self.checkpoint}"
        if self.result == "already":
            return f"{what}: already complete at L4, every file verified: nothing to do"
        from_lv = sorted({c["from_level"] for c in self.copied})
        copied = (f"copied {len(self.copied)} rank file(s) to L4 from "
                  f"{', '.join(f'L{lv}' for lv in from_lv)}" if self.copied else "copied nothing")
        if self.result == "flushed":
            return f"{what}: {copied}; every L4 file verified; level 4 committed in the manifest"
        return (f"{what}: {copied}; INCOMPLETE: no verified copy of rank(s) {self.missing} found from here "
                "(on a cluster run `srun --ntasks-per-node=1 ftkit flush` so every node adds its files; "
                "the last one commits)")

    def to_json(self) -> dict[str, Any]:
        """The report as ``ftkit flush --json`` prints it (docs/cli.md)."""
        return {"exec_id": self.exec_id, "checkpoint": self.checkpoint, "result": self.result,
                "copied": self.copied, "rebuilt": self.rebuilt, "missing": self.missing}


def _verifies(path: Path, digest: str) -> bool:
    try:
        verify_file(path, expect_digest=digest)
        return True
    except (FtkitError, OSError):
        return False


def _drop_cached(path: Path) -> None:
    """Evict ``path``'s pages from this node's page cache: the next job reads its L4 files, maybe on other
    nodes, and the verification that just read this one must not leave it taking memory here."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _copy_missing(place: RunPlace, m: Manifest, e: CheckpointEntry, ranks: list[int],
                  ckpt_dir: Path, report: FlushReport, progress: Progress | None = None) -> list[int]:
    """Copy the L4 file of each of ``ranks`` from a verified node-local copy (its L1 file, then its L2
    partner copy: :class:`.copies.RunCopies`, the one lookup of a rank's copies); return the ranks left."""
    copies = RunCopies(ckpt_dir, place.glbl_dir, m.exec_id, e)
    l4 = make_level(4, ckpt_dir, place.glbl_dir, m.exec_id, e.nodes)
    local = copies.node_local(source_levels())
    left = []
    for r in ranks:
        digest = e.files[r].digest
        for lv in copies.present(r, local):
            src = copies.path(lv, r)
            if _verifies(src, digest):
                dst = l4.path(e.id, r)
                check_inside(dst, place.glbl_dir, f"checkpoint {e.id} L4 rank {r}")
                l4.put_file(e.id, r, src)   # as the checkpoint's own L4 copy: direct I/O for large files
                if _verifies(dst, digest):
                    _drop_cached(dst)
                    report.copied.append({"rank": r, "from_level": lv})
                    if progress is not None:
                        progress.add(e.files[r].size, 1)
                    break
        else:
            left.append(r)
    return left


def _missing_at_l4(place: RunPlace, m: Manifest, e: CheckpointEntry) -> list[int]:
    l4 = make_level(4, place.ckpt_dir, place.glbl_dir, m.exec_id, e.nodes)
    return [r for r, f in enumerate(e.files) if not _verifies(l4.path(e.id, r), f.digest)]


def commit_level4(meta_dir: Path, exec_id: str, ckpt_id: int) -> None:
    """Mark checkpoint ``ckpt_id`` complete at L4 in ``meta_dir``'s manifest, under the flush lock.

    Raises
    ------
    StorageError
        If the manifest changed run or lost that checkpoint meanwhile (nothing is written), or the lock or
        the manifest cannot be written.
    """
    lock = Path(meta_dir) / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StorageError(f"{lock}: cannot open the flush lock: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        m = read_manifest(meta_dir)
        if m is None or m.exec_id != exec_id or not any(e.id == ckpt_id for e in m.checkpoints):
            raise StorageError(f"{meta_dir}: the manifest no longer lists checkpoint {ckpt_id} of run "
                               f"{exec_id} (a job started meanwhile?): nothing committed")
        entry = m.entry(ckpt_id)
        if not entry.complete(4):
            entry.levels[4] = True
            write_manifest(meta_dir, m)
    finally:
        os.close(fd)  # releases the lock


def flush_run(place: RunPlace, ckpt_dir: Path | None = None, log: Any = print,
              progress: bool = False) -> FlushReport:
    """Copy the newest complete checkpoint of the run at ``place`` to L4 and commit it (see the module doc).

    Parameters
    ----------
    place
        The run (:func:`.locate.locate_run`).
    ckpt_dir
        The node-local root, if not where the manifest says.
    log
        Called with one line per repaired group.
    progress
        Draw a progress bar of the files copied to L4 (files and bytes, rate, time left) on standard error.

    Raises
    ------
    StorageError
        If the manifest lists no complete checkpoint, or no file of it survives anywhere visible from here
        and it is not at L4 (nothing is changed then).
    """
    m, ckpt = place.manifest, ckpt_dir or place.ckpt_dir
    complete = [e for e in m.newest_first() if e.complete_levels]
    if not complete:
        raise StorageError(f"run {m.exec_id}: no complete checkpoint in the manifest "
                           f"({place.meta_dir}): nothing to flush")
    e = complete[0]
    report = FlushReport(m.exec_id, e.id)
    if e.complete(4) and not check_entry(ckpt, place.glbl_dir, m, e, deep=True, levels=[4]):
        report.result = "already"
        return report
    missing = _missing_at_l4(place, m, e)
    with Progress("flush", len(missing), sum(e.files[r].size for r in missing), progress) as prog:
        missing = _copy_missing(place, m, e, missing, ckpt, report, prog)
        if missing and any(e.complete(lv) for lv in group_levels()):
            groups = repair_checkpoint(ckpt, place.glbl_dir, m, e, log=log)
            report.rebuilt = [g.describe() for g in groups if g.result != "intact"]
            missing = _copy_missing(place, m, e, missing, ckpt, report, prog)
    report.missing = missing
    if not missing:
        commit_level4(place.meta_dir, m.exec_id, e.id)
        report.result = "flushed"
    elif len(missing) == len(e.files) and not report.copied:
        raise StorageError(f"run {m.exec_id} checkpoint {e.id} (the newest complete one): no verified copy "
                           f"of any rank's file survives at L1/L2/L3/L4 visible from here ({ckpt}, "
                           f"{place.glbl_dir}): nothing to flush, nothing changed")
    return report
