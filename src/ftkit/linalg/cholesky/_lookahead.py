"""The look-ahead schedule of the blocked Cholesky factorization (:mod:`ftkit.linalg.cholesky._steps`'s
steps) and a panel's messages under way (:class:`PanelFlight`).

:func:`factor_panels` does this with a look-ahead of depth 1 (HPL's, ScaLAPACK's ``PDPOTRF`` has none):
once ``P_k`` has arrived, a process first updates block column ``k+1`` with it, then panel ``k+1`` is
factored and solved and its messages are started (:func:`launch_panel`, a :class:`PanelFlight`),
and only then does the rest of ``P_k``'s update run, testing those messages between its GEMMs, so that they
travel, and the processes outside panel ``k+1``'s column do not wait for its owner, while the bulk of the
flops runs. Every block column is still updated by the same GEMM calls in the same order (one call per
block column and panel), so the factor is bit for bit the sequential one. Every message is non-blocking and
waited by sleeping (:mod:`ftkit._wait`: with more ranks than cores a blocking wait busy-polls and steals the
core of the process everyone waits for), with a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..._wait import deadline_after, poll_until
from ..pblas._redistribute import displacements
from ._steps import WAIT_TIMEOUT, CholeskySteps, DiagonalMessage

__all__ = ["PanelFlight", "launch_panel", "factor_panels", "TAG_PANEL"]

#: The tag of ``"direct"``'s messages (one per pair of processes and panel: MPI keeps them in order).
TAG_PANEL = 604


class _All:
    """Requests tested as one (``Test`` true once all have completed)."""

    def __init__(self, requests: list[Any]) -> None:
        self.pending = requests

    def Test(self) -> bool:  # noqa: N802 - the name of the MPI request method it stands for
        self.pending = [r for r in self.pending if not r.Test()]
        return not self.pending


class PanelFlight:
    """Panel ``k``'s messages under way (:func:`launch_panel`): the diagonal block's broadcast, the
    panel's buffer broadcast along the process rows from the panel's process column, then its first ``sent``
    values gathered down the process columns (``per_row`` values per row below the panel and ``extra``, as
    :meth:`CholeskySteps.gather`). A stage starts when what it sends has arrived: :meth:`progress` tests and
    chains them (call it between the GEMMs of the update the messages overlap), :meth:`wait` finishes them.
    ``on_rows``, if given, is called with the buffer once it has arrived and before it is gathered (on the
    panel's process column too: the gather then waits for the row broadcast there as well).
    ``columns``: what travels down the process columns: ``"all"`` every process row's part (the gather,
    :meth:`pieces`), or only the rows each process's trailing columns multiply (:meth:`trailing_rows`, the
    plain factorization's need): on a square grid (process row ``q`` holds the rows of process column
    ``q``'s columns) process ``(q, q)`` broadcasts its part down process column ``q`` (``"own"``: half the
    data of the gather on 2 x 2), else each process sends the rows its process column's trailing columns
    multiply (``"select"``: a third of the gather on 2 x 3). ``"direct"`` (plain factorization): no
    stage relays another's data: each process of the panel's process column sends its rows of ``P`` to the
    processes of its process row and, to every process of the other process rows, those of its rows that
    process's trailing columns multiply (:meth:`CholeskySteps.select_rows` for its process column), one
    point-to-point message each; so a process's part arrives however late the processes beside it next test
    their messages (with ``"select"`` its column partner passed it on only once its own row broadcast had
    arrived and it next tested, between its GEMMs). The same values arrive as with ``"select"``.

    ``flag_at`` (with ``"own"`` or ``"select"``): the index in the buffer of a value whose maximum over the
    process column every process needs (``ft_pdpotrf``'s flag of rows left to recompute, which the data down
    the column does not carry from every process row): one small ``Iallreduce`` beside the data
    (:meth:`column_flag`). ``pack`` (with ``"select"``): what this process sends down its process column,
    given the buffer once arrived (on the root: while it is broadcast, so only read there), ``per_row``
    values per selected row (:meth:`CholeskySteps.selected_counts`) and ``extra``; default: the selected rows.

    Nothing more travels once the diagonal block is known to be not positive definite or held (every process
    learns it from the same broadcast, so every process skips the same messages).
    """

    def __init__(self, steps: CholeskySteps, k: int, diagonal: DiagonalMessage, buf: np.ndarray,
                 sent: int, per_row: int, extra: int = 0,
                 on_rows: Callable[[np.ndarray], object] | None = None, columns: str = "all",
                 flag_at: int | None = None, pack: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        e = steps.panels[k][1]
        self.steps, self.k, self.diagonal, self.buf = steps, k, diagonal, buf
        self._shape, self._on_rows, self._columns = (sent, per_row, extra), on_rows, columns
        self._flag_at, self._flag, self._pack = flag_at, np.zeros(1, buf.dtype), pack
        self._send = buf[:sent]
        self.deadline = deadline_after(WAIT_TIMEOUT)
        g = steps.grid
        self.bad: int | None = None
        self._root = g.mycol == int(steps.cols.owners[steps.panels[k][0]])
        # stages: None not started, a request under way, True arrived; trivial ones arrived from the start
        self._row: Any = True if g.npcol == 1 or not buf.size or e == steps.rows.n else None
        self._gather: Any = True if g.nprow == 1 or e == steps.rows.n else None
        if columns == "direct":  # one stage: every message starts at once
            assert on_rows is None and flag_at is None and pack is None
            self._row, self._gather = (True if g.size == 1 or e == steps.rows.n else None), True
        self._out = np.empty(0, buf.dtype)
        self._packs: list[tuple[int, np.ndarray]] = []  # "direct"'s selections under way (kept alive)

    def progress(self) -> bool:
        """Test the messages under way, start the stages whose input has arrived; return whether all have
        arrived."""
        st, g = self.steps, self.steps.grid
        if self.bad is None:
            if not self.diagonal.test():
                return False
            self.bad = self.diagonal.result()[0]
        if self.bad != -1:
            return True
        if self._row is None and self._columns == "direct":
            self._row = _All(self._exchange())
        elif self._row is None:
            self._row = g.row_comm.Ibcast(self.buf, root=int(st.cols.owners[st.panels[self.k][0]]))
        if self._row is not True and self._row.Test():
            self._row = True
        if self._row is True and self._on_rows is not None:
            self._on_rows(self.buf)
            self._on_rows = None
        # the root sends while it broadcasts (the same buffer, only read), unless a hook must see it first
        if self._gather is None and self._on_rows is None and (self._row is True or self._root):
            sent, per_row, extra = self._shape
            counts, displs = st.gather_counts(self.k, per_row, extra)
            if self._columns == "own":  # the diagonal process of this process column sends its rows down it
                mine = g.myrow == g.mycol
                self._out = self._send if mine else np.empty(counts[g.mycol], self.buf.dtype)
                self._gather = g.col_comm.Ibcast(self._out, root=g.mycol) if self._out.size else True
            else:
                if self._columns == "select":
                    self._send = (self._pack(self.buf) if self._pack is not None else st.select_rows(
                        self.k, st.rows_of(self.k, self._send)).reshape(-1, order="F"))
                    counts = [c * per_row + extra for c in st.selected_counts(self.k)]
                    displs = displacements(counts)
                self._out = np.empty(sum(counts), self.buf.dtype)
                self._gather = g.col_comm.Iallgatherv(self._send, [self._out, (counts, displs)])
            if self._flag_at is not None and self._columns != "all":
                at = self._flag_at
                flag = g.col_comm.Iallreduce(self.buf[at:at + 1], self._flag, op=MPI.MAX)
                self._gather = _All([r for r in (self._gather, flag) if r is not True])
        if self._gather is not True and self._gather is not None and self._gather.Test():
            self._gather = True
        return self._row is True and self._gather is True

    def _exchange(self) -> list[Any]:
        """Start ``"direct"``'s messages: on the panel's process column, the sends of its rows (and the
        receives of its partners' selections for its own trailing columns); elsewhere, the receives of this
        process row's rows and of the other process rows' selections. A message of no values is not sent."""
        st, g, k = self.steps, self.steps.grid, self.k
        qk, w = int(st.cols.owners[st.panels[k][0]]), self._shape[1]
        counts = [c * w for c in st.selected_counts(k)]
        displs = displacements(counts)
        self._out = np.empty(sum(counts), self.buf.dtype)
        reqs = [g.comm.Irecv(self._out[d:d + c], source=g.rank_of(p, qk), tag=TAG_PANEL)
                for p, (c, d) in enumerate(zip(counts, displs, strict=True)) if p != g.myrow and c]
        if g.mycol != qk:
            if self._send.size:
                reqs.append(g.comm.Irecv(self._send, source=g.rank_of(g.myrow, qk), tag=TAG_PANEL))
            return reqs
        if self._send.size:
            reqs += [g.comm.Isend(self._send, dest=g.rank_of(g.myrow, q), tag=TAG_PANEL)
                     for q in range(g.npcol) if q != qk]
            mine = st.rows_of(k, self._send)
            # a column that multiplies all these rows gets the buffer itself, not a copy
            self._packs = [(q, self._send if c == mine.shape[0] else
                            st.select_rows(k, mine, column=q).reshape(-1, order="F"))
                           for q, c in ((q, st.selected_counts(k, q)[g.myrow]) for q in range(g.npcol))]
            reqs += [g.comm.Isend(sel, dest=g.rank_of(p, q), tag=TAG_PANEL)
                     for q, sel in self._packs if sel.size for p in range(g.nprow) if p != g.myrow]
        return reqs

    def wait(self) -> int:
        """Wait for every message, sleeping, with a deadline; return ``bad`` (``-1``: the panel has arrived;
        ``HOLD``: nothing travelled)."""
        poll_until(self.progress, self.deadline, f"panel {self.k}'s messages")
        assert self.bad is not None
        return self.bad

    def trailing_rows(self) -> np.ndarray | dict[int, np.ndarray]:
        """With ``columns`` ``"own"`` or ``"select"``: the rows of ``P`` this process's trailing columns
        multiply, once arrived, as :meth:`CholeskySteps.apply_update` takes them: with ``"own"`` in their
        order (F order), else by block column, views of this process's rows and of what came down its
        process column (:meth:`CholeskySteps.column_blocks`: no copy)."""
        st, k, g = self.steps, self.k, self.steps.grid
        mine = st.rows_of(k, self.buf)
        if g.nprow > 1 and self._columns == "own":
            return st.rows_of(k, self._out)
        counts = st.selected_counts(k) if g.nprow > 1 else [0]
        w = self._shape[1]
        ends = np.cumsum(counts) * w
        return st.column_blocks(k, mine, [self._out[b - c * w:b].reshape((c, w), order="F")
                                          for c, b in zip(counts, ends, strict=True)])

    @property
    def own(self) -> bool:
        """Whether only the diagonal process's part travels down each process column (``columns="own"``)."""
        return self._columns == "own"

    @property
    def selected(self) -> bool:
        """Whether each process sends down its process column only what its columns need (``"select"``)."""
        return self._columns == "select" and self.steps.grid.nprow > 1

    def gathered(self) -> np.ndarray:
        """What came down the process column, every process row's part in order, once arrived."""
        return self._out

    def column_flag(self) -> float:
        """With ``flag_at``: the largest flag of the process column's processes, once arrived."""
        assert self._flag_at is not None
        if self.steps.grid.nprow == 1:
            return float(self.buf[self._flag_at])
        return float(self._flag[0])

    def own_piece(self) -> np.ndarray:
        """With ``columns="own"``: the part of the buffer of the process row that holds this process's
        columns' rows (its diagonal process's), once arrived."""
        if self.steps.grid.nprow == 1:
            return self.buf[:self._shape[0]]
        return self._out

    def pieces(self) -> list[np.ndarray]:
        """Every process row's gathered part of the buffer, once arrived (:meth:`CholeskySteps.gather`)."""
        sent, per_row, extra = self._shape
        if self.steps.grid.nprow == 1:
            return [self.buf[:sent]]
        counts, displs = self.steps.gather_counts(self.k, per_row, extra)
        return [self._out[d:d + c] for d, c in zip(displs, counts, strict=True)]


def launch_panel(steps: CholeskySteps, k: int) -> PanelFlight:
    """Factor diagonal block ``k``, solve panel ``k`` on its process column and start its messages
    (``columns="direct"``, straight from the panel's process column to every process; ``"own"`` on a
    square grid); return them under way. Every process calls it in the same order; the panel's process
    column waits for ``L_kk`` (not for its owner's sends), the others do not."""
    g, (s, e) = steps.grid, steps.panels[k]
    diagonal = steps.start_diagonal(k, column_only=True)
    below = steps.rows.range_on(g.myrow, e, steps.rows.n)
    flat = np.empty((below.stop - below.start) * (e - s), steps.w.dtype)
    # on a square grid "own" sends as little, through the diagonal process: measured a little faster on
    # 2 x 2 than "direct" (in-job A/B, 16 calls each: 0.58 vs 0.61 s wall, CPU 0.572 vs 0.582 s)
    flight = PanelFlight(steps, k, diagonal, flat, flat.size, e - s,
                         columns="own" if steps.square else "direct")
    if g.mycol == int(steps.cols.owners[s]):  # only L_kk needed: the owner's sends travel on meanwhile
        diagonal.wait_arrival(flight.deadline)
        bad, low = diagonal.result()
        if bad == -1:
            assert low is not None
            steps.solve_rows(k, low, steps.rows_of(k, flat), None)
    flight.progress()
    return flight


def factor_panels(steps: CholeskySteps, start: int = 0,
                  after_panel: Callable[[int], None] | None = None) -> int:
    """Factor panels ``start ..`` with a look-ahead of depth 1 (module docstring), calling
    ``after_panel(k)`` once panel ``k``'s update has finished; return ``-1``, or the 0-based index of the
    failing minor (every process returns the same, after the update of the panel before it; ``W`` is
    then left partly factored, as the sequential schedule leaves it)."""
    last = len(steps.panels) - 1
    flight = launch_panel(steps, start)
    for k in range(start, last + 1):
        bad = flight.wait()
        if bad >= 0:
            return bad
        if k < last:
            mine = steps.rows_of(k, flight.buf)
            colp = flight.trailing_rows()
            steps.apply_update(k, mine, colp, range(k + 1, k + 2))
            flight = launch_panel(steps, k + 1)
            steps.apply_update(k, mine, colp, range(k + 2, last + 1), between=flight.progress)
        if after_panel is not None:
            after_panel(k)
    return -1
