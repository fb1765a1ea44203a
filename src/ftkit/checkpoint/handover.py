"""What each session hands to the next: the records of online recovery that outlive a session (the job's
:class:`OnlineState`, its :class:`ShrinkState`) and the reports of each recovery (:class:`RepairReport`,
:class:`ShrinkReport`; ``ckpt.recoveries`` and ``ckpt.shrinks`` list them).

A :class:`~ftkit.checkpoint.session.Session` is replaced as a whole at every online recovery
(:mod:`ftkit.checkpoint.online`); these records pass from each session to the next, mutated in place and
never rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from .._wait import deadline_after, wait_requests
from ..failure.replace import Rebuilt

__all__ = ["OnlineState", "RepairReport", "ShrinkState", "ShrinkReport", "OnShrink", "format_phases",
           "RELEASE_TAG"]

#: Tag of the message that releases idle spares at the end of the job (on the world communicator).
RELEASE_TAG = 32011

#: The application's callback: gets the new (smaller) ``ckpt.comm``, re-protects every array.
OnShrink = Callable[[Any], None]


def format_phases(phases: dict[str, float]) -> str:
    """``repair=0.120 s, adopt=0.010 s, restore=0.300 s``: phase durations for a ``repr``."""
    return ", ".join(f"{name}={seconds:.3f} s" for name, seconds in phases.items())


@dataclass(repr=False)
class RepairReport:
    """One online recovery: which ranks died, what was restored, and how long each phase took
    (:meth:`phases`, :attr:`seconds`; the fields ``detected`` ... ``restored`` are when each phase ended,
    ``time.perf_counter`` seconds, ``detected`` being when this process saw the failure). Its ``repr``
    shows the durations, not the raw clock values.

    ``number`` counts the job's online recoveries (1 for the first), the same on every rank. The job is
    exposed (a further failure in the same group is not survivable) from the failure until ``restored``:
    the restore rebuilds the lost node's files, partner copies and parity of the restored checkpoint on the
    new layout (recovery's L2/L3 steps); after a restore from L4, until the next L2/L3 checkpoint.
    """

    number: int = 0
    dead: tuple[int, ...] = ()
    detected: float = 0.0
    rebuilt: float = 0.0
    adopted: float = 0.0
    restored: float = 0.0
    checkpoint_id: int = 0
    level: int = 0

    def phases(self) -> dict[str, float]:
        """Seconds per phase: repair (agreement, shrink, spare promotion), adopt (the new communicator set
        up), restore (the arrays read back and the lost files, copies and parity rebuilt); a phase not
        reached yet counts 0."""
        ends = [self.detected, self.rebuilt, self.adopted, self.restored]
        return {name: max(0.0, end - start) if end and start else 0.0
                for name, start, end in zip(("repair", "adopt", "restore"), ends, ends[1:], strict=False)}

    @property
    def seconds(self) -> float:
        """Seconds from the failure's detection to the end of the restore (the phases' sum)."""
        return sum(self.phases().values())

    def __repr__(self) -> str:
        return (f"RepairReport(number={self.number}, dead={self.dead}, checkpoint_id={self.checkpoint_id}, "
                f"level={self.level}, {format_phases(self.phases())}, total={self.seconds:.3f} s)")


@dataclass
class OnlineState:
    """A job's online-recovery state (one per Checkpointer when ``spare_ranks > 0`` or the loop watches
    for failures; handed from session to session)."""

    world: Any                    # every live process of the job, error-returning
    napp: int
    spares: tuple[int, ...]       # world positions of the idle spares
    rank: int = 0                 # this process's application rank in the next repair (after a shrink: new)
    informed: bool = True         # this rank holds the run's state (a fresh replacement does not)
    fenced: bool = False          # a repair happened in this iteration: the data is restored next
    in_loop: bool = False
    rebuilt: Rebuilt | None = None
    adopted: Rebuilt | None = None    # the repair whose communicator this rank has adopted
    fresh: bool = False               # a replacement not yet restored (the dead rank's files are not its own)
    report: RepairReport = field(default_factory=RepairReport)
    history: list[RepairReport] = field(default_factory=list)
    recoveries: int = 0               # online recoveries of the job so far (agreed at each adoption)
    left: str = ""                    # the loop was left in a fenced iteration: why every call is refused
    exit_hold: Any = None             # an idle spare's exit policy: the signals it held (..exitpolicy)

    def release_spares(self, timeout: float) -> None:
        """On application rank 0 at the end of the job: tell every idle spare to leave (best effort)."""
        if self.rank != 0 or not self.spares:
            return
        one = np.ones(1, np.int64)
        try:
            reqs = [self.world.Isend(one, dest=pos, tag=RELEASE_TAG) for pos in self.spares]
            wait_requests(reqs, deadline_after(timeout), "releasing the spares")
        except (MPI.Exception, Exception):  # noqa: BLE001 - a dead spare needs no release
            pass


@dataclass(repr=False)
class ShrinkReport:
    """One continuation on fewer ranks: communicator sizes before and after, the ranks (of the old
    communicator) that died, the checkpoint the arrays were restored from (id, highest level read), the
    ``number`` of the job's online recovery it was, and that recovery's seconds per phase (``phases``:
    repair, adopt, restore, as :meth:`RepairReport.phases`)."""

    old_size: int
    new_size: int
    failed: tuple[int, ...]
    checkpoint_id: int = 0
    level: int = 0
    number: int = 0
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Seconds from the failure's detection to the end of the restore on the fewer ranks."""
        return sum(self.phases.values())

    def __repr__(self) -> str:
        return (f"ShrinkReport(number={self.number}, old_size={self.old_size}, new_size={self.new_size}, "
                f"failed={self.failed}, checkpoint_id={self.checkpoint_id}, level={self.level}, "
                f"{format_phases(self.phases)}, total={self.seconds:.3f} s)")


@dataclass
class ShrinkState:
    """The application's opt-in to continue with fewer ranks (``steps(on_shrink=)``) and its shrinks."""

    on_shrink: OnShrink | None = None
    pending: ShrinkReport | None = None          # shrunk, not yet restored
    survivors: tuple[int, ...] = ()              # old ranks of the pending shrink, in new rank order
    history: list[ShrinkReport] = field(default_factory=list)
