"""ftkit's checkpointing: the :class:`Checkpointer` API, its pipeline and its recovery chain."""

from __future__ import annotations

from .checkpointer import Checkpointer, CheckpointStatus
from .recovery import RecoveryInfo

__all__ = ["Checkpointer", "CheckpointStatus", "RecoveryInfo"]
