"""What a checkpoint of FT_PDPOTRF holds, and the resume from it (:func:`resume`): the state (panel index and
the factorization's shape), the carried checksums, and of the factor this process's factored block columns, on
and below their diagonal blocks only, packed one block column after the other.

A block column of the work matrix never changes once its panel is factored, and the Checkpointer writes
every protected array whole at every checkpoint (no level but L4's differential one skips unchanged bytes),
so the smallest thing a checkpoint can hold is the factored part itself: per block column ``J = [s, e)`` of
this process, its local rows from the first one ``>= s`` down (the rows above the diagonal block are scratch
the factorization never reads and ``write_back`` never copies: about half the factored columns' rows late
in the factorization). The packed buffer only grows: the packing of the block columns ``< k`` is a prefix of
the packing of those ``< k'`` for ``k' > k``, so a checkpoint copies in only the block columns factored since
the previous one and protects the prefix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from ...errors import RecoveryError
from ._abft import UpdateChecks
from ._column_recompute import rebuild_trailing
from ._steps import CholeskySteps

__all__ = ["FactoredColumns", "resume", "CKPT_L", "CKPT_STATE", "CKPT_CHK"]

#: The names of FT_PDPOTRF's protected arrays: the packed factored columns, the state, the carried checksums.
CKPT_L, CKPT_STATE, CKPT_CHK = "ftkit.potrf.L", "ftkit.potrf.state", "ftkit.potrf.chk"


class FactoredColumns:
    """The packed lower block trapezoid of this process's factored block columns of ``steps.w``.

    Parameters
    ----------
    steps
        The factorization's panel engine (its work piece ``w``, maps and panels).
    reuse
        What an earlier factorization protected under :data:`CKPT_L` in the same checkpointer, or ``None``:
        the buffer it is a view of is packed into again when it is large enough (fresh memory costs a page
        fault and a zeroing per page as the packing first touches it; the checkpointer keeps the earlier
        buffer until this factorization protects the name again, its first step, so it cannot come from the
        shared buffer cache, which would hand it to another routine while still protected).
    """

    def __init__(self, steps: CholeskySteps, reuse: np.ndarray | None = None) -> None:
        self.steps = steps
        g, rows, cols, nrow = steps.grid, steps.rows, steps.cols, steps.w.shape[0]
        #: per block column of this process, in panel order: (panel, local columns, first local row, offset)
        self.blocks: list[tuple[int, slice, int, int]] = []
        self._ends = np.zeros(len(steps.panels) + 1, np.int64)  # packed length of the block columns < k
        off = 0
        for k, (s, e) in enumerate(steps.panels):
            if int(cols.owners[s]) == g.mycol:
                cl, r0 = cols.range_on(g.mycol, s, e), rows.range_on(g.myrow, s, rows.n).start
                self.blocks.append((k, cl, r0, off))
                off += (nrow - r0) * (cl.stop - cl.start)
            self._ends[k + 1] = off
        base = reuse.base if reuse is not None and reuse.base is not None else reuse
        fits = (isinstance(base, np.ndarray) and base.dtype == np.float64 and base.ndim == 1
                and base.flags.c_contiguous and base.size >= off)
        self.packed = base[:off] if fits else np.empty(off)  # type: ignore[index]
        self._filled = 0  # block columns < this panel are in ``packed``

    def size(self, k: int) -> int:
        """The number of values the block columns ``< k`` (panel index) pack to."""
        return int(self._ends[k])

    def pack(self, k: int) -> np.ndarray:
        """Copy the block columns ``< k`` not yet packed into the buffer; return its prefix holding all of
        them (a view: protect it by reference)."""
        w = self.steps.w
        for kk, cl, r0, off in self.blocks:
            if self._filled <= kk < k:
                self._block(self.packed, cl, r0, off)[...] = w[r0:, cl]
        self._filled = max(self._filled, k)
        return self.packed[:self.size(k)]

    def unpack(self, got: np.ndarray, k: int) -> None:
        """Put the block columns ``< k`` back into ``steps.w`` from ``got`` (what :meth:`pack` returned)."""
        w = self.steps.w
        for kk, cl, r0, off in self.blocks:
            if kk < k:
                w[r0:, cl] = self._block(got, cl, r0, off)

    def _block(self, buf: np.ndarray, cl: slice, r0: int, off: int) -> np.ndarray:
        """The F-order view of a block column's place (local columns ``cl``, rows from ``r0``) in ``buf``."""
        m, wd = self.steps.w.shape[0] - r0, cl.stop - cl.start
        return buf[off:off + m * wd].reshape((m, wd), order="F")


def resume(ckpt: Any, done: FactoredColumns, state: np.ndarray, checks: UpdateChecks) -> int:
    """Protect the state in ``ckpt``; on a restart recover it, rebuild the trailing matrix and return the
    panel to resume at."""
    ckpt.protect(CKPT_L, done.pack(0), resizable=True)
    ckpt.protect(CKPT_STATE, state)
    for name, arr in checks.arrays().items():
        ckpt.protect(f"{CKPT_CHK}.{name}", arr.reshape(-1, order="F"))
    if not ckpt.restarted:
        return 0
    want = state.copy()
    try:
        ckpt.recover()
    except RecoveryError as exc:  # the run is a restart: a checkpoint now would be refused, so no fresh start
        raise RecoveryError(f"ft_pdpotrf: cannot resume from the checkpoint ({exc}); resume on the same grid "
                            "and layout with the same ftkit version, or start again with a fresh checkpoint "
                            "directory (or exec_id)") from exc
    if not np.array_equal(state[1:], want[1:]):
        raise RecoveryError(f"ft_pdpotrf: the checkpointed factorization ({state[1:].tolist()}: order, "
                            f"offsets, uplo, panels) is not this one ({want[1:].tolist()}); use a fresh "
                            "checkpoint directory (or exec_id) for a different matrix")
    k = int(state[0])
    got = ckpt.array(CKPT_L)
    # Every process raises if one's part does not fit (a different grid or layout, or a checkpoint of an
    # earlier version that held whole local columns): the others must not go on into the factorization.
    fits = np.array([got.size == done.size(k)], np.int64)
    everywhere = np.zeros_like(fits)
    done.steps.grid.comm.Allreduce(fits, everywhere, op=MPI.MIN)
    if not everywhere[0]:
        raise RecoveryError("ft_pdpotrf: the checkpoint's factored columns do not fit this factorization's "
                            "layout on some process: resume on the same grid and layout with the same ftkit "
                            "version, or start again with a fresh checkpoint directory")
    done.unpack(got, k)
    rebuild_trailing(done.steps, k)  # A's values (in the work matrix) minus the checkpointed panels' updates
    return k
