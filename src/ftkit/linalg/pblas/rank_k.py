"""PBLAS symmetric rank-k updates PDSYRK and PDSYR2K with ScaLAPACK semantics, 0-based offsets.

``C := alpha op(A) op(A).T + beta C`` (PDSYRK) or ``C := alpha op(A) op(B).T + alpha op(B) op(A).T + beta C``
(PDSYR2K) on the ``uplo`` triangle (with the diagonal) of ``C(ic:ic+n, jc:jc+n)`` only: the other triangle of
C stays bit for bit. ``op(X)`` is ``X`` (``n x k``, trans "N") or ``X.T`` (X is ``k x n``, trans "T"/"C").
``alpha == 0`` or ``k == 0`` scales the triangle by ``beta`` without reading A or B; ``beta == 0`` does not
read C. float64 or float32 (A and B of C's dtype).

How: each operand is brought into C's layout once per call (a transposed one redistributed once; PDSYR2K's
two in one message round), and one SUMMA pipeline over the inner dimension of every term sends every panel
once; each process multiplies a panel only into its tiles of
the triangle (:func:`staircase`: per distribution block column, the rows from its diagonal block on), so only
the diagonal blocks' other triangle is computed in vain, and that is put back bit for bit.

Argument positions in the PBLAS calling sequence (errors: :class:`~ftkit.errors.PBLASArgumentError`):

- PDSYRK: UPLO 1, TRANS 2, N 3, K 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, BETA 10, C 11, IC 12, JC 13, DESCC 14.
- PDSYR2K: UPLO 1, TRANS 2, N 3, K 4, ALPHA 5, A 6, IA 7, JA 8, DESCA 9, B 10, IB 11, JB 12, DESCB 13,
  BETA 14, C 15, IC 16, JC 17, DESCC 18.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PBLASArgumentError
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix, segment_bounds
from ._operands import AlignedOperands, aligned_operands_many
from ._panel_buffers import release_pool
from ._summa import run_summa
from .add import trapezoid_mask
from .gemm import _check_dim, _check_flag, _check_matrix, _check_scalar, _scale
from .triangular import check_dtype

__all__ = ["pdsyrk", "pdsyr2k", "check_rank_args", "rank_update", "Staircase", "staircase", "triangle_tiles",
           "aligned_terms"]

#: Fewest columns of a tile (:func:`staircase`) when distribution blocks are narrower: more, smaller GEMMs
#: beyond that cost more in calls than the few elements outside the triangle they skip.
MIN_TILE = 16

#: One term ``op(X) op(Y).T`` of the update: ``(X, ix, jx, Y, iy, jy)``.
Term = tuple[DistributedMatrix, int, int, DistributedMatrix, int, int]


def check_rank_args(routine, uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc):  # type: ignore[no-untyped-def]
    """Check PDSYR2K's arguments (``B=None``: PDSYRK's, positions shifted) as PBLAS does; return them
    normalized: ``(uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc)`` with "C" mapped to "T".

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position of the first illegal argument.
    """
    r = routine
    uplo = _check_flag(r, 1, "uplo", uplo, "UL")
    trans = _check_flag(r, 2, "trans", trans, "NTC").replace("C", "T")
    n, k = _check_dim(r, 3, "n", n), _check_dim(r, 4, "k", k)
    alpha = _check_scalar(r, 5, "alpha", alpha)
    shift = 0 if B is None else 4
    if not isinstance(C, DistributedMatrix):
        raise PBLASArgumentError(r, 11 + shift, f"C must be a DistributedMatrix, got {type(C).__name__}")
    rows, cols = (n, k) if trans == "N" else (k, n)
    ia, ja = _check_matrix(r, 6, "A", A, ia, ja, rows, cols, C.desc.context)
    check_dtype(r, 9, "A", A, C.dtype)
    if B is not None:
        ib, jb = _check_matrix(r, 10, "B", B, ib, jb, rows, cols, C.desc.context)
        check_dtype(r, 13, "B", B, C.dtype)
    beta = _check_scalar(r, 10 + shift, "beta", beta)
    ic, jc = _check_matrix(r, 11 + shift, "C", C, ic, jc, n, n, None)
    return uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc


@dataclass
class Staircase:
    """This process's part of the ``uplo`` triangle of ``C(ic:ic+n, jc:jc+n)`` as rectangles of its local
    view: ``tiles`` ``(rows, cols)`` slices the update computes (every triangle element is in one; a tile
    spans whole row and column segments of the bounds it was cut by), ``edges`` ``(rows, cols, mask)`` the
    parts of tiles with elements outside the triangle (``mask`` True there: computed over, then put back),
    ``keep`` ``(2, ncols)`` int64, the tile rows ``keep[0, j]:keep[1, j]`` of local column ``j``, and
    ``inner`` the largest part of a tile wholly inside the triangle (``(rows, cols)``, possibly empty)."""

    tiles: list[tuple[slice, slice]]
    edges: list[tuple[slice, slice, np.ndarray]]
    keep: np.ndarray
    inner: tuple[slice, slice]

    def save(self, c: np.ndarray) -> list[np.ndarray]:
        """Copies of ``c``'s edges (``c`` shaped like the local view)."""
        return [c[rs, cs].copy() for rs, cs, _ in self.edges]

    def restore(self, c: np.ndarray, saved: list[np.ndarray]) -> None:
        """Put back the elements outside the triangle from :meth:`save`'s copies, bit for bit."""
        for (rs, cs, mask), old in zip(self.edges, saved, strict=True):
            np.copyto(c[rs, cs], old, where=mask)

    def zero(self, c: np.ndarray) -> None:
        """Set the elements outside the triangle to zero (so a C0 there counts as zero: never read)."""
        for rs, cs, mask in self.edges:
            np.copyto(c[rs, cs], 0.0, where=mask)


def _column_groups(ci: np.ndarray, cb: np.ndarray, runs: np.ndarray, span: int) -> list[tuple[int, int]]:
    """Local column ranges of the tiles: whole segments of ``cb``; a tile takes the next distribution block
    (``runs``: their local bounds) while it would span fewer than ``span`` submatrix indices."""
    ends = {int(s): int(e) for s, e in zip(runs[:-1], runs[1:], strict=True)}
    groups: list[list[int]] = []
    for s in range(len(cb) - 1):
        q0, q1 = int(cb[s]), int(cb[s + 1])
        if groups and (q0 not in ends or ci[ends[q0] - 1] - ci[groups[-1][0]] < span):
            groups[-1][1] = q1
        else:
            groups.append([q0, q1])
    return [(q0, q1) for q0, q1 in groups]


def staircase(C: DistributedMatrix, ic: int, jc: int, n: int, uplo: str, rb: np.ndarray,
              cb: np.ndarray) -> Staircase:
    """Cut this process's part of C's ``uplo`` triangle into tiles by the row and column segment bounds
    ``rb`` / ``cb`` of its local view (segments never straddle distribution blocks).

    The columns of a tile are whole distribution blocks spanning fewer than ``max(nb, MIN_TILE)`` submatrix
    indices; its rows run from the segment holding its first column's diagonal to the end ("L"), or from
    the start to the segment holding its last column's diagonal ("U"). Only the elements of those diagonal
    segments beyond the diagonal are computed in vain.
    """
    g = C.grid
    ri = C.row_map(ic, n).indices_on(g.myrow)
    ci = C.col_map(jc, n).indices_on(g.mycol)
    nloc = len(ri)
    tiles, edges = [], []
    keep = np.zeros((2, len(ci)), np.int64)
    inner, area = (slice(0, 0), slice(0, 0)), 0
    for q0, q1 in _column_groups(ci, cb, segment_bounds(ci, jc, C.desc.nb), max(C.desc.nb, MIN_TILE)):
        cols = slice(q0, q1)
        if uplo == "L":
            first = int(np.searchsorted(ri, ci[q0]))
            r0 = int(rb[np.searchsorted(rb, first, side="right") - 1]) if first < nloc else nloc
            r1, e0, e1 = nloc, r0, max(r0, int(np.searchsorted(ri, ci[q1 - 1])))
            mask = ri[e0:e1, None] < ci[None, q0:q1]
        else:
            last = int(np.searchsorted(ri, ci[q1 - 1], side="right"))
            r0, r1 = 0, int(rb[np.searchsorted(rb, last, side="left")]) if last > 0 else 0
            e1 = r1
            e0 = min(e1, int(np.searchsorted(ri, ci[q0], side="right")))
            mask = ri[e0:e1, None] > ci[None, q0:q1]
        keep[:, q0:q1] = [[r0], [r1]]
        rows = slice(e1, r1) if uplo == "L" else slice(r0, e0)  # every row on or past every diagonal
        if (rows.stop - rows.start) * (q1 - q0) > area:
            inner, area = (rows, cols), (rows.stop - rows.start) * (q1 - q0)
        if r1 > r0:
            tiles.append((slice(r0, r1), cols))
        if mask.any():
            edges.append((slice(e0, e1), cols, mask))
    return Staircase(tiles, edges, keep, inner)


def triangle_tiles(C: DistributedMatrix, ic: int, jc: int, n: int, uplo: str) -> Staircase:
    """The tiles PDSYRK and PDSYR2K multiply into: :func:`staircase` cut by distribution blocks (whole
    runs of a block on this process). ``ft_pdsyrk`` / ``ft_pdsyr2k`` use the same tiles, so their local
    GEMMs are the plain routines' and an error-free result is the plain one bit for bit."""
    g, d = C.grid, C.desc
    return staircase(C, ic, jc, n, uplo, segment_bounds(C.row_map(ic, n).indices_on(g.myrow), ic, d.mb),
                     segment_bounds(C.col_map(jc, n).indices_on(g.mycol), jc, d.nb))


def aligned_terms(trans: str, terms: list[Term], n: int, k: int, C: DistributedMatrix, ic: int,
                  jc: int, pool: dict[object, np.ndarray] | None = None) -> list[AlignedOperands]:
    """Every term's operands of the whole ``n x n`` product ``op(X) op(Y).T``, aligned with
    ``C(ic:ic+n, jc:jc+n)`` (collective): each operand is moved at most once per call, all the terms' moves
    in one message round; into buffers held by ``pool`` if given (the caller releases it, see
    :func:`~ftkit.linalg.pblas._operands.aligned_operands_many`)."""
    ta, tb = ("N", "T") if trans == "N" else ("T", "N")
    return aligned_operands_many([(ta, tb, n, n, k, X, ix, jx, Y, iy, jy, C, ic, jc)
                                  for X, ix, jx, Y, iy, jy in terms], pool=pool)


def rank_update(uplo: str, trans: str, n: int, k: int, alpha: float, terms: list[Term], beta: float,
                C: DistributedMatrix, ic: int, jc: int) -> None:
    """Update the ``uplo`` triangle of ``C(ic:ic+n, jc:jc+n)`` by the ``terms`` (checked arguments)."""
    if n == 0 or ((alpha == 0.0 or k == 0) and beta == 1.0):
        return
    c = C.local_view(ic, jc, n, n)
    if alpha == 0.0 or k == 0:
        scaled = c.copy()
        _scale(scaled, beta)
        c[...] = np.where(trapezoid_mask(C, ic, jc, n, n, uplo), scaled, c)
        return
    pool: dict[object, np.ndarray] = {}  # the moved operands, in buffers kept between calls
    try:
        ops = aligned_terms(trans, terms, n, k, C, ic, jc, pool)
        st = triangle_tiles(C, ic, jc, n, uplo)
        saved = st.save(c)
        if beta != 0.0:  # beta == 0: left to the first local GEMM of each tile, as pdgemm does
            for rs, cs in st.tiles:
                _scale(c[rs, cs], beta)
        first, rest = ops[0], ops[1:]
        run_summa(C.grid, first.a, first.b, c, first.ka, first.kb, alpha, beta=0.0 if beta == 0.0 else 1.0,
                  tiles=st.tiles, more=[(op.a, op.b, op.ka, op.kb) for op in rest])
        st.restore(c, saved)
    finally:
        release_pool(pool)  # no transfer reads or writes the operands themselves (panels are copies)


@names_failures("PDSYRK", "C", "resilient_pdsyrk")
def pdsyrk(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
           beta: float, C: DistributedMatrix, ic: int, jc: int) -> None:
    """Compute ``C = alpha * op(A) @ op(A).T + beta * C`` on the ``uplo`` triangle of ``C(ic:ic+n, jc:jc+n)``.

    Collective on C's grid.

    Parameters
    ----------
    uplo
        ``"U"`` or ``"L"``: the triangle of C updated (the other one is neither read nor written).
    trans
        ``"N"`` (A is ``n x k``) or ``"T"`` / ``"C"`` (A is ``k x n``, ``op(A) = A.T``).
    n, k
        Order of C's submatrix and the inner dimension.
    alpha, beta
        Scalars; ``alpha == 0`` or ``k == 0`` does not read A, ``beta == 0`` does not read C.
    A, C
        Distributed matrices on one grid, of one dtype; ``ia, ja, ic, jc`` are 0-based offsets.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    uplo, trans, n, k, alpha, ia, ja, _, _, beta, ic, jc = check_rank_args(
        "PDSYRK", uplo, trans, n, k, alpha, A, ia, ja, None, 0, 0, beta, C, ic, jc)
    rank_update(uplo, trans, n, k, alpha, [(A, ia, ja, A, ia, ja)], beta, C, ic, jc)


@names_failures("PDSYR2K", "C", "resilient_pdsyr2k")
def pdsyr2k(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
            B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int,
            jc: int) -> None:
    """Compute ``C = alpha * op(A) op(B).T + alpha * op(B) op(A).T + beta * C`` on C's ``uplo`` triangle.

    Collective on C's grid. Arguments as :func:`pdsyrk`, plus B (shaped like A) at ``(ib, jb)``.

    Raises
    ------
    PBLASArgumentError
        With the PBLAS argument position (see the module docstring).
    """
    uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_rank_args(
        "PDSYR2K", uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    rank_update(uplo, trans, n, k, alpha, [(A, ia, ja, B, ib, jb), (B, ib, jb, A, ia, ja)], beta, C, ic, jc)
