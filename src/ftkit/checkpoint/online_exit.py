"""How a process with spare ranks ends on an uncaught exception: as a process failure, never a hang.

Without this, a rank whose application raises goes on to interpreter shutdown, where mpi4py calls
``MPI_Finalize``: that waits for the other ranks, which wait (in their next ``ckpt.comm`` call) for this one,
until the launcher's timeout. With ``spare_ranks > 0`` :func:`install` makes :func:`end_on_uncaught` the
process's ``sys.excepthook``. It prints the traceback, then ends the process without ``MPI_Finalize``:

- an application exception (anything but an ftkit or MPI error) before ``finalize()`` while a spare is
  idle: the process SIGKILLs itself, exactly a process failure; the survivors repair and a spare
  takes its place, restored from the newest checkpoint (outside ``ckpt.steps()`` the survivors' ftkit calls
  raise ``ProcessFailure`` instead, which ends them in turn). A transient fault (a bad node, a cosmic ray) is
  survived. A deterministic bug raises again on the replacement at the same step, which consumes the next
  spare; when none is left, every survivor raises the same
  :class:`~ftkit.errors.OnlineRecoveryError` and the checkpoint stays on disk for a relaunch;
- otherwise (an ftkit or MPI error: the same on every rank as a rule, replacing the rank would not help; no
  idle spare; after ``finalize()``): the process SIGKILLs itself too, which the other ranks see as a process
  failure at once (they repair, or raise ``OnlineRecoveryError`` without a spare). It used to exit with
  :data:`EXIT_CODE`: Open MPI's runtime reports an exit without ``MPI_Finalize`` to the survivors only after
  60 s (measured with the PyPI wheel, against 0.5 s for a SIGKILL), which held every survivor that long.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from ..errors import FtkitError

if TYPE_CHECKING:
    from .checkpointer import Checkpointer

__all__ = ["EXIT_CODE", "end_on_uncaught", "install"]

#: Exit code of a process ended by an uncaught exception if its SIGKILL fails (it does not, as a rule).
EXIT_CODE = 1


def install(ckpt: Checkpointer) -> None:
    """Make :func:`end_on_uncaught` (for ``ckpt``) this process's ``sys.excepthook``."""
    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        end_on_uncaught(ckpt, kind, exc, tb)

    sys.excepthook = hook


def replaceable(ckpt: Any, exc: BaseException) -> bool:
    """Whether ``exc`` should end this process as a failure a spare repairs (see the module docstring)."""
    state = getattr(ckpt, "_online", None)
    if state is None or getattr(ckpt, "_finalized", True) or not state.spares:
        return False
    return not isinstance(exc, FtkitError | MPI.Exception) and isinstance(exc, Exception)


def end_on_uncaught(ckpt: Any, kind: type[BaseException], exc: BaseException,
                    tb: TracebackType | None) -> None:
    """End the process after an uncaught exception by a SIGKILL of itself, whether a spare replaces it or
    not (never ``MPI_Finalize``, which would wait for the others). Never returns."""
    replace = replaceable(ckpt, exc)
    rank = getattr(ckpt, "rank", "?")
    traceback.print_exception(kind, exc, tb)
    print(f"ftkit: rank {rank} ended by an uncaught {kind.__name__}; "
          + ("it is replaced by a spare as a failed process (a bug that repeats on the replacement uses up "
             "the spares, then every rank raises OnlineRecoveryError)" if replace else
             "the process ends as a failed process (SIGKILL: the other ranks see a process failure)"),
          file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(EXIT_CODE)
