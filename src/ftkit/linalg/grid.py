"""A 2-D process grid over an mpi4py communicator, as BLACS builds one.

The grid duplicates the communicator it is given, so its traffic can never match the application's messages,
and splits the duplicate into a row communicator (the processes of my process row, ranked by process column)
and a column communicator (my process column, ranked by process row). Every grid gets a ``context`` number,
equal on all its ranks, that descriptors carry so routines can tell matrices of different grids apart, and a
random ``token`` that names its files in a store other jobs may share.

One more duplicate is made for ftkit's failure detector, here, while every process is alive: the
failure-tolerant routines build their detector on it later
(:func:`ftkit.linalg.resilient._grid_detector.detector_for`) with point-to-point messages and ULFM
agreements only.
A communicator made *during* such a call could not be: ``MPI_Comm_dup`` crashes or completes on some ranks
only when a process dies in it, and ULFM's ``Shrink`` renumbers the survivors.
"""

from __future__ import annotations

import itertools
import math
import secrets

from mpi4py import MPI

from ..errors import GridError

__all__ = ["ProcessGrid"]

_contexts = itertools.count(1)


class ProcessGrid:
    """An ``nprow`` x ``npcol`` grid of the first ``nprow*npcol`` ranks of ``comm``.

    Parameters
    ----------
    comm
        The communicator (collective: every rank of ``comm`` must call).
    nprow, npcol
        Grid shape; ``nprow * npcol`` must not exceed ``comm.size``.
    order
        ``"R"`` (row-major: rank = prow*npcol + pcol, BLACS's default) or ``"C"`` (column-major).

    Attributes
    ----------
    comm, row_comm, col_comm
        Grid communicator (a dup) and its row / column splits; ``MPI.COMM_NULL`` on ranks outside the grid.
    myrow, mycol
        This rank's process coordinates (``-1`` outside the grid).
    context, token
        The grid's number (descriptors carry it) and 16 random hex digits, both the same on every rank.

    Raises
    ------
    GridError
        On a non-positive shape, a shape larger than the communicator, or an unknown order.
    """

    def __init__(self, comm: MPI.Comm, nprow: int, npcol: int, order: str = "R") -> None:
        if not isinstance(nprow, int) or not isinstance(npcol, int) or nprow < 1 or npcol < 1:
            raise GridError(f"grid shape must be two positive integers, got {nprow!r} x {npcol!r}")
        if nprow * npcol > comm.Get_size():
            raise GridError(f"a {nprow} x {npcol} grid needs {nprow * npcol} ranks but the communicator has "
                            f"{comm.Get_size()}: launch more ranks or use ProcessGrid.square(comm)")
        order = str(order).upper()
        if order not in ("R", "C"):
            raise GridError(f"order must be 'R' (row-major) or 'C' (column-major), got {order!r}")
        self.nprow, self.npcol, self.order = nprow, npcol, order
        self.size = nprow * npcol
        # A context number and a token every rank agrees on (one collective, like BLACS_GRIDINIT): the
        # largest (context, token) pair.
        self.context, self.token = comm.allreduce((next(_contexts), secrets.token_hex(8)), op=MPI.MAX)
        rank = comm.Get_rank()
        inside = rank < self.size
        sub = comm.Split(0 if inside else MPI.UNDEFINED, rank)
        self.comm: MPI.Comm = MPI.COMM_NULL
        self.row_comm: MPI.Comm = MPI.COMM_NULL
        self.col_comm: MPI.Comm = MPI.COMM_NULL
        self._watch_comm: MPI.Comm = MPI.COMM_NULL
        if not inside:
            self.rank, self.myrow, self.mycol = -1, -1, -1
            return
        self.comm = sub
        self.rank = rank
        self.myrow, self.mycol = self.coords(rank)
        self.row_comm = sub.Split(self.myrow, self.mycol)
        self.col_comm = sub.Split(self.mycol, self.myrow)
        self._watch_comm = sub.Split(0, rank)
        self._watch_comm.Set_errhandler(MPI.ERRORS_RETURN)

    @classmethod
    def square(cls, comm: MPI.Comm, order: str = "R") -> ProcessGrid:
        """Return the most square grid using all ranks of ``comm`` (nprow <= npcol, nprow*npcol == size)."""
        size = comm.Get_size()
        nprow = math.isqrt(size)
        while size % nprow:
            nprow -= 1
        return cls(comm, nprow, size // nprow, order)

    @property
    def shape(self) -> tuple[int, int]:
        """``(nprow, npcol)``."""
        return (self.nprow, self.npcol)

    @property
    def in_grid(self) -> bool:
        """Whether this rank is part of the grid."""
        return self.rank >= 0

    def coords(self, rank: int) -> tuple[int, int]:
        """Return the ``(prow, pcol)`` of grid rank ``rank``."""
        if not 0 <= rank < self.size:
            raise GridError(f"rank {rank} is not in the {self.nprow} x {self.npcol} grid")
        if self.order == "R":
            return divmod(rank, self.npcol)
        pcol, prow = divmod(rank, self.nprow)
        return prow, pcol

    def rank_of(self, prow: int, pcol: int) -> int:
        """Return the grid rank (rank in ``comm``) of process ``(prow, pcol)``."""
        if not (0 <= prow < self.nprow and 0 <= pcol < self.npcol):
            raise GridError(f"process ({prow}, {pcol}) is outside the {self.nprow} x {self.npcol} grid")
        return prow * self.npcol + pcol if self.order == "R" else pcol * self.nprow + prow

    def __repr__(self) -> str:
        return (f"ProcessGrid({self.nprow}x{self.npcol}, order={self.order!r}, me=({self.myrow}, "
                f"{self.mycol}), context={self.context})")

    def take_watch_comm(self) -> MPI.Comm | None:
        """Hand the failure detector's communicator over (local): to the first caller; later ones: ``None``.

        It is an error-returning duplicate of :attr:`comm` (same ranks) made when the grid was built; the
        detector built on it owns it from then on (a second detector needs a fresh communicator: messages
        of the first may still be in flight on this one).
        """
        comm, self._watch_comm = self._watch_comm, MPI.COMM_NULL
        return None if comm == MPI.COMM_NULL else comm

    def free(self) -> None:
        """Free the grid's communicators (collective); the grid is unusable afterwards."""
        for c in (self.row_comm, self.col_comm, self.comm, self._watch_comm):
            if c != MPI.COMM_NULL:
                c.Free()
        self.comm = self.row_comm = self.col_comm = self._watch_comm = MPI.COMM_NULL
