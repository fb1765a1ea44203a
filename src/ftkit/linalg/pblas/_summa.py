"""SUMMA on aligned local operands, with a replaceable panel exchange.

The engine computes ``c += alpha * op(A) @ op(B)`` where every process already holds

- ``a``: its rows of op(A) (the same rows, in the same local order, as its rows of ``c``) restricted to the
  k-indices its process column owns under the k-map ``ka`` (a :class:`BlockCyclic1D` over process columns);
- ``b``: its columns of op(B) (same as its columns of ``c``) for the k-indices its process row owns under
  ``kb`` (over process rows).

The k range is cut into steps of about ``width`` indices. In a step every process column contributes its
columns of ``a`` that fall in the range (one contiguous local slice: several blocks bundled into one panel),
and the row communicator gathers them into the A panel; likewise B panels down the column communicator. Then
one local GEMM ``c += alpha * a_panel @ b_panel``. The next step's exchange is in flight during the
current GEMM.

Nothing here depends on what the rows of ``a`` or the columns of ``b`` are, only on the k dimension: ABFT
stacks checksum rows under ``a`` and checksum columns beside ``b`` and they travel in the same panels. The
exchange itself is a strategy object (:class:`PanelExchange`) a failure-aware implementation can replace.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from mpi4py import MPI

from ..._wait import wait_requests
from .._blas import gemm_update
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ._panel_buffers import panel_slots, pooled_buffer, release_pool

__all__ = ["SummaStep", "plan_summa", "default_width", "PanelExchange", "PendingPanels",
           "AllgatherExchange", "extract_a_piece", "extract_b_piece", "local_update", "run_summa"]

#: Message tags of the default exchange (A pieces on the row communicator, B pieces on the column one).
TAG_A, TAG_B = 601, 602

#: The parts of ``c`` a SUMMA multiplies into: fixed ``(rows, cols)`` slices, or a function of the step.
Tiles = Sequence[tuple[slice, slice]] | Callable[["SummaStep"], Sequence[tuple[slice, slice]]]

#: Smallest k width of a SUMMA step by default: local GEMMs narrower than this run well below BLAS peak.
MIN_WIDTH = 1024


@dataclass(frozen=True)
class SummaStep:
    """One SUMMA step: the global k range ``[k0, k1)`` and where its pieces live.

    Attributes
    ----------
    a_cols
        Per process column ``q``: slice of ``q``'s local ``a`` columns holding its k-indices in the range.
    b_rows
        Per process row ``p``: slice of ``p``'s local ``b`` rows holding its k-indices in the range.
    a_order, b_order
        Global k index of each column of the gathered A panel (pieces in ``q`` order) and of each row of the
        gathered B panel (pieces in ``p`` order).
    perm
        Column permutation putting the A panel into ``b_order`` (``a_panel[:, perm]``); ``None`` if the two
        orders are equal (always the case on a square grid with matching k-maps).
    """

    index: int
    k0: int
    k1: int
    a_cols: tuple[slice, ...]
    b_rows: tuple[slice, ...]
    a_order: np.ndarray
    b_order: np.ndarray
    perm: np.ndarray | None

    @property
    def width(self) -> int:
        """Number of k indices in the step."""
        return self.k1 - self.k0


def default_width(ka: BlockCyclic1D, kb: BlockCyclic1D) -> int:
    """Return the default step width: whole rounds of blocks over all owners, at least :data:`MIN_WIDTH`."""
    round_ = max(ka.nb * ka.nprocs, kb.nb * kb.nprocs)
    return round_ * max(1, -(-MIN_WIDTH // round_))


def plan_summa(ka: BlockCyclic1D, kb: BlockCyclic1D, width: int | None = None) -> list[SummaStep]:
    """Cut the k dimension into SUMMA steps (pure index arithmetic, identical on every process).

    Parameters
    ----------
    ka, kb
        k-maps of op(A)'s columns (over process columns) and op(B)'s rows (over process rows); same length.
    width
        Target number of k indices per step (default :func:`default_width`).
    """
    if ka.n != kb.n:
        raise ValueError(f"k-maps differ in length: {ka.n} != {kb.n}")
    k = ka.n
    width = max(1, int(width or default_width(ka, kb)))
    steps = []
    for index, k0 in enumerate(range(0, k, width)):
        k1 = min(k, k0 + width)
        a_cols = tuple(ka.range_on(q, k0, k1) for q in range(ka.nprocs))
        b_rows = tuple(kb.range_on(p, k0, k1) for p in range(kb.nprocs))
        a_order = np.concatenate([k0 + np.flatnonzero(ka.owners[k0:k1] == q) for q in range(ka.nprocs)])
        b_order = np.concatenate([k0 + np.flatnonzero(kb.owners[k0:k1] == p) for p in range(kb.nprocs)])
        perm = None
        if not np.array_equal(a_order, b_order):
            inv = np.empty(k1 - k0, dtype=np.int64)
            inv[a_order - k0] = np.arange(k1 - k0)
            perm = inv[b_order - k0]
        steps.append(SummaStep(index, k0, k1, a_cols, b_rows, a_order, b_order, perm))
    return steps


def extract_a_piece(a: np.ndarray, step: SummaStep, q: int) -> np.ndarray:
    """Return process column ``q``'s contribution to the step's A panel, cut from ``q``'s local ``a``."""
    return a[:, step.a_cols[q]]


def extract_b_piece(b: np.ndarray, step: SummaStep, p: int) -> np.ndarray:
    """Return process row ``p``'s contribution to the step's B panel, cut from ``p``'s local ``b``."""
    return b[step.b_rows[p], :]


def local_update(alpha: float, a_panel: np.ndarray, b_panel: np.ndarray, c: np.ndarray,
                 perm: np.ndarray | None = None, beta: float = 1.0) -> None:
    """Compute ``c = alpha * a_panel[:, perm] @ b_panel + beta * c`` in place (one BLAS call)."""
    if perm is not None:
        a_panel = a_panel[:, perm]
    gemm_update(alpha, a_panel, b_panel, c, beta)


class PendingPanels(Protocol):
    """An exchange in flight; ``wait`` returns ``(a_panel, b_panel)``."""

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        """Block until both panels are complete and return them (A in ``a_order``, B in ``b_order``)."""
        ...


class PanelExchange(Protocol):
    """Strategy that turns every process's pieces of a step into the full A and B panels."""

    def start(self, grid: ProcessGrid, step: SummaStep, a_piece: np.ndarray,
              b_piece: np.ndarray) -> PendingPanels:
        """Start exchanging this process's pieces; return a handle whose ``wait`` gives the panels."""
        ...


class _Done:
    def __init__(self, a_panel: np.ndarray, b_panel: np.ndarray, requests: list[MPI.Request],
                 keep: tuple[object, ...], finish: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self._panels = (a_panel, b_panel)
        self._requests = requests
        self._keep = keep  # send buffers must outlive the non-blocking calls
        self._finish = finish  # (destination, received buffer) copies to do once complete

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        wait_requests(self._requests)
        for dest, src in self._finish:
            dest[...] = src
        self._keep, self._finish = (), []
        return self._panels


class AllgatherExchange:
    """Default exchange: every process sends its pieces to the others of its process row (A) and column (B).

    Point-to-point ``Isend``/``Irecv``, not ``Iallgatherv``: with Open MPI's shared-memory transport the
    collective's schedule is 3-5x slower for MB-sized pieces, while a plain receive is one single-copy
    transfer. Both panels are column-major, like the local arrays. An A piece is a run of whole columns, so it
    is sent from and received into its slot of the ``(rows, width)`` A panel with no packing. A B piece is a
    band of rows, not contiguous in column-major order: it is sent from a packed copy and received into a
    scratch buffer, then copied into its slot of the ``(width, cols)`` B panel (block copies of whole column
    segments: an order of magnitude cheaper than transposing it into a row-major panel). With one process in a
    row (column) the piece itself is the panel. Tags: :data:`TAG_A` on ``grid.row_comm``, :data:`TAG_B` on
    ``grid.col_comm``; successive steps are told apart by MPI's in-order matching.
    """

    def __init__(self, buffers: int = 2) -> None:
        # Buffer sets used round-robin: L steps in flight beside the one being multiplied need L + 1.
        self._pool: list[dict[object, np.ndarray]] = [{} for _ in range(max(2, buffers))]
        self._calls = 0

    #: ``start`` takes ``extra_rows`` / ``extra_cols`` / ``fill_a`` / ``fill_b`` (callers may test for it).
    accepts_fill = True

    def start(self, grid: ProcessGrid, step: SummaStep, a_piece: np.ndarray,
              b_piece: np.ndarray, *, extra_rows: int = 0, extra_cols: int = 0,
              fill_a: Callable[[np.ndarray], None] | None = None,
              fill_b: Callable[[np.ndarray], None] | None = None) -> PendingPanels:
        """Start the exchange; the panels stay valid until ``buffers`` more calls of ``start``.

        Parameters
        ----------
        grid, step, a_piece, b_piece
            As :meth:`PanelExchange.start`.
        extra_rows, extra_cols
            Rows appended under every A piece / columns beside every B piece (e.g. ABFT checksums): the
            panels are ``(ra + extra_rows, width)`` and ``(width, cb + extra_cols)``; every process of the row
            (column) must pass the same number.
        fill_a, fill_b
            If given, called with this process's slot (a writable column-major ``(ra + extra_rows, wa)`` view
            of the A panel; the ``(wb, cb + extra_cols)`` send buffer of the B piece) and must write all of
            it, the piece included, before it is sent: the piece is copied once, straight into the panel, and
            the caller can compute its extra rows in the same pass. Without a fill the piece is copied and the
            extra rows / columns are zero. With extras or a fill, the panel is never the piece itself (even
            alone in the row / column).
        """
        requests: list[MPI.Request] = []
        keep: list[object] = []
        finish: list[tuple[np.ndarray, np.ndarray]] = []
        pool = self._pool[self._calls % len(self._pool)]
        self._calls += 1
        a_panel = self._gather_columns(grid.row_comm, a_piece, step.a_cols, requests, pool,
                                       int(extra_rows), fill_a)
        b_panel = self._gather_rows(grid.col_comm, b_piece, step.b_rows, requests, keep, finish, pool,
                                    int(extra_cols), fill_b)
        return _Done(a_panel, b_panel, requests, tuple(keep), finish)

    @staticmethod
    def _fill(dest: np.ndarray, piece: np.ndarray, fill: Callable[[np.ndarray], None] | None,
              axis: int) -> None:
        """Write ``piece`` (and the caller's extras) into ``dest``: by ``fill``, else copy + zero extras."""
        if fill is not None:
            fill(dest)
        elif axis == 0:
            dest[: piece.shape[0]] = piece
            dest[piece.shape[0] :] = 0.0
        else:
            dest[:, : piece.shape[1]] = piece
            dest[:, piece.shape[1] :] = 0.0

    def release(self) -> None:
        """Hand the panel buffers back for reuse by later multiplies; the exchange must be idle."""
        for pool in self._pool:
            release_pool(pool)

    def _gather_columns(self, comm: MPI.Comm, piece: np.ndarray, slices: tuple[slice, ...],
                        requests: list[MPI.Request], pool: dict[object, np.ndarray], extra: int = 0,
                        fill: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
        size, me = comm.Get_size(), comm.Get_rank()
        plain = extra == 0 and fill is None
        if size == 1 and plain:
            return piece
        widths = [s.stop - s.start for s in slices]
        panel = pooled_buffer(pool, "A", (piece.shape[0] + extra, sum(widths)))
        slot = [panel[:, s] for s in panel_slots(widths)]
        for q in range(size):
            if q != me and slot[q].size:
                requests.append(comm.Irecv([slot[q], MPI.DOUBLE], source=q, tag=TAG_A))
        mine = slot[me]
        if mine.size:
            if plain:
                mine[...] = piece
            else:
                self._fill(mine, piece, fill, 0)
            for q in range(size):
                if q != me:
                    requests.append(comm.Isend([mine, MPI.DOUBLE], dest=q, tag=TAG_A))
        return panel

    def _gather_rows(self, comm: MPI.Comm, piece: np.ndarray, slices: tuple[slice, ...],
                     requests: list[MPI.Request], keep: list[object],
                     finish: list[tuple[np.ndarray, np.ndarray]],
                     pool: dict[object, np.ndarray], extra: int = 0,
                     fill: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
        size, me = comm.Get_size(), comm.Get_rank()
        plain = extra == 0 and fill is None
        if size == 1 and plain:
            return piece
        widths = [s.stop - s.start for s in slices]
        cols = piece.shape[1] + extra
        if size == 1:  # alone in the column: the filled buffer is the panel
            panel = pooled_buffer(pool, "B", (widths[0], cols))
            if panel.size:
                self._fill(panel, piece, fill, 1)
            return panel
        panel = pooled_buffer(pool, "B", (sum(widths), cols))
        slots = panel_slots(widths)
        for p in range(size):
            if p != me and widths[p] * cols:
                scratch = pooled_buffer(pool, ("B", p), (widths[p], cols))
                requests.append(comm.Irecv([scratch, MPI.DOUBLE], source=p, tag=TAG_B))
                finish.append((panel[slots[p], :], scratch))
        if widths[me] * cols:
            packed = pooled_buffer(pool, ("B", me), (widths[me], cols))
            if plain:
                packed[...] = piece
            else:
                self._fill(packed, piece, fill, 1)
            panel[slots[me], :] = packed
            for p in range(size):
                if p != me:
                    requests.append(comm.Isend([packed, MPI.DOUBLE], dest=p, tag=TAG_B))
            keep.append(packed)
        return panel


def run_summa(grid: ProcessGrid, a: np.ndarray, b: np.ndarray, c: np.ndarray, ka: BlockCyclic1D,
              kb: BlockCyclic1D, alpha: float, *, width: int | None = None,
              exchange: PanelExchange | None = None, steps: list[SummaStep] | None = None,
              stats: dict[str, float] | None = None, lookahead: int | None = None, beta: float = 1.0,
              tiles: Tiles | None = None,
              more: Sequence[tuple[np.ndarray, np.ndarray, BlockCyclic1D, BlockCyclic1D]] = ()) -> None:
    """Compute ``c += alpha * op(A) @ op(B)`` by SUMMA on aligned local operands (collective on the grid).

    Parameters
    ----------
    grid
        The process grid.
    a
        ``(r, ka.count(mycol))`` local piece of op(A); ``r`` equal on all processes of a process row.
    b
        ``(kb.count(myrow), s)`` local piece of op(B); ``s`` equal on all processes of a process column.
    c
        ``(r, s)`` array updated in place (a view into a local array is fine).
    ka, kb
        k-maps of ``a``'s columns (over process columns) and ``b``'s rows (over process rows).
    alpha
        Scalar factor.
    width
        Target k indices per step (default :func:`default_width`).
    exchange
        Panel exchange strategy (default :class:`AllgatherExchange`).
    steps
        Precomputed plan (from :func:`plan_summa`), to share it with a caller that needs it too.
    stats
        If given, ``"gemm_s"`` (local GEMM time), ``"wait_s"`` (time waiting for panels) and ``"steps"`` are
        added to it (seconds).
    beta
        Scale applied to ``c`` by the first local GEMM (``0`` overwrites ``c`` without reading it), saving a
        separate pass over ``c``; with no steps (k == 0) ``c`` is scaled directly.
    lookahead
        Exchanges kept in flight beside the step being multiplied (default 1: step i+1 is started right after
        step i's panels arrive, before they are multiplied). Deeper lookahead was measured at n = 4096 on
        2 x 2 (4 ranks, 2 cores): no faster, and ~20 % more CPU (more panel memory to fault in).
    tiles
        If given, ``(rows, cols)`` slices of ``c``: only these parts of ``c`` are updated (one local GEMM per
        tile and step; PDSYRK's triangle), the rest of ``c`` is neither read nor written. Or a function of
        the step giving its own slices (``beta`` applies to the first step's, as to the fixed ones): steps
        that reach different parts of ``c`` (PDTRMM's bands, :mod:`~ftkit.linalg.resilient._part`) run in
        one pipeline, the next step's exchange in flight during this step's GEMMs, as with fixed tiles.
    more
        Further products ``(a, b, ka, kb)`` (as ``a``, ``b``, ``ka``, ``kb``; steps of ``width``) added to
        ``c`` after the first, in order, through the same pipeline: the next product's first exchange is in
        flight during the previous one's last GEMM (PDSYR2K's second term). The local GEMMs, and so the
        result, are those of one call per product.
    """
    steps = steps if steps is not None else plan_summa(ka, kb, width)
    work = [(a, b, step) for step in steps]
    for a2, b2, ka2, kb2 in more:
        work += [(a2, b2, step) for step in plan_summa(ka2, kb2, width)]
    if not work:
        for rs, cs in tiles if tiles is not None and not callable(tiles) else [(slice(None), slice(None))]:
            cc = c[rs, cs]
            gemm_update(0.0, np.zeros((cc.shape[0], 0)), np.zeros((0, cc.shape[1])), cc, beta)
        return
    own: AllgatherExchange | None = None
    depth = max(1, lookahead if lookahead is not None else 1)
    if exchange is None:
        exchange = own = AllgatherExchange(buffers=depth + 1)
    me_r, me_c = grid.myrow, grid.mycol
    in_flight: deque[PendingPanels] = deque()
    started = 0

    def fill() -> None:
        nonlocal started
        while started < len(work) and len(in_flight) < depth:
            wa, wb, step = work[started]
            in_flight.append(exchange.start(grid, step, extract_a_piece(wa, step, me_c),
                                            extract_b_piece(wb, step, me_r)))
            started += 1

    t_gemm = t_wait = 0.0
    fill()
    for i, (_, _, step) in enumerate(work):
        t0 = time.perf_counter()
        a_panel, b_panel = in_flight.popleft().wait()
        t1 = time.perf_counter()
        fill()
        t2 = time.perf_counter()
        if tiles is None:
            local_update(alpha, a_panel, b_panel, c, step.perm, beta if i == 0 else 1.0)
        else:
            a_panel = a_panel if step.perm is None else a_panel[:, step.perm]
            for rs, cs in tiles(step) if callable(tiles) else tiles:
                local_update(alpha, a_panel[rs], b_panel[:, cs], c[rs, cs], None, beta if i == 0 else 1.0)
        t_gemm += time.perf_counter() - t2
        t_wait += t1 - t0
    if own is not None:
        own.release()  # only when every transfer is complete (not after an exception)
    if stats is not None:
        stats["gemm_s"] = stats.get("gemm_s", 0.0) + t_gemm
        stats["wait_s"] = stats.get("wait_s", 0.0) + t_wait
        stats["steps"] = stats.get("steps", 0.0) + len(work)
