"""The state one failure-tolerant call (:func:`~ftkit.linalg.resilient.resilient_call`) shares between its
phases, its result type and its phase timer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ...failure import FailureDetector
from ...storage.inputs import InputStore
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ..matrix import DistributedMatrix
from ..pblas._operands import AlignedOperands

__all__ = ["ResilientResult", "ResilientCall", "PhaseTimer", "record_phases", "at_stage", "hold_decision"]

#: Private test seam: if set, called with the name of each stage of the end game as this process reaches
#: it (``"setup"``: the call sets up its failure detector, after saving its inputs; ``"repair"``: after
#: the agreement on the dead, before ``Shrink``; ``"recompute"``: before the dead
#: ranks' tiles are recomputed; ``"redistribute"``: before the result moves to the survivors' grid;
#: ``"settle_agree"``: before the final agreement), so that a test can
#: kill a process at a named stage deterministically. Never set outside tests.
fault_hook: Callable[[str], None] | None = None


def at_stage(stage: str) -> None:
    """Call :data:`fault_hook` (if set) with ``stage``."""
    if fault_hook is not None:
        fault_hook(stage)


def hold_decision(comm: MPI.Comm, decided: int) -> None:
    """Return only once every live process of ``comm`` holds the decision ``decided`` of an agreement that
    just ended (fault-tolerant collective: one more ULFM ``Agree``, whose failures are ignored).

    ULFM's ``Agree`` can return on one process before the decision has reached another (it travels on after
    the first returns, in the background of MPI's progress): a process that then leaves (returns from the
    call, exits) is, to one still waiting for the decision, a failure during the agreement, which it would
    repeat without the leavers and decide differently. No process can leave this second ``Agree`` before
    every live process has entered it, i.e. has the first decision; a failure (or a departure) during it is
    then harmless: the decision it was about is already everyone's.
    """
    try:
        comm.Agree(int(decided))
    except MPI.Exception:
        pass  # a process failed or left after deciding: the decision stands


@dataclass
class ResilientResult:
    """What :func:`resilient_pdgemm` returns on a surviving process.

    Attributes
    ----------
    C
        The full result matrix: the caller's ``C`` if nobody failed, else a copy on the survivors' grid.
    grid, comm
        The grid ``C`` lives on and its communicator (the repaired one after failures).
    failed_ranks
        Ranks (of the original grid) that failed or were fenced off, agreed on by all survivors.
    state_table
        The process-state table after the agreement (``1`` alive, ``0`` dead), shaped like the original grid.
    reassigned
        ``{dead rank: {survivor rank: number of tiles it recomputed}}`` (ranks of the original grid).
    tiles_verified
        Recomputed tiles whose block checksum was verified on this process.
    storage_reads
        Stored pieces this process read instead of waiting for a dead owner, during the steps.
    timeout
        The exchange deadline used (s).
    tiles_unchecked
        Recomputed blocks on this process that could not be verified (their checksums or bound are not
        finite: ``Inf``/``NaN`` in the operands); never counted in ``tiles_verified``.
    """

    C: DistributedMatrix
    grid: ProcessGrid
    comm: MPI.Intracomm
    failed_ranks: tuple[int, ...]
    state_table: np.ndarray
    reassigned: dict[int, dict[int, int]] = field(default_factory=dict)
    tiles_verified: int = 0
    storage_reads: int = 0
    timeout: float = 0.0
    tiles_unchecked: int = 0


@dataclass
class ResilientCall:
    """What the phases of one call share on this process (arguments, detector, store, operands)."""

    ta: str
    tb: str
    m: int
    n: int
    k: int
    alpha: float
    beta: float
    C: DistributedMatrix
    ic: int
    jc: int
    where: InputStore
    prefix: str  # this call's keys (C, and A and B unless protected beforehand)
    prefixes: dict[str, str]  # key prefix of each stored piece: "a", "b", "c"
    algorithm: str
    width: int | None
    on_step: Callable[[int], None] | None
    crows: BlockCyclic1D
    ccols: BlockCyclic1D
    ops: AlignedOperands | None = None  # None: nothing to multiply, or this process lost its operands
    lost: bool = False  # a failure interrupted the redistribution of this process's operands
    store_errno: int | None = None  # saving this process's inputs failed (0: no errno)
    shapes: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    routine: str = "PDGEMM"  # the PBLAS routine whose form this call runs (for its errors)
    #: The entries of C's submatrix the routine updates (``ProductForm.keep``); ``None``: all of them.
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    #: The triangle of C whose tiles alone are multiplied (``ProductForm.triangle``); ``None``: all of C.
    triangle: str | None = None
    #: The triangular operand of the product and its triangle (``ProductForm.triangular``); ``None``: none.
    triangular: tuple[str, str] | None = None
    #: Where this process's inputs are kept between calls (the protected handle's prefix, in a store that
    #: supports recycling): each call rewrites the kept file in place (:func:`~.protected.spare_key`);
    #: ``None``: each call writes new files and removes them.
    spares: str | None = None
    #: Set once the inputs are saved: the detector is set up after them (a death in its set-up is survived).
    det: FailureDetector = field(init=False)

    @property
    def grid(self) -> ProcessGrid:
        """C's grid (the original one)."""
        return self.C.grid

    @property
    def multiply(self) -> bool:
        """Whether there is a product to compute (else C is only scaled by beta)."""
        return bool(self.m and self.n and self.k and self.alpha != 0.0)

    @property
    def save_c(self) -> bool:
        """Whether this call saves C."""
        # C is saved as it was on entry (before beta), where it is needed to rebuild a dead process's piece:
        # it contributes (beta != 0) or has entries outside the updated submatrix (kept as they are).
        # With a keep mask, the entries not updated are restored from it in a dead process's tiles.
        d = self.C.desc
        whole = (self.ic, self.jc, self.m, self.n) == (0, 0, d.m, d.n)
        return self.keep is not None or not self.multiply or self.beta != 0.0 or not whole

    def saves(self, side: str) -> bool:
        """Whether this call saves its aligned operand ``side`` (``"a"``, ``"b"``) itself (not protected)."""
        return self.multiply and self.prefixes[side] == self.prefix

    @property
    def save_ops(self) -> bool:
        """Whether this call saves A or B itself (not both protected beforehand)."""
        return self.saves("a") or self.saves("b")

    @property
    def saved(self) -> bool:
        """Whether this call writes anything to the store (then it synchronizes before iterating)."""
        return self.save_c or self.save_ops


class PhaseTimer:
    """Adds the seconds since the previous tick to ``stats[key]`` (a no-op without ``stats``)."""

    def __init__(self, stats: dict[str, float] | None) -> None:
        self.stats, self.last = stats, time.perf_counter()

    def __call__(self, key: str) -> None:
        now = time.perf_counter()
        if self.stats is not None:
            self.stats[key] = self.stats.get(key, 0.0) + now - self.last
        self.last = now


def record_phases(stats: dict[str, float] | None, t0: float, t1: float, t2: float) -> None:
    """Fill ``stats`` (if given) with the protect, iterate and settle times from the phase boundaries (s)."""
    if stats is not None:
        stats["protect_s"] = t1 - t0
        stats["iterate_s"] = t2 - t1
        stats["settle_s"] = time.perf_counter() - t2
