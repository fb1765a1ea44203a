"""Fault injection for tests and demos: bit flips, rank and node kills, file damage.

Every function here injects a real fault: it flips a real bit in memory, sends a real SIGKILL, deletes or
damages a real file. Tests use them to show that ftkit detects and survives the fault.

Silent errors *during* a computation are described by an :class:`InjectionPlan` (a list of :class:`BitFlip`),
passed to ``ftkit.linalg.ft_pdgemm(..., inject=plan)``: the routine calls :meth:`InjectionPlan.apply` at its
injection points (C between two SUMMA panels, op(A)/op(B) local data right after their checksums were
encoded) and the plan records every flip it made (:class:`InjectionRecord`) for the test to compare with
the routine's report. Random choices (rank, step, element, bit) come from the plan's seed, so every rank
resolves them identically and a run can be repeated exactly.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "flip_bit",
    "kill_self",
    "kill_pid",
    "kill_together",
    "corrupt_file",
    "truncate_file",
    "delete_node_dir",
    "BIT_CLASSES",
    "BitFlip",
    "InjectionRecord",
    "InjectionPlan",
]

#: Named bit ranges of a float64 (inclusive): where a random flip may land.
BIT_CLASSES: dict[str, tuple[int, int]] = {
    "exponent": (52, 62),
    "mantissa_top20": (32, 51),
    "high": (32, 62),  # exponent or top 20 mantissa bits: what ABFT must always catch
    "low_mantissa": (0, 31),  # may fall below the rounding threshold
    "sign": (63, 63),
    "any": (0, 63),
}

#: Targets of an in-computation flip: C's local piece, or the local op(A) / op(B) data after encoding.
TARGETS = ("C", "A", "B")


def flip_bit(array: np.ndarray, index: int | tuple[int, ...], bit: int) -> tuple[float, float]:
    """Flip bit ``bit`` (0 = least significant) of element ``index`` of ``array``, in place.

    Returns the element's value before and after, as floats (for reports).

    Raises
    ------
    ValueError
        If ``bit`` is outside the element's width or the array is not writeable.
    """
    if not array.flags.writeable:
        raise ValueError("flip_bit needs a writeable array")
    nbits = array.dtype.itemsize * 8
    if not 0 <= bit < nbits:
        raise ValueError(f"bit {bit} is outside 0..{nbits - 1} for dtype {array.dtype}")
    flat_index = np.ravel_multi_index(index, array.shape) if isinstance(index, tuple) else int(index)
    view = array.reshape(-1, order="A") if array.flags.c_contiguous or array.flags.f_contiguous else None
    if view is None:
        raise ValueError("flip_bit needs a contiguous array")
    before = float(view[flat_index])
    raw = view[flat_index : flat_index + 1].view(np.uint8)
    raw[bit // 8] ^= np.uint8(1 << (bit % 8))
    return before, float(view[flat_index])


def kill_self() -> None:
    """SIGKILL the calling process (no cleanup, no atexit: as a crashed node would)."""
    os.kill(os.getpid(), signal.SIGKILL)


def kill_pid(pid: int) -> None:
    """SIGKILL process ``pid`` from outside; a process that is already gone is ignored.

    Raises
    ------
    ValueError
        If ``pid`` is not a positive process id (0 or a negative number would signal a whole process
        group, -1 every process the caller may signal: never what a test means).
    """
    _check_pid("kill_pid", pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_together(pids: Sequence[int], while_stopped: Callable[[], object] | None = None) -> None:
    """SIGKILL processes ``pids`` from outside as one event (a node lost at once); those already gone are
    ignored.

    Every process is stopped (SIGSTOP) before the first is killed: killed one after another, the later ones
    could run on after the first death and see it (start a repair, be ended by the runtime) before their own
    SIGKILL, which turns one loss into two. ``while_stopped`` runs while all of them are stopped, e.g. to
    delete their node's local directory (the disk goes with its processes, before anyone can read it); the
    SIGKILLs are sent even if it raises.

    Raises
    ------
    ValueError
        If an entry of ``pids`` is not a positive process id (nothing is signalled then).
    """
    for pid in pids:
        _check_pid("kill_together", pid)
    try:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        if while_stopped is not None:
            while_stopped()
    finally:
        for pid in pids:
            kill_pid(pid)


def _check_pid(caller: str, pid: object) -> None:
    """Refuse ``pid`` unless it is a positive process id: 0 or a negative number would signal a whole process
    group, -1 every process the caller may signal: never what a test means."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"{caller}({pid!r}): not a process id (a pid file not written yet?)")


def corrupt_file(path: str | os.PathLike[str], offset: int = -1, mask: int = 0x01) -> None:
    """XOR the byte at ``offset`` of file ``path`` with ``mask`` (negative offsets count from the end)."""
    p = Path(path)
    size = p.stat().st_size
    pos = offset if offset >= 0 else size + offset
    if not 0 <= pos < size:
        raise ValueError(f"offset {offset} is outside {path} ({size} bytes)")
    with open(p, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def truncate_file(path: str | os.PathLike[str], size: int) -> None:
    """Cut file ``path`` down to ``size`` bytes."""
    os.truncate(path, size)


def delete_node_dir(path: str | os.PathLike[str]) -> None:
    """Delete a node-local directory and everything in it (an emulated node's storage loss)."""
    shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class BitFlip:
    """One planned bit flip during a distributed computation; ``None`` fields are drawn from the plan's seed.

    Parameters
    ----------
    target
        ``"C"`` (the local piece of C, between two SUMMA steps), ``"A"`` or ``"B"`` (the local op(A) /
        op(B) data of one step, right after its checksums were encoded).
    rank
        Rank (in C's grid communicator) whose data is hit.
    step
        SUMMA step: for C, the flip happens after ``step`` panel updates (``0`` = before the first,
        ``nsteps`` = after the last, before verification); for A/B, the piece sent in step ``step``.
        Negative values count from the end (``-1`` = the last injection point).
    index
        Local ``(row, col)`` in the target array (C: the local piece of C's submatrix; A/B: the step's piece).
    bit
        Bit number (0 = least significant mantissa bit, 52..62 exponent, 63 sign).
    bits
        Bit class (a key of :data:`BIT_CLASSES`) or inclusive ``(lo, hi)`` range for a random bit.
    persistent
        A/B only: flip the operand itself (``True``: a fetch from the owner sees the wrong value too) or only
        the copy that travels in the panel (``False``).
    """

    target: str = "C"
    rank: int | None = None
    step: int | None = None
    index: tuple[int, int] | None = None
    bit: int | None = None
    bits: str | tuple[int, int] = "high"
    persistent: bool = True

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"target={self.target!r}: use one of {', '.join(TARGETS)}")
        lo, hi = _bit_range(self.bits)
        if self.bit is not None and not 0 <= self.bit <= 63:
            raise ValueError(f"bit={self.bit} is outside 0..63")
        if not 0 <= lo <= hi <= 63:
            raise ValueError(f"bits={self.bits!r} is not a range inside 0..63")


def _bit_range(bits: str | tuple[int, int]) -> tuple[int, int]:
    if isinstance(bits, str):
        if bits not in BIT_CLASSES:
            raise ValueError(f"bits={bits!r}: use one of {', '.join(BIT_CLASSES)} or a (lo, hi) range")
        return BIT_CLASSES[bits]
    lo, hi = bits
    return int(lo), int(hi)


@dataclass(frozen=True)
class InjectionRecord:
    """A flip that was made: where (rank, step, local and global element), which bit, value before/after."""

    target: str
    rank: int
    step: int
    local_index: tuple[int, int]
    global_index: tuple[int, int] | None
    bit: int
    before: float
    after: float


@dataclass
class InjectionPlan:
    """A reproducible set of bit flips to make during one ``ft_pdgemm``/``ft_pdsymm`` call.

    Parameters
    ----------
    flips
        The planned flips.
    seed
        Seed of every random choice (identical on all ranks, so they agree on rank and step).

    Attributes
    ----------
    records
        The flips this process made (filled by :meth:`apply`).
    """

    flips: Sequence[BitFlip] = ()
    seed: int = 0
    records: list[InjectionRecord] = field(default_factory=list)
    _resolved: list[tuple[BitFlip, int, int]] = field(default_factory=list, repr=False)

    def resolve(self, nranks: int, nsteps: int) -> None:
        """Fix every flip's rank and step (drawn from the seed where ``None``); call once, on every rank."""
        self._resolved = []
        self.records = []
        for n, f in enumerate(self.flips):
            rng = np.random.default_rng((self.seed, n, 0))
            rank = int(rng.integers(nranks)) if f.rank is None else int(f.rank)
            last = nsteps if f.target == "C" else max(0, nsteps - 1)
            step = int(rng.integers(0, last + 1)) if f.step is None else int(f.step)
            if step < 0:
                step += last + 1  # -1: the last injection point (C: after the last panel update)
            if not 0 <= rank < nranks:
                raise ValueError(f"flip {n}: rank {rank} is outside the {nranks} ranks of the grid")
            self._resolved.append((f, rank, step))

    def planned(self, target: str, rank: int, step: int) -> bool:
        """Whether a flip is planned for (``target``, ``rank``, ``step``)."""
        return any(f.target == target and r == rank and s == step for f, r, s in self._resolved)

    def apply(
        self,
        target: str,
        rank: int,
        step: int,
        array: np.ndarray,
        to_global: Callable[[int, int], tuple[int, int]] | None = None,
        *,
        persistent: bool | None = None,
    ) -> list[InjectionRecord]:
        """Make the flips planned for (``target``, ``rank``, ``step``) in ``array`` (in place); return them.

        ``to_global`` maps a local ``(row, col)`` of ``array`` to global coordinates for the record;
        ``persistent`` (if given) restricts to flips with that flag. Flips on an empty array are skipped.
        """
        made = []
        for n, (f, r, s) in enumerate(self._resolved):
            if f.target != target or r != rank or s != step or array.size == 0:
                continue
            if persistent is not None and f.persistent != persistent:
                continue
            rng = np.random.default_rng((self.seed, n, 1))
            if f.index is None:
                idx = (int(rng.integers(array.shape[0])), int(rng.integers(array.shape[1])))
            else:
                idx = (int(f.index[0]), int(f.index[1]))
            lo, hi = _bit_range(f.bits)
            bit = int(rng.integers(lo, hi + 1)) if f.bit is None else int(f.bit)
            before = float(array[idx])
            raw = np.array([before]).view(np.uint64)
            raw ^= np.uint64(1) << np.uint64(bit)
            array[idx] = raw.view(np.float64)[0]
            rec = InjectionRecord(
                target,
                rank,
                step,
                idx,
                to_global(*idx) if to_global else None,
                bit,
                before,
                float(array[idx]),
            )
            made.append(rec)
        self.records.extend(made)
        return made
