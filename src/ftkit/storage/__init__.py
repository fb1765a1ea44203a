"""ftkit's storage layer: the checkpoint container, the manifest, the input store, one module per level."""

from __future__ import annotations

from ._fsutil import AtomicWriter, atomic_write_bytes, set_group_access
from .base import StorageLevel
from .format import FileInfo, Header, Section, read_arrays, read_header, verify_file, write_file
from .local import LocalLevel
from .manifest import CheckpointEntry, Manifest, RankFile, read_manifest, write_manifest
from .pfs import PFSLevel

__all__ = ["StorageLevel", "LocalLevel", "PFSLevel", "FileInfo", "Header", "Section", "read_arrays",
           "read_header", "verify_file", "write_file", "CheckpointEntry", "Manifest", "RankFile",
           "read_manifest", "write_manifest", "AtomicWriter", "atomic_write_bytes", "set_group_access"]
