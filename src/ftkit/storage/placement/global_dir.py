"""L4: each rank's checkpoint file on the parallel file system.

Layout: ``glbl_dir/<exec_id>/l4/ckpt<id>/rank<r>.ftk``. Written straight from the protected arrays when
``inline_l4 = 1``, else copied from the L1 file by post-processing (a flush). An inline file of 64 MiB
or more is written with direct I/O where the file system allows it (issue 37: faster and steadier than
through the page cache on this project's disk; see :mod:`ftkit.storage._direct`).
"""

from __future__ import annotations

from .level_storage import FILE_SUFFIX, StorageLevel, ckpt_dir_name
from .store import join_key

__all__ = ["PFSLevel"]


class PFSLevel(StorageLevel):
    """Level 4: checkpoint files on the parallel file system (``glbl_dir``)."""

    level = 4
    name = "pfs"
    supports_direct_write = True
    bypass_page_cache = True

    def key(self, ckpt_id: int, rank: int) -> str:
        return join_key(self.exec_id, f"l{self.level}", ckpt_dir_name(ckpt_id), f"rank{rank}{FILE_SUFFIX}")

    def run_keys(self) -> list[str]:
        return [self.exec_id]
