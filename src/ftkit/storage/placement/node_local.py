"""L1: each rank's checkpoint file in its node's local directory.

Layout: ``ckpt_dir/node<n>/<exec_id>/l1/ckpt<id>/rank<r>.ftk`` where ``n`` is the rank's node when the
checkpoint was taken. Emulated nodes each have their own ``node<n>`` directory, so deleting it is a node's
storage loss.
"""

from __future__ import annotations

from pathlib import Path

from ...topology import node_dir_name
from .level_storage import FILE_SUFFIX, StorageLevel, ckpt_dir_name
from .store import join_key

__all__ = ["LocalLevel"]


class LocalLevel(StorageLevel):
    """Level 1: node-local checkpoint files."""

    level = 1
    name = "local"
    supports_direct_write = True
    #: Ending of this level's per-rank files (levels laid out like L1 but holding other files override it).
    file_suffix = FILE_SUFFIX

    def node_run_dir(self, node: int) -> Path:
        """``ckpt_dir/node<n>/<exec_id>``: everything this run keeps on node ``node``."""
        return self.store.local_path(self._node_run_key(node))

    def _node_run_key(self, node: int) -> str:
        return join_key(node_dir_name(node), self.exec_id)

    def key(self, ckpt_id: int, rank: int) -> str:
        return join_key(self._node_run_key(self.nodes[rank]), f"l{self.level}", ckpt_dir_name(ckpt_id),
                        f"rank{rank}{self.file_suffix}")

    def stop_key(self, ckpt_id: int, rank: int) -> str:
        return node_dir_name(self.nodes[rank])

    def run_keys(self) -> list[str]:
        return [self._node_run_key(n) for n in sorted(set(self.nodes))]
