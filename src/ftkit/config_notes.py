"""How a configuration's notes reach the user: one :class:`~ftkit.errors.ConfigWarning` per job, issued by the
job's first process only (every rank reads the configuration) and pointing at the user's call, not at ftkit's
own source line."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from types import FrameType

from .errors import ConfigWarning
from .mpienv import launch_environment

__all__ = ["issue_notes"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def issue_notes(source: str, notes: Sequence[str]) -> None:
    """Warn once about ``notes`` (what the configuration ``source`` ignores or reinterprets).

    Parameters
    ----------
    source
        Where the configuration came from (a file name, ``<string>``), named in the message.
    notes
        One line per note; nothing is issued when empty, or on any process but the job's first.
    """
    if notes and _first_rank():
        warnings.warn(ConfigWarning(f"{source}: " + "\n  ".join(["configuration notes:", *notes])),
                      stacklevel=_user_stacklevel())


def _first_rank() -> bool:
    """Whether this is a job's first process (or not under MPI), from the launcher's variables."""
    return all(value == 0 for _, value, _ in launch_environment().ranks)


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by this function's caller point at the first frame
    outside ftkit (the user's ``Checkpointer(...)``, ``Config.from_file(...)``...), skipping ftkit's own
    frames and the ``__init__`` that :mod:`dataclasses` generates."""
    level = 1
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE_DIR)
                                 or frame.f_code.co_filename == "<string>"):
        frame, level = frame.f_back, level + 1
    return level
