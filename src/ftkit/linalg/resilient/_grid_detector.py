"""The failure detectors that resilient calls on a grid share.

The detector of a grid is set up once (issue 33) and reused by every later call on it, whatever their
timeouts. Its set-up survives a process failure: the first detector of a grid is built on the communicator
the grid made for it while every process was alive, with point-to-point messages and ULFM agreements only,
and the survivors of a death during the set-up start with the dead rank marked dead
(:func:`ftkit.failure.setup.set_up_link`, ``survive=True``). A call sets it up only after it saved its
inputs, so a process killed during the set-up is one whose inputs the survivors can read back.
"""

from __future__ import annotations

from ...failure import FailureDetector
from ...failure.ulfm import require_ulfm
from ..grid import ProcessGrid

__all__ = ["detector_for", "reusable_detector", "forget_detector"]

_detectors: dict[int, FailureDetector] = {}


def reusable_detector(grid: ProcessGrid, timeout: float | None) -> FailureDetector | None:
    """Return ``grid``'s detector, set to ``timeout`` (local), or ``None`` if a set-up is needed.

    A detector that has seen a failure is dropped (its communicator contains dead processes).
    """
    det = _detectors.get(grid.context)
    if det is None or det.dead or det.fenced:
        return None
    det.use_timeout(timeout)
    return det


def detector_for(grid: ProcessGrid, timeout: float | None) -> FailureDetector:
    """Return the detector of ``grid`` (collective when one is built), reused by later calls on the grid.

    Reuse saves the round-trip measurement and agreement on every call. A set-up that a process does not
    survive gives the survivors a detector that starts with it dead (on the grid's first detector; see the
    module docstring), which later calls do not reuse.
    """
    det = reusable_detector(grid, timeout)
    if det is None:
        _detectors.pop(grid.context, None)
        det = _build_detector(grid, timeout)
        _detectors[grid.context] = det
    return det


def _build_detector(grid: ProcessGrid, timeout: float | None) -> FailureDetector:
    """Build a detector on ``grid`` (collective), or raise the same ProcessFailure on every live process.

    The ULFM check and the detector's set-up use point-to-point messages with a deadline and ULFM's
    fault-tolerant operations only (:mod:`ftkit.failure.setup`): a process killed at any moment of them
    makes every survivor raise the same error.

    Raises
    ------
    ULFMUnavailable
        On a grid of more than one process, if ULFM does not work for this job.
    ProcessFailure
        Naming the failed ranks every live process agrees on.
    Fenced
        On a process the others declared dead because it missed the set-up's deadline.
    """
    feature = "ftkit's failure-aware multiply (resilient_pdgemm, protect_operands)"
    if grid.size > 1:  # a single process has no peer whose failure it would have to survive
        require_ulfm(grid.comm, feature, timeout=timeout)
    watch = grid.take_watch_comm()
    if watch is not None:  # made while all were alive: a death during the set-up is survived
        return FailureDetector(watch, timeout=timeout, survive=True)
    # a later detector of the grid (after a failure): a fresh communicator (Shrink), a death raises
    return FailureDetector(grid.comm, timeout=timeout)


def forget_detector(grid: ProcessGrid) -> None:
    """Drop ``grid``'s detector (after a failure its communicator holds dead processes: never reuse it)."""
    _detectors.pop(grid.context, None)
