"""The failure-aware panel exchanges of :func:`~ftkit.linalg.resilient.resilient_pdgemm` (*iterate* phase).

SUMMA panels (:class:`FailureAwareExchange`, a :class:`~ftkit.linalg.pblas._summa.PanelExchange`) and Cannon's
neighbour shifts (:func:`run_cannon`) travel point to point through a
:class:`~ftkit.failure.FailureDetector`, with a deadline. A piece whose owner is dead (or fenced off) is cut
from the owner's stored operand instead of waited for. A stored piece that cannot be read is replaced by
zeros only so that every survivor still reaches the agreement, where the call then fails uniformly: such
zeros never reach a returned result (see ``unrecoverable``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import FtkitError
from ...failure import FailureDetector
from ...failure.exchange import Exchange
from ...storage.inputs import InputStore
from .._blas import gemm_update
from ..descriptor import BlockCyclic1D
from ..grid import ProcessGrid
from ..pblas._panel_buffers import panel_slots, pooled_buffer, release_pool
from ..pblas._summa import SummaStep, extract_a_piece, extract_b_piece

__all__ = ["FailureAwareExchange", "run_cannon", "TAG_SPAN"]

TAG_SPAN = 15000  # data tags wrap below the detector's notice tags


class _Pending:
    def __init__(
        self,
        exchange: FailureAwareExchange,
        step: SummaStep,
        ex: Exchange,
        a_panel: np.ndarray,
        b_panel: np.ndarray,
        b_scratch: dict[int, np.ndarray],
    ) -> None:
        self.x, self.step, self.ex = exchange, step, ex
        self.a_panel, self.b_panel, self.b_scratch = a_panel, b_panel, b_scratch

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        x, step, g = self.x, self.step, self.x.grid
        x.det.finish_exchange(self.ex)
        a_slots = panel_slots([s.stop - s.start for s in step.a_cols])
        b_slots = panel_slots([s.stop - s.start for s in step.b_rows])
        for q in range(g.npcol):  # A pieces of dead owners in my process row come from the store
            owner = g.rank_of(g.myrow, q)
            if q != g.mycol and not x.det.alive(owner):
                self.a_panel[:, a_slots[q]] = extract_a_piece(x.stored("a", owner), step, q)
                x.storage_reads += 1
        for p in range(g.nprow):
            owner = g.rank_of(p, g.mycol)
            if p == g.myrow:
                continue
            if x.det.alive(owner):
                self.b_panel[b_slots[p], :] = self.b_scratch[owner]
            else:
                self.b_panel[b_slots[p], :] = extract_b_piece(x.stored("b", owner), step, p)
                x.storage_reads += 1
        return self.a_panel, self.b_panel


class FailureAwareExchange:
    """SUMMA panel exchange, point to point with deadlines; a dead owner's piece is read from the store.

    A pieces are received straight into their column slots of an F-order panel; B pieces (packed in F order)
    into scratch buffers copied into their row bands in ``wait``, as the default exchange does.
    """

    def __init__(
        self,
        det: FailureDetector,
        grid: ProcessGrid,
        store: InputStore,
        prefixes: dict[str, str],
        shapes: dict[tuple[str, int], tuple[int, int]],
        on_step: Callable[[int], None] | None,
        dtype: np.dtype | type = np.float64,
    ) -> None:
        self.det, self.grid, self.store, self.prefixes = det, grid, store, prefixes
        self.dtype = np.dtype(dtype)  # C's: its stored pieces (and float32 operands saved as they are)
        self.shapes, self.on_step = shapes, on_step
        self.cache: dict[tuple[str, int], np.ndarray] = {}
        self.storage_reads = 0
        self.unrecoverable: set[int] = set()
        self._pool: dict[object, np.ndarray] = {}

    def _buffer(self, key: tuple[object, ...], shape: tuple[int, int]) -> np.ndarray:
        # Panels come from the buffers pdgemm keeps between multiplies: fresh memory costs a page fault and a
        # zeroing per page, a few ms per call at n = 2048, which was most of this path's error-free overhead.
        return pooled_buffer(self._pool, key, shape)

    def release(self) -> None:
        """Hand the panel buffers back for later multiplies (only once no transfer can touch them)."""
        release_pool(self._pool)

    def stored(self, what: str, rank: int) -> np.ndarray:
        """Return ``rank``'s stored piece ``what`` (``"a"``, ``"b"`` or ``"c"``), read once and kept.

        A piece that cannot be read, or has not the shape the index arithmetic gives, puts ``rank`` in
        :attr:`unrecoverable` and reads as zeros (the caller must agree on :attr:`unrecoverable` before
        anything computed from stored pieces is used).
        """
        key = (what, rank)
        if key not in self.cache:
            try:
                piece = self.store.load(f"{self.prefixes[what]}/{what}.{rank}")
                if piece.shape != self.shapes[key] or piece.dtype not in (np.float64, self.dtype):
                    raise FtkitError(f"stored {what}.{rank} is {piece.dtype} {piece.shape}")
                self.cache[key] = piece
            except FtkitError:
                # Keep going with zeros so every survivor reaches the agreement, which then fails uniformly.
                self.unrecoverable.add(rank)
                self.cache[key] = np.zeros(self.shapes[key], order="F")
        return self.cache[key]

    def start(self, grid: ProcessGrid, step: SummaStep, a_piece: np.ndarray, b_piece: np.ndarray) -> _Pending:
        if self.on_step is not None:
            self.on_step(step.index)
        g, det = grid, self.det
        a_slots = panel_slots([s.stop - s.start for s in step.a_cols])
        b_slots = panel_slots([s.stop - s.start for s in step.b_rows])
        parity = step.index % 2  # two buffer sets: a panel stays valid until the second-next start()
        # Alone in the process row (column), the piece itself is the A (B) panel, as in pdgemm's exchange
        # (:class:`~ftkit.linalg.pblas._summa.AllgatherExchange`): the same GEMMs, bit for bit its result.
        a_panel = a_piece if g.npcol == 1 else self._buffer(("a", parity), (a_piece.shape[0], step.width))
        if g.npcol > 1:
            a_panel[:, a_slots[g.mycol]] = a_piece
        mine_a = a_panel[:, a_slots[g.mycol]]
        recv_a = {g.rank_of(g.myrow, q): a_panel[:, a_slots[q]] for q in range(g.npcol) if q != g.mycol}
        b_panel = b_piece if g.nprow == 1 else self._buffer(("b", parity), (step.width, b_piece.shape[1]))
        mine_b = b_piece
        if g.nprow > 1:
            b_panel[b_slots[g.myrow], :] = b_piece
            mine_b = np.asfortranarray(b_piece, dtype=np.float64)  # float32 operands travel as float64 too
        recv_b = {
            g.rank_of(p, g.mycol): self._buffer(
                ("bs", p, parity), (b_slots[p].stop - b_slots[p].start, b_piece.shape[1])
            )
            for p in range(g.nprow)
            if p != g.myrow
        }
        tag = 2 * (step.index % TAG_SPAN)
        # One exchange for both panels (row peers for A, column peers for B: never the same process), so one
        # wait polls all of a step's transfers, as pdgemm's does.
        ex = det.start_exchange({r: mine_a for r in recv_a}, recv_a, tag)
        det.start_exchange({r: mine_b for r in recv_b}, recv_b, tag + 1, into=ex)
        return _Pending(self, step, ex, a_panel, b_panel, recv_b)


def run_cannon(
    x: FailureAwareExchange, a: np.ndarray, b: np.ndarray, c: np.ndarray, kmap: BlockCyclic1D, alpha: float
) -> None:
    """Cannon's algorithm (see :mod:`ftkit.linalg.pblas._cannon`) with deadlines: a piece that does not arrive
    from the neighbour (dead, or fenced) is the stored operand of its owner, read from the store instead."""
    g, det = x.grid, x.det
    P, i, j = g.npcol, g.myrow, g.mycol
    rows, cols = a.shape[0], b.shape[1]

    def src(step: int) -> int:  # k-owner whose pieces (i, j) multiplies at this step
        return (i + j + step) % P

    def shift(cur_a, cur_b, step: int, a_to: int, a_from: int, b_to: int, b_from: int, tag: int):  # type: ignore[no-untyped-def]
        # A moves along my process row, B along my process column; a hop to myself is no hop.
        q = src(step)
        new_a = cur_a if a_from == j else np.empty((rows, kmap.count(q)), order="F")
        new_b = cur_b if b_from == i else np.empty((kmap.count(q), cols), order="F")
        sa = {g.rank_of(i, a_to): cur_a} if a_to != j else {}
        sb = {g.rank_of(b_to, j): cur_b} if b_to != i else {}
        ex_a = det.start_exchange(sa, {g.rank_of(i, a_from): new_a} if a_from != j else {}, tag)
        ex_b = det.start_exchange(sb, {g.rank_of(b_from, j): new_b} if b_from != i else {}, tag + 1)
        return new_a, new_b, ex_a, ex_b, q

    def finish(new_a, new_b, ex_a, ex_b, q):  # type: ignore[no-untyped-def]
        if det.finish_exchange(ex_a):  # the neighbour is dead: take the piece from its owner's stored operand
            new_a[...] = x.stored("a", g.rank_of(i, q))
            x.storage_reads += 1
        if det.finish_exchange(ex_b):
            new_b[...] = x.stored("b", g.rank_of(q, j))
            x.storage_reads += 1
        return new_a, new_b

    cur_a, cur_b = np.asfortranarray(a, dtype=np.float64), np.asfortranarray(b, dtype=np.float64)
    if P > 1:  # initial skew: my pieces go to whoever multiplies them first; mine come from owner src(0)
        cur_a, cur_b = finish(
            *shift(cur_a, cur_b, 0, (j - i) % P, src(0), (i - j) % P, src(0), 2 * TAG_SPAN)
        )
    for step in range(P):
        if x.on_step is not None:
            x.on_step(step)
        pending = None
        if step + 1 < P:
            pending = shift(
                cur_a, cur_b, step + 1, (j - 1) % P, (j + 1) % P, (i - 1) % P, (i + 1) % P, 2 * step
            )
        gemm_update(alpha, cur_a, cur_b, c)
        if pending is not None:
            cur_a, cur_b = finish(*pending)
