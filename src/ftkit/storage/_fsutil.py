"""The one atomic writer of ftkit, and the small file-system helpers around it.

Every file ftkit writes (checkpoint files, partner copies, parity files, the manifest, the state table, input
store files) goes through :class:`AtomicWriter`: the bytes are written under a temporary name, fsynced, and
renamed to the final name, then the directory is fsynced; a crash never leaves a half-written file under a
name a reader trusts.

Rules a caller may rely on:

* Temporary names are ``.<final name>.<16 random hex digits>.tmp`` (:func:`secrets.token_hex`), created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW``: a file or symbolic link planted at a guessed name is never followed
  nor overwritten (:func:`open_temp` is the only place that opens one).
* Files are created with mode 0600 and directories with 0700 (before the umask), so other local users
  cannot read checkpoints; :func:`set_group_access` switches the whole storage layer to 0640/0750 for
  setups where a group shares the checkpoints.
* A temporary file left by a killed writer is never read (readers open final names only); it is removed
  by the next writer of the same final name and by :func:`remove_file` of that name.
* Early writeback: a writer whose fsync runs in the call (the default) hands each written piece of at least
  :data:`WRITEBACK_MIN_BYTES` to the device at once (:class:`~ftkit.storage._writeback.Writeback`:
  Linux ``sync_file_range`` with ``SYNC_FILE_RANGE_WRITE`` from a helper thread; no durability promise), so
  the disk works while the next piece is copied and hashed and the fsync at commit waits for the tail only,
  not for the whole file at once (issue 37). ``writeback=False`` leaves the bytes to the fsync: for files
  whose fsync is deferred past the call (the L2/L3 files of :class:`BackgroundSyncs`: they must not compete
  for the disk with the files the call makes durable) and for the inline L2/L3 primary file
  (:mod:`ftkit.storage.pending`: its fsync thread already overlaps the exchange). Durability is unchanged:
  only :meth:`AtomicWriter.commit`'s fsync (or the background batch's) makes a file durable.
* Recycling: ``AtomicWriter(recycle=old)`` writes over a file no reader needs any more, under the temporary
  name, reusing its page-cache pages (:mod:`ftkit.storage._recycle`); readers see what a new file shows.
* Direct I/O: ``AtomicWriter(direct=True)`` writes through :class:`~ftkit.storage._direct.DirectStream`
  (``O_DIRECT`` from two aligned staging buffers, bypassing the page cache: faster and steadier for large
  files on this project's disk, issue 37): the first write at offset 0, later writes sequential or inside the
  first write's pages. Where the file system refuses ``O_DIRECT`` the writer writes buffered, silently
  (:attr:`AtomicWriter.direct` tells which). Temporary name, fsync, rename and directory fsync are the same.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from types import TracebackType

import numpy as np

from ..errors import DirectIOUnsupported, StorageError
from ._bgsync import BackgroundSyncs
from ._direct import DirectStream, enable_direct
from ._dirsync import fsync_dir, owe_parent_fsync, remove_empty_dirs
from ._recycle import take_over
from ._writeback import WRITEBACK_MIN_BYTES, Writeback, start_writeback

__all__ = ["AtomicWriter", "atomic_write_bytes", "open_temp", "set_group_access", "file_mode", "dir_mode",
           "fsync_dir", "write_all", "make_dirs", "remove_file", "remove_empty_dirs", "stale_temps",
           "is_temp_name", "link_durably", "BackgroundSyncs", "start_writeback", "WRITEBACK_MIN_BYTES"]

_modes = {"file": 0o600, "dir": 0o700}
_TEMP_TRIES = 8
#: What ``os.link`` raises where the file system cannot give a file a second name (another file system, or
#: one without hard links): :func:`link_durably` then reports False and the caller copies instead.
_NO_HARD_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP,
                           errno.ENOSYS})
def set_group_access(enabled: bool) -> None:
    """Create files 0640 and directories 0750 (``enabled``), or 0600/0700 (the default), from now on.

    The one storage-level switch behind the configuration key ``[ftkit] group_access``; it applies to every
    file and directory the storage layer creates in this process afterwards.
    """
    _modes["file"], _modes["dir"] = (0o640, 0o750) if enabled else (0o600, 0o700)


def file_mode() -> int:
    """Mode (before the umask) of files the storage layer creates."""
    return _modes["file"]


def dir_mode() -> int:
    """Mode (before the umask) of directories the storage layer creates."""
    return _modes["dir"]


def is_temp_name(name: str, final: str | None = None) -> bool:
    """True when ``name`` is a temporary name of :class:`AtomicWriter` (of final name ``final`` if given)."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    stem, _, token = name[1:-4].rpartition(".")
    if len(token) != 16 or any(c not in "0123456789abcdef" for c in token):
        return False
    return final is None or stem == final


def stale_temps(path: Path) -> list[Path]:
    """Temporary files of earlier, interrupted writes of ``path`` (same directory, same final name)."""
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    return [path.parent / n for n in names if is_temp_name(n, path.name)]


def open_temp(path: Path) -> tuple[int, Path]:
    """Create a new temporary file for final name ``path``; return its descriptor and name.

    Opened ``O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name with :func:`file_mode`.

    Raises
    ------
    OSError
        If the file cannot be created (also when random names keep colliding: someone plants them).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_TRIES):
        tmp = _temp_name(path)
        try:
            return os.open(tmp, flags, file_mode()), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: {_TEMP_TRIES} random temporary names already taken")


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


def link_durably(src: Path, dst: Path, *, fsync: bool = True) -> bool:
    """Give the file ``src`` the second name ``dst`` (a hard link), atomically replacing ``dst``, durably.

    The link is made under a temporary name (:func:`open_temp`'s rules), renamed to ``dst``, then ``dst``'s
    directory is fsynced (``fsync``); ``src``'s bytes must already be durable (a committed file). Both names
    then share their bytes: use it only for a ``src`` that is removed right after (``finalize()`` keeping
    the last checkpoint at L4), never to make an independent copy. ``dst``'s directory must exist.

    Returns False, with nothing changed, where the file system cannot link (``src`` and ``dst`` on two file
    systems, or no hard links) or ``src`` is missing: the caller copies instead (and reports a missing file).

    Raises
    ------
    StorageError
        If the link or its rename fails otherwise (e.g. ``EACCES``, ``ENOSPC``); ``dst`` is left as it was.
    """
    for old in stale_temps(dst):
        old.unlink(missing_ok=True)
    for _ in range(_TEMP_TRIES):
        tmp = _temp_name(dst)
        try:
            os.link(src, tmp, follow_symlinks=False)
            break
        except FileExistsError:
            continue
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno in _NO_HARD_LINK:
                return False
            raise StorageError(f"cannot link {src} as {dst}: {exc.strerror or exc}") from exc
    else:
        raise StorageError(f"{dst.parent}: {_TEMP_TRIES} random temporary names already taken")
    try:
        os.replace(tmp, dst)
        if fsync:
            fsync_dir(dst.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot link {src} as {dst}: {exc.strerror or exc}") from exc
    return True


#: Attempts of :func:`make_dirs` when a parent it found is removed meanwhile (an empty directory of a pruned
#: checkpoint, removed by a background removal on this node).
_MKDIR_TRIES = 8


def make_dirs(path: Path, *, defer_parent_fsync: bool = False) -> None:
    """Create ``path`` and missing parents (mode :func:`dir_mode`), fsyncing the parent of each created.

    With ``defer_parent_fsync`` the parent's fsync is owed instead of paid now: the first :func:`fsync_dir`
    of the new directory pays it (a file committed into the directory fsyncs it: its own fsync then has
    already committed the file system's journal, so the owed fsync is cheap; paid now, it waited for
    whatever the journal held, e.g. the previous checkpoint's removal: issue 37). Nothing may claim the
    directory's contents durable before that fsync, which every committed file guarantees.

    Raises
    ------
    OSError
        If a directory cannot be created (also when parents keep being removed meanwhile).
    """
    for attempt in range(_MKDIR_TRIES):
        missing = []
        p = Path(path)
        while not p.exists():
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
        try:
            for d in reversed(missing):
                try:
                    d.mkdir(mode=dir_mode())
                except FileExistsError:
                    continue
                if defer_parent_fsync:
                    owe_parent_fsync(d)
                else:
                    fsync_dir(d.parent)
            return
        except FileNotFoundError:  # a parent found above was removed meanwhile (it was empty): walk again
            if attempt == _MKDIR_TRIES - 1:
                raise


def write_all(fd: int, data: memoryview | bytes, offset: int | None = None) -> None:
    """Write every byte of ``data`` to ``fd`` (at ``offset`` with pwrite, else at the current position)."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        if offset is None:
            n = os.write(fd, view[done:])
        else:
            n = os.pwrite(fd, view[done:], offset + done)
        if n <= 0:  # pragma: no cover - a full disk raises OSError instead
            raise OSError("short write")
        done += n


class AtomicWriter:
    """Write a file under a random temporary name; :meth:`commit` fsyncs and renames it to ``path``.

    Used as a context manager, it commits on normal exit and removes the temporary file on an exception.
    Missing parent directories are created (a replacement node starts with an empty local directory).

    Parameters
    ----------
    path
        Final name of the file.
    fsync
        Make the file and the rename durable on commit (only format tests turn it off).
    writeback
        Hand written pieces to the device at once (see the module doc); default: when ``fsync`` is on. Turn
        it off for a file whose fsync is deferred past the call (``commit(syncs)``).
    direct
        Write with direct I/O (see the module doc) where the file system allows it, else buffered (with
        ``writeback``); :attr:`direct` then says which. For large files written once, front to back.
    recycle
        A file to take over and write in place (see the module doc), if it is a regular file; else (missing,
        a symbolic link) a new file is made. Not with ``direct``.

    Raises
    ------
    StorageError
        If the temporary file cannot be created (naming the cause, e.g. a full disk).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True,
                 writeback: bool | None = None, direct: bool = False,
                 recycle: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.writeback = fsync if writeback is None else writeback
        self._done = False
        self._synced = False  # the bytes written so far are durable (sync() ran after the last pwrite)
        self._size = 0  # bytes written so far, up to the furthest end (a recycled file is cut there)
        try:
            make_dirs(self.path.parent)
            for old in stale_temps(self.path):
                old.unlink(missing_ok=True)
            tmp = _temp_name(self.path)
            taken = take_over(Path(recycle), tmp) if recycle is not None and not direct else None
            self.recycled = taken is not None
            self.fd, self.tmp = (taken, tmp) if taken is not None else open_temp(self.path)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path}: {exc.strerror or exc}") from exc
        self._direct: DirectStream | None = None
        self._was_direct = False
        if direct:
            try:
                enable_direct(self.fd, self.tmp)
                self._direct = DirectStream(self.fd, self.tmp)
            except DirectIOUnsupported:
                pass
        self._wb = Writeback(self.fd) if self.writeback and self._direct is None else None

    @property
    def direct(self) -> bool:
        """True if the bytes went (go) to the file with direct I/O, False if through the page cache."""
        return self._direct.direct if self._direct is not None else self._was_direct

    def pwrite(self, data: np.ndarray | bytes | memoryview, offset: int) -> None:
        """Write ``data`` at byte ``offset`` of the file.

        Raises
        ------
        OSError
            As raised by the system (e.g. ``ENOSPC``).
        """
        self._synced = False
        view = memoryview(data).cast("B")  # type: ignore[arg-type]
        self._size = max(self._size, offset + len(view))
        if self._direct is not None:
            self._direct.write(view, offset)
            return
        write_all(self.fd, view, offset)
        if self._wb is not None:
            self._wb.add(offset, len(view))

    def _end_writeback(self) -> None:
        """Stop handing pieces to the device (before the descriptor is fsynced, handed over or closed)."""
        if self._wb is not None:
            self._wb.close()

    def _finish_direct(self) -> None:
        """Write the direct stream's head and tail and give the file its size (before any fsync).

        Raises
        ------
        OSError
            As a direct write raised it.
        """
        if self._direct is not None:
            stream, self._direct = self._direct, None
            try:
                stream.finish()
            finally:
                self._was_direct = stream.direct

    def sync(self) -> None:
        """fsync the bytes written so far, under the temporary name (:meth:`commit` then skips its fsync).

        May run in another thread than the writes, once they are done (see :mod:`ftkit.storage.pending`).

        Raises
        ------
        OSError
            As raised by ``fsync`` (e.g. ``EIO``).
        """
        if self.fsync and not self._done:
            self._end_writeback()
            self._finish_direct()
            os.fsync(self.fd)
            self._synced = True

    def commit(self, syncs: BackgroundSyncs | None = None) -> None:
        """Make the file durable and visible under its final name.

        With ``syncs``, the file is renamed to its final name first and its fsync (then its directory's) is
        handed to ``syncs``' background thread: the name then stands for bytes that may still be in the page
        cache, which a reader verifying the file's digest detects after a power loss (see
        :class:`BackgroundSyncs`).

        Raises
        ------
        StorageError
            If fsync or rename fails (the temporary file is removed).
        """
        if self._done:
            return
        defer = syncs is not None and self.fsync and not self._synced
        self._end_writeback()
        try:
            if self.recycled:
                os.ftruncate(self.fd, self._size)  # the old file's bytes beyond the new end
            self._finish_direct()
            if self.fsync and not self._synced and not defer:
                os.fsync(self.fd)
            if not defer:
                os.close(self.fd)
                self.fd = -1
            os.replace(self.tmp, self.path)
            self._done = True
            if defer:
                fd, self.fd = self.fd, -1
                syncs.add(fd, self.path.parent)  # type: ignore[union-attr]  # defer implies syncs
            elif self.fsync:
                fsync_dir(self.path.parent)
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot commit {self.path}: {exc.strerror or exc}") from exc

    def abort(self) -> None:
        """Drop the temporary file (the final name is left untouched)."""
        if self._done:
            return
        self._done = True
        self._end_writeback()
        if self._direct is not None:
            self._direct.close()
            self._direct = None
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
        try:
            self.tmp.unlink()
        except OSError:
            pass

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is None:
            self.commit()
        else:
            self.abort()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically and durably through :class:`AtomicWriter`.

    Raises
    ------
    StorageError
        If the file cannot be written (the temporary file is removed; ``path`` is unchanged).
    """
    with AtomicWriter(path, fsync=fsync) as w:
        try:
            w.pwrite(data, 0)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def remove_file(path: Path) -> None:
    """Delete ``path`` if it exists, with the temporary files of interrupted writes of that name."""
    for p in [Path(path), *stale_temps(Path(path))]:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
