"""The panel exchange behind :func:`ftkit.linalg.ft_pdgemm`: checksums travel inside the SUMMA panels.

:class:`_ChecksumExchange` wraps a :class:`~ftkit.linalg.pblas._summa.PanelExchange`: each process's A piece
gets its checksum rows (plain, index-weighted, absolute and, for the statistical threshold only, squared sums
of every row segment of C: ``product.kinds`` of them) stacked under it and each B piece its checksum columns
beside it; on arrival the checksum part of the panels is multiplied into an
:class:`~ftkit.linalg.checksums.ChecksumProduct` that predicts every C block's sums. With an exchange that
accepts a fill callback (``AllgatherExchange.accepts_fill``) the piece is copied once, straight into its
panel slot, with its checksums computed in the same pass; other exchanges get an extended copy of the piece.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...inject import InjectionPlan
from .. import checksums
from ..checksums._kernels import encode_cols_into, encode_rows_into
from ..grid import ProcessGrid
from ..pblas._panel_buffers import pooled_buffer, release_pool
from ..pblas._summa import PanelExchange, PendingPanels, SummaStep

#: Rotating buffer sets for the extended (data + checksum) pieces: SUMMA keeps one exchange in flight
#: beside the step being multiplied, and an exchange may hold a piece until its panel is consumed.
_SLOTS = 3


# ---------------------------------------------------------------- checksums inside the panels
class _ChecksumPending:
    def __init__(
        self,
        owner: _ChecksumExchange,
        step: SummaStep,
        inner: PendingPanels,
        side: tuple[np.ndarray | None, np.ndarray | None],
    ) -> None:
        self.owner, self.step, self.inner, self.side = owner, step, inner, side

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        o = self.owner
        a_ext, b_ext = self.inner.wait()
        if o.plan is not None:  # C has received self.step.index panel updates so far
            o.plan.apply("C", o.rank, self.step.index, o.c, o.c_to_global)
        a_side, b_side = self.side
        achk = a_ext[o.ra :] if a_side is None else a_side
        bchk = b_ext[:, o.cb :] if b_side is None else b_side
        if self.step.perm is not None:
            achk = achk[:, self.step.perm]
        o.product.add(achk, bchk)
        a_data = a_ext[: o.ra] if a_side is None else a_ext
        b_data = b_ext[:, : o.cb] if b_side is None else b_ext
        # OpenBLAS turns a one-row/one-column GEMM into GEMV, whose result depends on the vector's stride:
        # hand it the same unit-stride vector plain pdgemm does, so C stays bit-identical to pdgemm's
        # (pieces that did not travel are already exactly what pdgemm multiplies)
        if o.ra == 1 and a_side is None:
            a_data = np.asfortranarray(a_data)
        if o.cb == 1 and b_side is None:
            b_data = np.asfortranarray(b_data)
        return a_data, b_data


class _ChecksumExchange:
    """Panel exchange that stacks checksums under (beside) each piece and predicts C's block sums."""

    def __init__(
        self,
        inner: PanelExchange,
        ra: int,
        cb: int,
        rb: np.ndarray,
        cbnd: np.ndarray,
        product: checksums.ChecksumProduct,
        c: np.ndarray,
        plan: InjectionPlan | None,
        rank: int,
        c_to_global: Callable[[int, int], tuple[int, int]],
    ) -> None:
        self.inner, self.ra, self.cb = inner, ra, cb
        self.rb, self.cbnd = rb, cbnd
        self.rw, self.cw = checksums.segment_weights(rb), checksums.segment_weights(cbnd)
        self.nr, self.nc = len(rb) - 1, len(cbnd) - 1
        self.kinds = product.kinds  # checksum rows per row segment / columns per column segment
        self.product, self.c, self.plan, self.rank, self.c_to_global = product, c, plan, rank, c_to_global
        self._pool: dict[object, np.ndarray] = {}

    def start(
        self, grid: ProcessGrid, step: SummaStep, a_piece: np.ndarray, b_piece: np.ndarray
    ) -> PendingPanels:
        nr, nc, ra, cb, kinds = self.nr, self.nc, self.ra, self.cb, self.kinds
        # Operand flips planned for this step happen after encoding: encode from a private copy then.
        a_src = a_piece.copy(order="F") if self._planned("A", step) else a_piece
        b_src = b_piece.copy(order="F") if self._planned("B", step) else b_piece
        # Alone in my process row (column) nothing is sent: the piece is the panel and the checksums stay
        # aside; the data then reaches the GEMM in the very layout plain pdgemm uses (bit-identical C).
        achk = bchk = None
        # An exchange that accepts a fill callback gets the checksums computed straight into its panel slot
        # (A) / send buffer (B) in the pass that copies the piece there: each piece is copied once.
        direct = bool(getattr(self.inner, "accepts_fill", False))
        kw: dict[str, Any] = {}
        if grid.npcol == 1:
            achk = np.empty((kinds * nr, a_piece.shape[1]), order="F")
            encode_rows_into(a_src, self.rb, self.rw, achk, False, kinds)
            a_ext = self._inject(step, "A", a_piece, None)
        elif direct:
            a_ext = a_piece

            def fill_a(slot: np.ndarray) -> None:
                encode_rows_into(a_src, self.rb, self.rw, slot, True, kinds)  # copies the data too
                self._inject(step, "A", a_piece, slot[:ra])

            kw.update(extra_rows=kinds * nr, fill_a=fill_a)
        else:
            a_ext = self._buffer("A", step, (ra + kinds * nr, a_piece.shape[1]))
            encode_rows_into(a_src, self.rb, self.rw, a_ext, True, kinds)  # copies the data too
            self._inject(step, "A", a_piece, a_ext[:ra])
        if grid.nprow == 1:
            bchk = np.empty((b_piece.shape[0], kinds * nc), order="F")
            encode_cols_into(b_src, self.cbnd, self.cw, bchk, False, kinds)
            b_ext = self._inject(step, "B", b_piece, None)
        elif direct:
            b_ext = b_piece

            def fill_b(buf: np.ndarray) -> None:
                encode_cols_into(b_src, self.cbnd, self.cw, buf, True, kinds)  # copies the data too
                self._inject(step, "B", b_piece, buf[:, :cb])

            kw.update(extra_cols=kinds * nc, fill_b=fill_b)
        else:
            # column-major like the exchange's B panel: the pieces move without transposition
            b_ext = self._buffer("B", step, (b_piece.shape[0], cb + kinds * nc))
            encode_cols_into(b_src, self.cbnd, self.cw, b_ext, True, kinds)
            self._inject(step, "B", b_piece, b_ext[:, :cb])
        pending = self.inner.start(grid, step, a_ext, b_ext, **kw)
        return _ChecksumPending(self, step, pending, (achk, bchk))

    def _buffer(self, role: str, step: SummaStep, shape: tuple[int, int]) -> np.ndarray:
        """Column-major ``shape`` array for an extended piece (slot ``step % _SLOTS`` of ``role``), from the
        panel buffers pdgemm keeps between multiplies: fresh 10-100 MB arrays per step cost page faults and
        zeroing comparable to the encoding itself. Handed back by :meth:`release`."""
        return pooled_buffer(self._pool, (role, step.index % _SLOTS), shape)

    def release(self) -> None:
        """Hand the extended-piece buffers back for later multiplies (once no transfer can touch them)."""
        release_pool(self._pool)

    def _planned(self, target: str, step: SummaStep) -> bool:
        return self.plan is not None and self.plan.planned(target, self.rank, step.index)

    def _inject(self, step: SummaStep, target: str, piece: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """Copy ``piece`` into ``out`` (or return it when ``out`` is None), making the planned operand flips.

        Persistent flips hit the operand itself (a view of the user's matrix when no redistribution was
        needed), the others only the data that travels in this panel (a private copy if need be).
        """
        plan = self.plan
        if plan is None or not plan.planned(target, self.rank, step.index):
            return piece if out is None else out  # the kernel already copied the data
        if piece.flags.writeable:
            plan.apply(target, self.rank, step.index, piece, persistent=True)
        if out is None:
            out = piece.copy(order="A")
        else:
            out[...] = piece
        plan.apply(target, self.rank, step.index, out, persistent=False)
        return out
