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
#: The tag of ``flag_at``'s values down the process columns (one per pair of processes and panel).
TAG_FLAG = 606


class _All:
    """Requests tested as one (``Test`` true once all have completed)."""

    def __init__(self, requests: list[Any]) -> None:
        self.pending = requests

    def Test(self) -> bool:  # noqa: N802 - the name of the MPI request method it stands for
        # one progress call for all (each request's Test makes its own, and may yield the core each time)
        if self.pending and MPI.Request.Testall(self.pending):
            self.pending = []
        return not self.pending


class PanelFlight:
    """Panel ``k``'s messages under way (:func:`launch_panel`): the diagonal block's broadcast, then the
    panel's buffer along the process rows from the panel's process column and, down the process columns,
    only the rows each process's trailing columns multiply (``per_row`` values per row and ``extra``).
    :meth:`progress` tests the messages and starts those whose input has arrived (call it between the GEMMs
    of the update they overlap), :meth:`wait` finishes them. ``on_rows``, if given, is called with the buffer
    once it has arrived here (with ``"direct"``: once every message has completed, the sends included).

    ``columns``: how the rows travel down the process columns. ``"own"``, on a square grid (process row
    ``q`` holds the rows of process column ``q``'s columns): once the buffer has been broadcast along the
    process rows, process ``(q, q)`` broadcasts its first ``sent`` values down process column ``q`` (half the
    data of a gather on 2 x 2); ``flag_at``, if given, is the index in the buffer of a value whose maximum
    over the process column every process needs (``ft_pdpotrf``'s flag of rows left to recompute, which the
    data down the column does not carry from every process row): each process sends its value to the
    others of its process column beside it (:meth:`column_flag`). ``"direct"``, on any other grid: no stage
    relays another's data: each process of the panel's process column sends its whole buffer to the
    processes of its process row and, to the processes of process column ``q`` in the other process rows,
    ``pack(q)`` (default: those of its rows that column's trailing columns multiply,
    :meth:`CholeskySteps.select_rows`; ``ft_pdpotrf`` packs their sums beside them),
    ``selected_counts(k, q)[its row] * per_row + extra`` values, one point-to-point message each; so a
    process's part arrives however late the processes beside it next test their messages (relayed, its
    column partner would pass it on only once its own row's had arrived and it next tested, between its
    GEMMs).

    Nothing more travels once the diagonal block is known to be not positive definite or held (every process
    learns it from the same broadcast, so every process skips the same messages).
    """

    def __init__(self, steps: CholeskySteps, k: int, diagonal: DiagonalMessage, buf: np.ndarray,
                 sent: int, per_row: int, extra: int = 0,
                 on_rows: Callable[[np.ndarray], object] | None = None, columns: str = "own",
                 flag_at: int | None = None, pack: Callable[[int], np.ndarray] | None = None) -> None:
        assert columns in ("own", "direct") and (columns == "own" or flag_at is None)
        e = steps.panels[k][1]
        self.steps, self.k, self.diagonal, self.buf = steps, k, diagonal, buf
        self._shape, self._on_rows, self._columns = (sent, per_row, extra), on_rows, columns
        # flag_at: the flags of the process column's other processes, by process row (this one's: 0)
        self._flag_at, self._flag, self._pack = flag_at, np.zeros(steps.grid.nprow, buf.dtype), pack
        self._send = buf[:sent]
        self.deadline = deadline_after(WAIT_TIMEOUT)
        g = steps.grid
        self.bad: int | None = None
        self._root = g.mycol == int(steps.cols.owners[steps.panels[k][0]])
        # stages: None not started, a request under way, True arrived; trivial ones arrived from the start
        self._row: Any = True if g.npcol == 1 or not buf.size or e == steps.rows.n else None
        self._gather: Any = True if g.nprow == 1 or e == steps.rows.n else None
        if columns == "direct":  # one stage: every message starts at once
            self._row, self._gather = (True if g.size == 1 or e == steps.rows.n else None), True
        self._out = np.empty(0, buf.dtype)
        self._counts = [0] * g.nprow  # "direct": the values received from each process row
        self._displs = [0] * g.nprow  # and where they are in _out
        self._packs: list[tuple[int, np.ndarray]] = []  # "direct"'s parts under way (kept alive)

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
        # "own": the root sends while it broadcasts (the same buffer, only read), unless a hook must see it
        # first; the diagonal process of this process column sends its part down it
        if self._gather is None and self._on_rows is None and (self._row is True or self._root):
            sent, per_row, extra = self._shape
            count = st.gather_counts(self.k, per_row, extra)[0][g.mycol]
            self._out = self._send if g.myrow == g.mycol else np.empty(count, self.buf.dtype)
            self._gather = g.col_comm.Ibcast(self._out, root=g.mycol) if self._out.size else True
            if self._flag_at is not None and g.nprow > 1:
                self._gather = _All([r for r in (self._gather, *self._exchange_flag()) if r is not True])
        if self._gather is not True and self._gather is not None and self._gather.Test():
            self._gather = True
        return self._row is True and self._gather is True

    def _exchange_flag(self) -> list[Any]:
        """Start ``flag_at``'s exchange down the process column: this process's flag to every other process
        of it, theirs into :attr:`_flag` (point-to-point: half the CPU of an ``Iallreduce`` among 2
        processes, posted and completed)."""
        g, at = self.steps.grid, self._flag_at
        assert at is not None
        peers = [p for p in range(g.nprow) if p != g.myrow]
        return [*(g.col_comm.Irecv(self._flag[p:p + 1], source=p, tag=TAG_FLAG) for p in peers),
                *(g.col_comm.Isend(self.buf[at:at + 1], dest=p, tag=TAG_FLAG) for p in peers)]

    def _exchange(self) -> list[Any]:
        """Start ``"direct"``'s messages: on the panel's process column, the sends of its buffer and parts
        (and the receives of its partners' parts for its own trailing columns); elsewhere, the receives of
        this process row's buffer and of the other process rows' parts. A message of no values is not
        sent."""
        st, g, k = self.steps, self.steps.grid, self.k
        qk, (_, per_row, extra) = int(st.cols.owners[st.panels[k][0]]), self._shape
        self._counts = [c * per_row + extra if p != g.myrow else 0
                        for p, c in enumerate(st.selected_counts(k))]
        self._displs = displs = displacements(self._counts)
        self._out = np.empty(sum(self._counts), self.buf.dtype)
        reqs = [g.comm.Irecv(self._out[d:d + c], source=g.rank_of(p, qk), tag=TAG_PANEL)
                for p, (c, d) in enumerate(zip(self._counts, displs, strict=True)) if c]
        if g.mycol != qk:
            if self.buf.size:
                reqs.append(g.comm.Irecv(self.buf, source=g.rank_of(g.myrow, qk), tag=TAG_PANEL))
            return reqs
        if self.buf.size:
            reqs += [g.comm.Isend(self.buf, dest=g.rank_of(g.myrow, q), tag=TAG_PANEL)
                     for q in range(g.npcol) if q != qk]
        if g.nprow > 1:
            self._packs = [(q, (self._pack or self._selected)(q)) for q in range(g.npcol)]
            reqs += [g.comm.Isend(part, dest=g.rank_of(p, q), tag=TAG_PANEL)
                     for q, part in self._packs if part.size for p in range(g.nprow) if p != g.myrow]
        return reqs

    def _selected(self, q: int) -> np.ndarray:
        """``"direct"``'s default part for process column ``q``: this process's rows of ``P`` that its
        trailing columns multiply, flat (F order); a column that multiplies them all gets the buffer itself,
        not a copy."""
        st, k = self.steps, self.k
        mine = st.rows_of(k, self.buf)
        if st.selected_counts(k, q)[st.grid.myrow] == mine.shape[0]:
            return self.buf
        return st.select_rows(k, mine, column=q).reshape(-1, order="F")

    def wait(self) -> int:
        """Wait for every message, sleeping, with a deadline; return ``bad`` (``-1``: the panel has arrived;
        ``HOLD``: nothing travelled)."""
        poll_until(self.progress, self.deadline, f"panel {self.k}'s messages")
        assert self.bad is not None
        return self.bad

    def trailing_rows(self) -> np.ndarray | dict[int, np.ndarray]:
        """The rows of ``P`` this process's trailing columns multiply, once arrived, as
        :meth:`CholeskySteps.apply_update` takes them (the default parts): with ``"own"`` in their order (F
        order), else by block column, views of this process's rows and of the parts received
        (:meth:`CholeskySteps.column_blocks`: no copy)."""
        st, k, g = self.steps, self.k, self.steps.grid
        mine = st.rows_of(k, self.buf)
        if g.nprow > 1 and self._columns == "own":
            return st.rows_of(k, self._out)
        w = self._shape[1]
        return st.column_blocks(k, mine, [p.reshape((p.size // w, w), order="F") for p in self.parts()])

    @property
    def own(self) -> bool:
        """Whether only the diagonal process's part travels down each process column (``columns="own"``)."""
        return self._columns == "own"

    def parts(self) -> list[np.ndarray]:
        """With ``"direct"``: the part received from each process row's process of the panel's column, once
        arrived (this process row's: empty)."""
        return [self._out[d:d + c] for c, d in zip(self._counts, self._displs, strict=True)]

    def column_flag(self) -> float:
        """With ``flag_at``: the largest flag of the process column's processes, once arrived."""
        assert self._flag_at is not None
        return max(float(self.buf[self._flag_at]), *self._flag.tolist())  # numpy max: ~30 us in situ

    def own_piece(self) -> np.ndarray:
        """With ``columns="own"``: the part of the buffer of the process row that holds this process's
        columns' rows (its diagonal process's), once arrived."""
        if self.steps.grid.nprow == 1:
            return self.buf[:self._shape[0]]
        return self._out


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
