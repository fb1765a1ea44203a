"""Small filesystem helpers for atomic, durable commits (temporary name → fsync → rename → fsync dir)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "tmp_path_for", "atomic_write_bytes", "write_all", "make_dirs", "remove_file",
           "remove_empty_dirs"]


def tmp_path_for(path: Path) -> Path:
    """Return the temporary name a file is written under before it is renamed to ``path``."""
    return path.with_name(f".{path.name}.tmp.{os.getpid()}")


def fsync_dir(path: Path) -> None:
    """fsync directory ``path`` so a rename or creation inside it is durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent of a created directory."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        fsync_dir(d.parent)


def write_all(fd: int, data: memoryview | bytes, offset: int | None = None) -> None:
    """Write every byte of ``data`` to ``fd`` (at ``offset`` with pwrite, else at the current position)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        if offset is None:
            n = os.write(fd, view[done:])
        else:
            n = os.pwrite(fd, view[done:], offset + done)
        if n <= 0:  # pragma: no cover - a full disk raises OSError instead
            raise OSError("short write")
        done += n


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (temporary name, fsync, rename, fsync dir)."""
    tmp = tmp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove_file(path: Path) -> None:
    """Delete ``path`` if it exists."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def remove_empty_dirs(path: Path, stop: Path) -> None:
    """Remove ``path`` and its parents up to (not including) ``stop`` while they are empty."""
    p = path
    try:
        p.relative_to(stop)
    except ValueError:
        return
    while p != stop and p != p.parent:
        try:
            p.rmdir()
        except OSError:
            return
        p = p.parent
