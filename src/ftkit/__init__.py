"""ftkit: fault tolerance for MPI programs in Python.

Multi-level checkpointing in the manner of FTI (``Checkpointer``) and fault-tolerant PBLAS in the manner of
FT-PBLAS (``ftkit.linalg``). This module only re-exports the public API.
"""

from __future__ import annotations

from .checkpoint import Checkpointer, CheckpointStatus, RecoveryInfo
from .config import Config
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

__all__ = ["__version__", "Checkpointer", "CheckpointStatus", "Config", "RecoveryInfo", *_errors_all]
