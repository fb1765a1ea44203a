"""The watcher that removes a singleton's Open MPI files once the singleton is gone, however it ended.

Started by :mod:`ftkit._shm_segments` through :func:`ftkit._pipewatch.start_on_pipe` with the arguments
``FILE:DEV:INO ... -- DIR ...``: its standard input a pipe whose only write end the singleton holds; a
session of its own, so a kill of the singleton's process group does not reach it; its working directory
``/``, so it holds no directory anyone may want to remove or unmount. It leaves its parent at once (a second
fork: the singleton never has a child it did not start, and ``os.wait()`` in the application never meets
it). When the pipe reports end-of-file the singleton has ended (by exit, signal, SIGKILL, ``os._exit`` or a
crash) and no longer maps anything; then each FILE is removed if its path still names the same file (device
and inode as the singleton saw it) and each DIR, with the directories directly in it, is removed if empty
(never anything with content). It imports nothing of ftkit.
"""

from __future__ import annotations

import os
import sys


def reap(files: list[str], dirs: list[str]) -> None:
    """Remove the ``PATH:DEV:INO`` files that are still those files, and the empty ``dirs`` (never raises)."""
    for spec in files:
        path, dev, ino = spec.rsplit(":", 2)
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == (int(dev), int(ino)):
                os.unlink(path)
        except (OSError, ValueError):
            pass
    for top in dirs:
        try:
            inner = [os.path.join(top, name) for name in os.listdir(top)]
        except OSError:
            continue
        for path in [*inner, top]:
            try:
                os.rmdir(path)
            except OSError:
                pass


def main(argv: list[str]) -> None:
    """Wait (detached) for end-of-file on standard input, then :func:`reap` the arguments."""
    if os.fork():
        os._exit(0)  # the first child: its parent reaps it at once
    split = argv.index("--") if "--" in argv else len(argv)
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    reap(argv[:split], argv[split + 1:])


if __name__ == "__main__":
    main(sys.argv[1:])
