"""Background fsyncs of files already under their final names (the L2 partner copies and L3 parity files of
a checkpoint, issue 37), run by one kept thread of the process once their batch is sealed.

:meth:`ftkit.storage._fsutil.AtomicWriter.commit` ``(syncs)`` renames a file and hands its descriptor here.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ._dirsync import fsync_dir
from ._writeback import KeptThread

__all__ = ["BackgroundSyncs"]


class BackgroundSyncs:
    """The fsyncs of files already under their final names, run one after the other by the process's kept
    background fsync thread (:class:`~ftkit.storage._writeback.KeptThread`) once the batch is sealed.

    A checkpoint level whose copies may reach the disk after the checkpoint is committed (L2 partner copies,
    L3 parity files: the files are readable at once, from the page cache, by any process of the node) commits
    them with :meth:`~ftkit.storage._fsutil.AtomicWriter.commit` ``(syncs)``; the caller seals the batch when
    its own critical work is done (so these fsyncs do not compete with it), and :meth:`wait` then tells
    whether every file, and its directory entry, is durable. The caller keeps the previous checkpoint until
    it is.
    """

    def __init__(self) -> None:
        self._files: list[tuple[int, Path]] = []
        self._lock = threading.Lock()
        self._done: threading.Event | None = None   # set once the sealed batch's fsyncs are over
        self._sealed = False
        self._error: OSError | None = None

    def add(self, fd: int, directory: Path) -> None:
        """fsync open file ``fd`` (this object owns it from now on and closes it), then ``directory``.

        On a sealed batch the fsyncs run now, in the caller.

        Raises
        ------
        OSError
            Only on a sealed batch, as raised by ``fsync`` (``fd`` is closed anyway).
        """
        with self._lock:
            if not self._sealed:
                self._files.append((fd, directory))
                return
        _sync_and_close(fd, directory)

    def _run(self) -> None:
        for fd, directory in self._files:
            try:
                _sync_and_close(fd, directory)
            except OSError as exc:
                self._error = self._error or exc

    def seal(self) -> None:
        """Accept no more files and start the fsyncs of those added, in the background. Idempotent."""
        with self._lock:
            if self._sealed:
                return
            self._sealed = True
            if self._files:
                self._done = _SYNC_THREAD.put(self._run)

    def wait(self) -> OSError | None:
        """Seal, wait until every file added is durable, and return the first failure (None: all are).

        The wait is on this process's own fsyncs (no peer): it has no deadline.
        """
        self.seal()
        if self._done is not None:
            self._done.wait()
        return self._error


_SYNC_THREAD = KeptThread("ftkit-redundancy-fsync")


def _sync_and_close(fd: int, directory: Path) -> None:
    """fsync open file ``fd``, then ``directory``; ``fd`` is closed whatever happens (OSError as raised)."""
    try:
        os.fsync(fd)
        fsync_dir(directory)
    finally:
        os.close(fd)
