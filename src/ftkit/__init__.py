"""ftkit: fault tolerance for MPI programs in Python.

Multi-level checkpointing in the manner of FTI (``Checkpointer``) and fault-tolerant PBLAS in the manner of
FT-PBLAS (``ftkit.linalg``). This module only re-exports the public API.

``Checkpointer``, ``CheckpointStatus`` and ``RecoveryInfo`` are imported at their first use (PEP 562): they
import ``mpi4py.MPI``, which initializes MPI, and processes that only run ``ftkit launch`` or another
subcommand must not pay an MPI start-up (about 1.3 s with Open MPI 5) nor become an MPI singleton.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _heartbeat, _shm_segments, jobstatus
from .config import Config
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all

if TYPE_CHECKING:
    from .checkpoint import Checkpointer, CheckpointStatus, RecoveryInfo

__version__ = "0.1.0"

__all__ = ["__version__", "Checkpointer", "CheckpointStatus", "Config", "RecoveryInfo", *_errors_all]

_LAZY = ("Checkpointer", "CheckpointStatus", "RecoveryInfo")

jobstatus.register()  # a rank of `ftkit launch` tells it how it ends (nothing elsewhere)
if _heartbeat.wanted():  # ULFM's detector on (plain mpirun too): heartbeats while the program computes
    jobstatus.when_mpi_up(_heartbeat.start)
_shm_segments.register()  # Open MPI's shared-memory files a singleton or a killed peer leaves behind


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module 'ftkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
