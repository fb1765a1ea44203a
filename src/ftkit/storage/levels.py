"""The registry of storage levels: level number → implementation, and a factory.

Levels 1 (:class:`LocalLevel`), 2 (:class:`PartnerLevel`, partner copies), 3 (:class:`EncodedLevel`, group
parity files) and 4 (:class:`PFSLevel`). Node-local levels live under ``ckpt_dir``, level 4 under
``glbl_dir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import StorageError
from .base import StorageLevel
from .encoded import EncodedLevel
from .format import DEFAULT_CHUNK
from .local import LocalLevel
from .partner import PartnerLevel
from .pfs import PFSLevel

__all__ = ["LEVEL_CLASSES", "level_root", "make_level"]

#: Storage implementation of each level.
LEVEL_CLASSES: dict[int, type[StorageLevel]] = {1: LocalLevel, 2: PartnerLevel, 3: EncodedLevel, 4: PFSLevel}


def level_root(level: int, ckpt_dir: Path, glbl_dir: Path) -> Path:
    """Root directory of ``level``: ``glbl_dir`` for L4, ``ckpt_dir`` for the node-local levels."""
    return Path(glbl_dir) if level == 4 else Path(ckpt_dir)


def make_level(level: int, ckpt_dir: Path, glbl_dir: Path, exec_id: str, nodes: Sequence[int],
               chunk_bytes: int = DEFAULT_CHUNK) -> StorageLevel:
    """Build the storage of ``level`` for run ``exec_id`` with ranks placed on ``nodes``.

    Raises
    ------
    StorageError
        If no implementation is registered for ``level``.
    """
    cls = LEVEL_CLASSES.get(level)
    if cls is None:
        raise StorageError(f"level {level} is not available in this ftkit (levels: {sorted(LEVEL_CLASSES)})")
    return cls(level_root(level, ckpt_dir, glbl_dir), exec_id, nodes, chunk_bytes=chunk_bytes)
