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

A product whose operand is triangular (``ProductForm.triangular``: PDTRMM's ``T``) updates all of C, but a
SUMMA step over the k range ``[k0, k1)`` reaches only a band of it (:class:`TriangularBands`): with a lower
``T`` on the left, row ``i`` of C takes ``T[i, k]`` for ``k <= i`` only, so the rows before ``k0`` get zeros
from the step. Multiplying each step into its band alone does the triangle's flops (plus the part of the
step's diagonal square beyond the diagonal), not the square's, as the plain routine's sweep does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..descriptor import BlockCyclic1D
from ..pblas._summa import SummaStep
from ..pblas.gemm import _scale
from ..pblas.rank_k import Staircase, triangle_tiles
from ._call_state import ResilientCall

__all__ = ["UpdatedPart", "TriangularBands", "band_width"]

#: Per triangular operand ``(side, uplo)``: whether a step reaches the C indices from its first k on (a lower
#: left operand: ``T[i, k] = 0`` for ``k > i``; an upper right one: ``T[k, j] = 0`` for ``k > j``), or those
#: before its end (an upper left operand, a lower right one).
_FROM_K0 = {("a", "L"): True, ("b", "U"): True, ("a", "U"): False, ("b", "L"): False}


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


def band_width(ka: BlockCyclic1D, kb: BlockCyclic1D) -> int:
    """The default k width of a step with a triangular operand: one round of blocks over every owner.

    A step multiplies its band whole, the part of its ``width x width`` diagonal square beyond the diagonal
    included: ``width / k`` more than the triangle's flops (6 % at k = 4096 with 128-blocks on 2 x 2, whose
    round is 256 wide); pdgemm's wider default (:func:`~ftkit.linalg.pblas._summa.default_width`, 1024)
    would cost 25 % there.
    """
    return max(ka.nb * ka.nprocs, kb.nb * kb.nprocs)


class TriangularBands:
    """The band of this process's piece ``c`` of C that each SUMMA step reaches, for a product whose operand
    ``call.triangular`` is triangular (the module docstring): rows of ``c`` for the left operand, columns
    for the right one, a contiguous run of local indices (they follow the global order)."""

    def __init__(self, call: ResilientCall) -> None:
        assert call.triangular is not None
        side, uplo = call.triangular
        g = call.grid
        self._rows = side == "a"
        self._index = call.crows.indices_on(g.myrow) if self._rows else call.ccols.indices_on(g.mycol)
        self._from_k0 = _FROM_K0[side, uplo]

    def _band(self, step: SummaStep) -> slice:
        if self._from_k0:
            return slice(int(np.searchsorted(self._index, step.k0)), len(self._index))
        return slice(0, int(np.searchsorted(self._index, step.k1)))

    def tiles(self, step: SummaStep) -> list[tuple[slice, slice]]:
        """The ``(rows, cols)`` slice of ``c`` ``step`` multiplies into (none if its band is empty here)."""
        band = self._band(step)
        if band.stop <= band.start:
            return []
        return [(band, slice(None))] if self._rows else [(slice(None), band)]

    def first_beta(self, c: np.ndarray, first: SummaStep, beta: float) -> float:
        """Scale the part of ``c`` the ``first`` step does not reach by ``beta`` (0: set to zero, NaN
        included); return the beta of that step's GEMM (``beta``: it scales the rest)."""
        band = self._band(first)
        rest = [slice(0, band.start), slice(band.stop, len(self._index))]
        for part in rest:
            if part.stop > part.start:
                _scale(c[part] if self._rows else c[:, part], beta)
        return beta
