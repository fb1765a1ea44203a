"""Path safety in one place: every path built from the configuration or from a manifest goes through here.

Rules a caller may rely on:

* :func:`check_plain_name` accepts a single, non-empty path component made of ``[A-Za-z0-9._-]``, that is
  neither ``.`` nor ``..`` (an ``exec_id``, a node directory name, a variable name).
* :func:`inside` joins parts under a root and returns the resolved path, refusing any result that is not
  strictly below the resolved root (``..`` components, absolute parts, symbolic links leading out).
* :func:`check_removable` is called before anything is removed: the target must be strictly inside its root,
  never the root itself nor one of its parents.

This module imports only :mod:`ftkit.errors`, so every layer may use it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import UnsafePathError

__all__ = ["check_plain_name", "inside", "check_inside", "check_removable"]

_PLAIN_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def check_plain_name(name: object, what: str) -> str:
    """Return ``name`` if it is a plain, single-component file name, else raise.

    Parameters
    ----------
    name
        The candidate (from a config file, a manifest or a command line).
    what
        What the name is, for the message (e.g. ``"exec_id in manifest /m/ftkit.manifest"``).

    Raises
    ------
    UnsafePathError
        If ``name`` is not a string, is empty, ``.`` or ``..``, is longer than 128 characters, or holds a
        character outside ``[A-Za-z0-9._-]`` (``/`` in particular).
    """
    if not isinstance(name, str) or not _PLAIN_NAME_RE.match(name) or name in (".", ".."):
        raise UnsafePathError(f"{what} = {name!r} is not a plain name: use 1-128 characters from "
                              "[A-Za-z0-9._-], not '.' or '..' and no '/'")
    return name


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def check_inside(path: str | os.PathLike[str], root: str | os.PathLike[str], what: str) -> Path:
    """Return ``path`` resolved, after checking that it lies strictly inside ``root`` (also resolved).

    Raises
    ------
    UnsafePathError
        If the resolved path is ``root`` itself or outside it (``..``, an absolute path, a link leading out).
    """
    real_root = _resolved(root)
    real = _resolved(path)
    if real == real_root or real_root not in real.parents:
        raise UnsafePathError(f"{what}: {os.fspath(path)!r} resolves to {str(real)!r}, which is not inside "
                              f"{str(real_root)!r}; refusing to touch it (check the configuration and the "
                              "manifest for '..', absolute paths or symbolic links)")
    return real


def inside(root: str | os.PathLike[str], *parts: str, what: str = "path") -> Path:
    """Join ``parts`` below ``root`` and return the result, checked with :func:`check_inside`.

    The returned path is ``root / parts...`` as given (not resolved), so callers keep the names they
    configured; the check itself resolves links.

    Raises
    ------
    UnsafePathError
        If a part is absolute or the joined path leaves ``root``.
    """
    for part in parts:
        if os.path.isabs(part):
            raise UnsafePathError(f"{what}: {part!r} is an absolute path where a name below "
                                  f"{os.fspath(root)!r} was expected")
    joined = Path(root).joinpath(*parts)
    check_inside(joined, root, what)
    return joined


def check_removable(path: str | os.PathLike[str], root: str | os.PathLike[str], what: str) -> Path:
    """Check before a removal that ``path`` lies strictly inside ``root``; return it resolved.

    Raises
    ------
    UnsafePathError
        If removing ``path`` could remove ``root``, one of its parents, or anything outside it.
    """
    return check_inside(path, root, f"refusing to remove ({what})")
