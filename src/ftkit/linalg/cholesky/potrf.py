"""Distributed Cholesky factorization and solve with ScaLAPACK's semantics: PDPOTRF and PDPOTRS, 0-based.

``pdpotrf(uplo, n, A, ia, ja)`` factors the symmetric positive definite ``A(ia:ia+n, ja:ja+n)`` in place:
``uplo == "L"`` overwrites its lower triangle (diagonal included) with ``L``, ``A = L L.T``; ``"U"`` its upper
triangle with ``U``, ``A = U.T U``. The other triangle is neither read nor written (bit for bit unchanged),
as in ScaLAPACK. A matrix that is not positive definite raises :class:`FactorizationError` on every rank with
ScaLAPACK's ``INFO``: the order ``minor`` (1-based, of the submatrix) of the first leading minor that is not
positive definite; A's triangle is then partly overwritten, as ScaLAPACK leaves it. ``pdpotrs`` solves
``A X = B`` with that factor (two triangular solves). float64 or float32.

Any layout works: when A's rows and columns are cut into the same blocks (``mb == nb`` and ``ia % mb == ja %
nb``) ``pdpotrf`` and ``ft_pdpotrf`` factor A's local piece in place (the strict upper triangles of its
diagonal blocks, which the updates overwrite, are kept aside and put back; ``ft_pdpotrf`` keeps a copy of A's
lower part for its recomputations); otherwise, and for ``uplo == "U"`` (factored as ``A.T = L L.T``), both
work on a block-cyclic copy with ``nb``-blocks, moved back at the end. The algorithm is in
:mod:`ftkit.linalg.cholesky._steps`.

Argument positions (errors: :class:`~ftkit.errors.PBLASArgumentError`): PDPOTRF: UPLO 1, N 2, A 3, IA 4, JA 5,
DESCA 6. PDPOTRS: UPLO 1, N 2, NRHS 3, A 4, IA 5, JA 6, DESCA 7, B 8, IB 9, JB 10, DESCB 11.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from ...errors import FactorizationError, PBLASArgumentError
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix
from ..pblas._redistribute import redistribute
from ..pblas._tri_sweep import diagonal_blocks
from ..pblas.add import trapezoid_mask
from ..pblas.gemm import _check_dim, _check_flag, _check_matrix
from ..pblas.triangular import apply_triangle, check_dtype
from ._lookahead import factor_panels
from ._steps import CholeskySteps

__all__ = ["FactorizationError", "pdpotrf", "pdpotrs", "CholeskyWork", "check_potrf_args"]


def check_potrf_args(routine: str, uplo: object, n: object, A: object, ia: object,
                     ja: object) -> tuple[str, int, int, int]:
    """Check PDPOTRF's arguments 1-6; return ``(uplo, n, ia, ja)``."""
    uplo = _check_flag(routine, 1, "uplo", uplo, "UL")
    n = _check_dim(routine, 2, "n", n)
    ia, ja = _check_matrix(routine, 3, "A", A, ia, ja, n, n, None)
    return uplo, n, ia, ja  # type: ignore[return-value]


class CholeskyWork:
    """The work copy of ``A(ia:ia+n, ja:ja+n)`` a factorization runs on, and how to put ``L`` back.

    ``W`` holds the matrix as a lower triangle (``A.T`` for ``uplo == "U"``) at ``(wi, wj)``; ``w`` is this
    process's piece of that submatrix, ``rows`` / ``cols`` its maps; ``steps`` the panel engine on it.
    :meth:`write_back` copies the factor into A's ``uplo`` triangle. ``in_place`` (plain ``pdpotrf``): when
    the layout is aligned, ``W`` is A itself (no copy in, none back: ~7 % of the call's CPU at n = 4096);
    only the strict upper triangles of the diagonal blocks, the updates' scratch, are kept aside and put back
    by :meth:`write_back`. :meth:`original` then returns the array ``saved(shape)`` returns (in place only),
    which A's lower block trapezoid (diagonal blocks whole) is copied into first, and only that (the rest is
    whatever the array held: nothing reads it): ``ft_pdpotrf``'s recomputations read A's values there;
    without it :meth:`original` has nothing to return. With ``copy_saved=False`` the copy is left to the
    caller, before anything changes ``w``: :meth:`save` makes it, or marks it made in :meth:`unsaved`'s
    array (``ft_pdpotrf`` copies it in its checksums' pass over A: one pass for both).
    """

    def __init__(self, uplo: str, n: int, A: DistributedMatrix, ia: int, ja: int, in_place: bool = False,
                 saved: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 copy_saved: bool = True) -> None:
        self.uplo, self.n, self.A, self.ia, self.ja = uplo, n, A, ia, ja
        d, g = A.desc, A.grid
        self.aligned = uplo == "L" and d.mb == d.nb and ia % d.mb == ja % d.nb
        self.in_place = in_place and self.aligned
        if self.in_place:
            self.W, self.wi, self.wj = A, ia, ja
        elif self.aligned:  # only the lower block trapezoid is read: the rest of the copy stays zero
            zero = np.zeros(A.local.shape, A.dtype, order="F")  # fresh pages: the untouched ones cost nothing
            self.W, self.wi, self.wj = DistributedMatrix(g, d, zero), ia, ja
            self.rows, self.cols = A.row_map(ia, n), A.col_map(ja, n)
            self._copy_lower(A.local_view(ia, ja, n, n), self.W.local_view(ia, ja, n, n), True)
        else:
            self.W, self.wi, self.wj = DistributedMatrix.zeros(g, n, n, mb=d.nb, nb=d.nb, dtype=A.dtype), 0, 0
            self.W.local[...] = redistribute(A, ia, ja, uplo == "U", self.W.row_map(0, n),
                                             self.W.col_map(0, n))
        self.w = self.W.local_view(self.wi, self.wj, n, n)
        self.steps = CholeskySteps(g, self.w, self.W.row_map(self.wi, n), self.W.col_map(self.wj, n))
        self.rows, self.cols = self.steps.rows, self.steps.cols  # the same maps, their tables made already
        #: the diagonal blocks of A, to put their strict upper triangles back (in place only)
        self._diagonals = [(self.steps.diagonal_block(k).copy(), k) for k in range(len(self.steps.panels))
                           if self.in_place and self.steps.owns_diagonal(k)]
        self._saved = saved(self.w.shape) if self.in_place and saved is not None else None
        self._filled = False
        if copy_saved:
            self.save()

    def unsaved(self) -> np.ndarray | None:
        """The array :meth:`original` will return while A's values are still to be copied into it
        (``copy_saved=False``, before :meth:`save`), else ``None``."""
        return self._saved if self._saved is not None and not self._filled else None

    def save(self, copied: bool = False) -> None:
        """Copy A's lower block trapezoid into the saved array (``in_place`` with ``saved``), unless it is
        there already; ``copied``: the caller has copied it into :meth:`unsaved`'s array (this only marks
        it). Call it before anything changes ``w``."""
        if self._saved is not None and not self._filled and not copied:
            self._copy_lower(self.w, self._saved, True)
        self._filled = True

    def original(self) -> np.ndarray:
        """Return this process's piece of the work matrix as it was before the factorization (A's values).

        Collective on A's grid when the work matrix is a redistributed copy (it is redistributed again).
        """
        if self._saved is not None:
            if not self._filled:
                raise RuntimeError("CholeskyWork(copy_saved=False): original() before save()")
            return self._saved
        if self.in_place:
            raise RuntimeError("CholeskyWork(in_place=True) overwrites A: it has no original to return")
        if self.aligned:
            return self.A.local_view(self.ia, self.ja, self.n, self.n)
        return redistribute(self.A, self.ia, self.ja, self.uplo == "U", self.rows, self.cols)

    def restore(self) -> None:
        """Put A's values back into its lower block trapezoid (in place, from ``saved``; a copy leaves A as it
        was anyway)."""
        if self._saved is not None:
            self._copy_lower(self._saved, self.w, True)

    def write_back(self) -> None:
        """Copy the factor (W's lower triangle, transposed for "U") into A's ``uplo`` triangle."""
        A, n = self.A, self.n
        view = A.local_view(self.ia, self.ja, n, n)
        for saved, k in self._diagonals:  # in place: undo what the updates wrote above the diagonal
            np.copyto(self.steps.diagonal_block(k), saved, where=_strict_upper(len(saved)))
        if self.in_place:
            return
        if self.aligned:
            self._copy_lower(self.w, view, False)
            return
        src = redistribute(self.W, 0, 0, self.uplo == "U", A.row_map(self.ia, n), A.col_map(self.ja, n))
        np.copyto(view, src, where=trapezoid_mask(A, self.ia, self.ja, n, n, self.uplo))

    def _copy_lower(self, src: np.ndarray, dst: np.ndarray, whole_diagonal: bool) -> None:
        """Copy this process's blocks of the lower block trapezoid from ``src`` to ``dst`` (pieces of the
        aligned submatrix): the blocks below the diagonal whole, the diagonal blocks whole or (not
        ``whole_diagonal``) their lower triangle only. Block by block: no mask over the whole piece."""
        g, rows, cols = self.A.grid, self.rows, self.cols
        for s, e in diagonal_blocks(rows):
            if int(cols.owners[s]) != g.mycol:
                continue
            cl = cols.range_on(g.mycol, s, e)
            below = rows.range_on(g.myrow, e, rows.n)
            dst[below, cl] = src[below, cl]
            if int(rows.owners[s]) == g.myrow:
                d = rows.range_on(g.myrow, s, e)
                if whole_diagonal:
                    dst[d, cl] = src[d, cl]
                else:
                    np.copyto(dst[d, cl], src[d, cl], where=np.tri(e - s, dtype=bool))

    def factor(self, routine: str, start: int = 0,
               after_panel: Callable[[int], None] | None = None) -> None:
        """Run the panels from ``start`` on (:func:`._lookahead.factor_panels`, with its look-ahead), calling
        ``after_panel(k)`` once panel ``k``'s update has finished, then write back.

        Raises
        ------
        FactorizationError
            On every rank, after writing back what was factored, if a leading minor is not positive definite.
        """
        bad = factor_panels(self.steps, start, after_panel)
        self.write_back()
        if bad >= 0:
            raise FactorizationError(routine, bad + 1, self.n)


@lru_cache(maxsize=8)
def _strict_upper(w: int) -> np.ndarray:
    """The mask of a ``w x w`` block's strict upper triangle (read-only, shared)."""
    mask = ~np.tri(w, dtype=bool)
    mask.setflags(write=False)
    return mask


@names_failures("PDPOTRF", "A")
def pdpotrf(uplo: str, n: int, A: DistributedMatrix, ia: int, ja: int) -> None:
    """Factor the symmetric positive definite ``A(ia:ia+n, ja:ja+n)`` as ``L L.T`` or ``U.T U`` in place.

    Collective on A's grid.

    Parameters
    ----------
    uplo
        ``"L"`` (lower triangle read, overwritten with L) or ``"U"`` (upper, with U).
    n
        Order of the submatrix (>= 0).
    A
        Distributed matrix (float64 or float32); ``ia, ja`` are 0-based offsets.

    Raises
    ------
    PBLASArgumentError
        With the ScaLAPACK argument position (see the module docstring).
    FactorizationError
        If a leading minor is not positive definite (``minor`` says which), on every rank.
    ProcessFailure
        If a process of the grid failed (MPI reported it: ULFM); the grid's communicators are revoked.
    """
    uplo, n, ia, ja = check_potrf_args("PDPOTRF", uplo, n, A, ia, ja)
    if n == 0:
        return
    CholeskyWork(uplo, n, A, ia, ja, in_place=True).factor("PDPOTRF")  # type: ignore[arg-type]


@names_failures("PDPOTRS", "B")
def pdpotrs(uplo: str, n: int, nrhs: int, A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix,
            ib: int, jb: int) -> None:
    """Solve ``A X = B`` with the factor from :func:`pdpotrf`; X overwrites ``B(ib:ib+n, jb:jb+nrhs)``.

    Collective on B's grid.

    Parameters
    ----------
    uplo
        The ``uplo`` the factor was computed with.
    n, nrhs
        Order of A's submatrix and number of right-hand sides.
    A, B
        The factored matrix and the right-hand sides, one grid, one dtype; offsets 0-based.

    Raises
    ------
    PBLASArgumentError
        With the ScaLAPACK argument position (see the module docstring).
    """
    r = "PDPOTRS"
    uplo = _check_flag(r, 1, "uplo", uplo, "UL")
    n, nrhs = _check_dim(r, 2, "n", n), _check_dim(r, 3, "nrhs", nrhs)
    if not isinstance(B, DistributedMatrix):
        raise PBLASArgumentError(r, 8, f"B must be a DistributedMatrix, got {type(B).__name__}")
    ia, ja = _check_matrix(r, 4, "A", A, ia, ja, n, n, B.desc.context)
    check_dtype(r, 7, "A", A, B.dtype)
    ib, jb = _check_matrix(r, 8, "B", B, ib, jb, n, nrhs, None)
    first, second = ("N", "T") if uplo == "L" else ("T", "N")
    apply_triangle("L", uplo, first, "N", n, nrhs, 1.0, A, ia, ja, B, ib, jb, solve=True)
    apply_triangle("L", uplo, second, "N", n, nrhs, 1.0, A, ia, ja, B, ib, jb, solve=True)
