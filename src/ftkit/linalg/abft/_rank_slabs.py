"""The checked rank-k update behind :func:`~ftkit.linalg.abft.ft_pdsyrk` and ``ft_pdsyr2k``: only the
referenced triangle is computed.

C's columns are cut into slabs as the plain routines cut them (:mod:`ftkit.linalg.pblas.rank_k`), at
distribution-block boundaries where the slab width allows: the part of a slab strictly inside the triangle
(below its diagonal square for "L", above it for "U") is one checked product (``ft_pdgemm``'s machinery:
checksums in the panels, location, correction, recomputation), and so is the diagonal square, whose
excluded triangle is zero in the work copy (so its blocks check too). So at most ``1/slabs`` of the product
is computed twice, as in the plain routine, where one product of the whole square cost twice the flops.

The rectangles are computed into C itself, the diagonal squares into a work copy of the squares alone
whose excluded triangle is zero (only their ``uplo`` triangle is copied into C): besides the checked
products, a pass over each square, none over the rest of C. A piece that could not be corrected does not
stop the others (C then holds the whole result, flagged, as ``ft_pdgemm`` leaves it; the caller raises).
The pieces' reports are merged into one :class:`~ftkit.linalg.ABFTReport` whose events are in the
coordinates of the whole ``n x n`` product (block indices of its segmentation, positions in C's
submatrix). An injection plan applies to one piece, drawn from the plan's seed (the same on every process)
among the pieces every process holds part of (so the flip is made whatever rank the plan draws): a plan
describes the flips of one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ...errors import ABFTError
from ...inject import InjectionPlan
from .. import checksums
from ..checksums._kernels import copy_kept
from ..matrix import DistributedMatrix
from ..pblas.rank_k import SLABS
from .product import Term, _ft_gemm
from .report import ABFTReport, BlockEvent

__all__ = ["checked_rank_update", "slab_bounds", "kept_rows"]

#: A piece of the triangle: submatrix rows ``r0:r1`` and columns ``c0:c1``.
Piece = tuple[int, int, int, int]


def slab_bounds(n: int, offset: int, nb: int, slabs: int = SLABS) -> list[int]:
    """Column bounds ``0 = b0 < b1 < ... = n`` of at most ``slabs`` slabs, each inner bound moved to the
    nearest distribution-block boundary (global index ``offset + b`` a multiple of ``nb``) when one is
    closer than half a slab."""
    nslab = max(1, min(slabs, n))
    width = -(-n // nslab)
    bounds = [0]
    for b in range(width, n, width):
        aligned = b - (offset + b) % nb
        if (offset + b) % nb * 2 > nb:
            aligned += nb
        if 2 * abs(aligned - b) < width and bounds[-1] < aligned < n:
            b = aligned
        if b > bounds[-1]:
            bounds.append(b)
    return bounds + [n]


def _pieces(uplo: str, n: int, bounds: list[int]) -> list[Piece]:
    """The off-diagonal rectangle (if any) and the diagonal square of every slab."""
    out: list[Piece] = []
    for c0, c1 in zip(bounds[:-1], bounds[1:], strict=True):
        if uplo == "L" and c1 < n:
            out.append((c1, n, c0, c1))
        if uplo == "U" and c0 > 0:
            out.append((0, c0, c0, c1))
        out.append((c0, c1, c0, c1))
    return out


def _injected_piece(pieces: list[Piece], C: DistributedMatrix, ic: int, jc: int, seed: int) -> int:
    """The piece an injection plan applies to: drawn from ``seed`` among those every process holds part of
    (else the largest). Index arithmetic only: the same on every process."""
    g = C.grid
    full = [i for i, (r0, r1, c0, c1) in enumerate(pieces)
            if all(C.row_map(ic + r0, r1 - r0).count(p) for p in range(g.nprow))
            and all(C.col_map(jc + c0, c1 - c0).count(q) for q in range(g.npcol))]  # fmt: skip
    if not full:
        areas = [(r1 - r0) * (c1 - c0) for r0, r1, c0, c1 in pieces]
        return areas.index(max(areas))
    return full[int(np.random.default_rng((seed, 2)).integers(len(full)))]


def _merge(reports: list[tuple[Piece, ABFTReport]], C: DistributedMatrix, ic: int, jc: int,
           n: int) -> ABFTReport:
    """One report for the whole triangle: totals summed, events moved to the whole product's coordinates."""
    first = reports[0][1]
    d = C.desc
    events: list[BlockEvent] = []
    if any(rep.events for _, rep in reports):  # the whole product's segments: only to place events
        rows = checksums.segment_bounds(np.arange(n), ic, d.mb, max(first.bs, 1))
        cols = checksums.segment_bounds(np.arange(n), jc, d.nb, max(first.bs, 1))
    for (r0, _, c0, _), rep in reports:
        for e in rep.events:
            i, j = r0 + e.row0, c0 + e.col0
            el = None if e.element is None else (r0 + e.element[0], c0 + e.element[1])
            events.append(replace(e, row_block=int(np.searchsorted(rows, i, side="right")) - 1,
                                  col_block=int(np.searchsorted(cols, j, side="right")) - 1, row0=i, col0=j,
                                  element=el))  # fmt: skip
    reps = [rep for _, rep in reports]
    return ABFTReport(
        blocks_checked=sum(r.blocks_checked for r in reps), detected=sum(r.detected for r in reps),
        corrected=sum(r.corrected for r in reps), rounding_alarms=sum(r.rounding_alarms for r in reps),
        events=tuple(sorted(events, key=lambda e: (e.row_block, e.col_block, e.row0, e.col0))),
        max_ratio=max(r.max_ratio for r in reps), correct_seconds=sum(r.correct_seconds for r in reps),
        threshold=first.threshold, bs=first.bs, unchecked=sum(r.unchecked for r in reps),
    )


def kept_rows(C: DistributedMatrix, i: int, j: int, w: int, uplo: str) -> np.ndarray:
    """The ``uplo`` triangle of this process's part of the square ``C(i:i+w, j:j+w)`` as row ranges:
    ``(2, ncols)`` int64, rows ``[0, q]:[1, q]`` of local column ``q`` (as ``trapezoid_mask``: ``r >= c`` for
    "L", ``r <= c`` for "U", in square indices)."""
    r = C.row_map(i, w).indices_on(C.grid.myrow)
    c = C.col_map(j, w).indices_on(C.grid.mycol)
    if uplo == "L":
        return np.array([np.searchsorted(r, c, side="left"), np.full(len(c), len(r))], dtype=np.int64)
    return np.array([np.zeros(len(c), np.int64), np.searchsorted(r, c, side="right")], dtype=np.int64)


def _shift(term: Term, trans: str, r0: int, c0: int) -> Term:
    """The term's operands of the piece at submatrix rows ``r0:`` and columns ``c0:`` of the product."""
    X, ix, jx, Y, iy, jy = term
    return (X, ix + r0, jx, Y, iy + c0, jy) if trans == "N" else (X, ix, jx + r0, Y, iy, jy + c0)


def checked_rank_update(uplo: str, trans: str, n: int, k: int, alpha: float, X: DistributedMatrix, ix: int,
                        jx: int, Y: DistributedMatrix, iy: int, jy: int, beta: float, C64: DistributedMatrix,
                        ic: int, jc: int, bs: int | None, tol: float | str | None, mode: str,
                        inject: InjectionPlan | None, unchecked_is_error: bool, C: DistributedMatrix,
                        more: Sequence[Term] = ()) -> ABFTReport:
    """``alpha op(X) op(Y).T + beta C`` on the ``uplo`` triangle of ``C64(ic:ic+n, jc:jc+n)``, checked, into
    ``C`` (``C64`` itself, or C when ``C64`` is its float64 copy); returns the merged report (collective).
    ``more``: further terms ``(X, ix, jx, Y, iy, jy)`` added to every piece's product (PDSYR2K's second).
    Blocks left uncorrected or unchecked are in the report, never raised here."""
    g = C64.grid
    d = C64.desc
    work = DistributedMatrix.zeros(g, d.m, d.n, mb=d.mb, nb=d.nb, rsrc=d.rsrc, csrc=d.csrc)  # the squares
    ta, tb = ("N", "T") if trans == "N" else ("T", "N")
    if bs is None:  # chosen for the whole inner dimension: every term's k adds to the rounding
        bs = checksums.choose_bs(d.mb, d.nb, k * (1 + len(more)))
    pieces = _pieces(uplo, n, slab_bounds(n, jc, d.nb))
    # a diagonal square's excluded triangle is never read: zero in the work copy, so its blocks check too
    keeps = {c0: kept_rows(C64, ic + c0, jc + c0, c1 - c0, uplo) for r0, _, c0, c1 in pieces if r0 == c0}
    target = _injected_piece(pieces, C64, ic, jc, inject.seed) if inject is not None else -1
    reports = []
    for p, (r0, r1, c0, c1) in enumerate(pieces):
        shifted = [_shift(term, trans, r0, c0) for term in [(X, ix, jx, Y, iy, jy), *more]]
        # a rectangle inside the triangle goes into C64 itself, a square into the work copy, which is filled
        # from C64's square (unchanged until the end) in the pass that sums it
        fill = (C64.local_view(ic + c0, jc + c0, c1 - c0, c1 - c0), keeps[c0]) if r0 == c0 else None
        try:
            rep = _ft_gemm(ta, tb, r1 - r0, c1 - c0, k, alpha, *shifted[0], beta,
                           work if r0 == c0 else C64, ic + r0, jc + c0, bs, tol, mode, None, None,
                           inject if p == target else None, False, more_terms=shifted[1:],
                           c_fill=fill)  # fmt: skip
        except ABFTError as exc:  # the same on every process: the other pieces are still done
            rep = exc.report  # type: ignore[assignment]
        reports.append(((r0, r1, c0, c1), rep))
    for r0, r1, c0, c1 in pieces:  # the squares' triangles (and, for a float32 C, everything) into C
        dst = C.local_view(ic + r0, jc + c0, r1 - r0, c1 - c0)
        if r0 == c0:
            copy_kept(work.local_view(ic + r0, jc + c0, r1 - r0, c1 - c0), dst, keeps[c0])
        elif C is not C64:
            dst[...] = C64.local_view(ic + r0, jc + c0, r1 - r0, c1 - c0)
    return _merge(reports, C64, ic, jc, n)
