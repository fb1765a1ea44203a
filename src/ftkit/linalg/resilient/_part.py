"""The part of C's submatrix a failure-tolerant call updates on this process (:class:`UpdatedPart`).

A routine that updates all of ``C(ic:ic+m, jc:jc+n)`` (PDGEMM, PDSYMM, ...) multiplies into the whole local
view. One that updates only part of it keeps the rest bit for bit, in one of two ways:

- a triangle (``ProductForm.triangle``: PDSYRK, PDSYR2K) is cut into the tiles of the plain rank-k updates
  (:func:`~ftkit.linalg.pblas.rank_k.triangle_tiles`): only those are multiplied (half the square's flops),
  and only their elements outside the triangle (in the diagonal blocks) are copied first and put back after;
- any other ``keep`` mask (PDTRADD's trapezoid) is applied to the whole product: C is copied on entry and
  the entries not updated are put back from that copy.

The dead processes' tiles are recomputed in the settle phase with the ``keep`` mask either way
(:mod:`ftkit.linalg.resilient._settle`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..pblas.gemm import _scale
from ..pblas.rank_k import Staircase, triangle_tiles
from ._call_state import ResilientCall

__all__ = ["UpdatedPart"]


class UpdatedPart:
    """This process's updated part of C's local view ``c`` for ``call``, with what it must put back.

    Made on entry to the iterate phase, before ``c`` changes: it copies what :meth:`restore` puts back.
    """

    def __init__(self, call: ResilientCall, c: np.ndarray) -> None:
        self._stairs: Staircase | None = None
        self._saved: list[np.ndarray] = []
        self._entry: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        if call.triangle is not None:  # the tiles of the plain rank-k update, cut the same way
            self._stairs = triangle_tiles(call.C, call.ic, call.jc, call.n, call.triangle)
            self._saved = self._stairs.save(c)
        elif call.keep is not None:
            grid = call.grid
            self._entry = c.copy()
            self._mask = call.keep(call.crows.indices_on(grid.myrow), call.ccols.indices_on(grid.mycol))

    @property
    def tiles(self) -> Sequence[tuple[slice, slice]] | None:
        """The ``(rows, cols)`` slices of ``c`` to multiply into (``None``: all of ``c``)."""
        return self._stairs.tiles if self._stairs is not None else None

    def scale(self, c: np.ndarray, beta: float) -> None:
        """Scale the updated part of ``c`` by ``beta`` (``0``: set to zero, NaN included)."""
        for rs, cs in self.tiles if self.tiles is not None else [(slice(None), slice(None))]:
            _scale(c[rs, cs], beta)

    def first_beta(self, c: np.ndarray, beta: float) -> float:
        """The beta of the first local GEMM: ``beta`` itself, or, on tiles, 1 after scaling them by
        ``beta`` here (0 stays 0: C not read), as :func:`~ftkit.linalg.pdsyrk` does (bit for bit its
        result)."""
        if self.tiles is None or beta == 0.0:
            return beta
        self.scale(c, beta)
        return 1.0

    def restore(self, c: np.ndarray) -> None:
        """Put back, bit for bit, the entries of ``c`` the routine does not update."""
        if self._stairs is not None:
            self._stairs.restore(c, self._saved)
        elif self._entry is not None:
            c[...] = np.where(self._mask, c, self._entry)  # type: ignore[arg-type]
