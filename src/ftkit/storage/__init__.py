"""ftkit's storage layer, by concern: the checkpoint file (:mod:`.format`), where a level's files live
(:mod:`.placement`), the group codes that protect them (:mod:`.groupcode`), the level table
(:mod:`.levels`), the locate-and-rebuild engine and the offline tools on it (:mod:`.repair`), and beside
them the manifest, the input store, the halt record and ``ftkit export``."""

from __future__ import annotations

from ._fsutil import AtomicWriter, atomic_write_bytes, set_group_access
from .format.container import FileInfo, Header, Section, read_arrays, read_header, verify_file, write_file
from .manifest import CheckpointEntry, Manifest, RankFile, read_manifest, write_manifest
from .placement.dirstore import DirectoryStore
from .placement.global_dir import PFSLevel
from .placement.level_storage import StorageLevel
from .placement.node_local import LocalLevel
from .placement.store import Store

__all__ = ["StorageLevel", "LocalLevel", "PFSLevel", "FileInfo", "Header", "Section", "read_arrays",
           "read_header", "verify_file", "write_file", "CheckpointEntry", "Manifest", "RankFile",
           "read_manifest", "write_manifest", "AtomicWriter", "atomic_write_bytes", "set_group_access",
           "Store", "DirectoryStore"]
