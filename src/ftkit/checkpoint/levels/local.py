"""L1, node-local: each rank's file in its node's directory under ``ckpt_dir``.

L1 is only ever a primary level (written straight from the protected arrays by
:func:`ftkit.checkpoint.pipeline.write_primary`): it has no post-processing. Its recovery step reads the
rank's own file, verified against the manifest.
"""

from __future__ import annotations

from ..contract import Level, LevelFileStep

__all__ = ["LEVEL", "LocalStep"]


class LocalStep(LevelFileStep):
    """L1: the rank's node-local file."""

    level = 1


#: Level 1 in the level table.
LEVEL = Level(1, "local", recovery=(LocalStep,))
