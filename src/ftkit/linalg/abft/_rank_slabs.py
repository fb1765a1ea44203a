"""The checked rank-k update behind :func:`~ftkit.linalg.abft.ft_pdsyrk` and ``ft_pdsyr2k``: only the
referenced triangle is computed.

C's columns are cut into slabs as the plain routines cut them (:mod:`ftkit.linalg.pblas.rank_k`), at
distribution-block boundaries where the slab width allows, and every operand is brought into C's layout once
per call (a transposed one redistributed once, not once per piece). Each slab's part inside the triangle, its
diagonal square included, is one checked product into C itself (``ft_pdgemm``'s machinery: checksums in the
panels, location, correction, recomputation): the square's excluded triangle is set to zero first (it is
never read, so C0 counts as zero there and those blocks check too) and put back bit for bit afterwards. So
at most ``1/slabs`` of the product is computed in vain, as in the plain routine, and each operand column is
encoded and sent once per slab. A piece that could not be corrected does not stop the others (C then holds
the whole result, flagged, as ``ft_pdgemm`` leaves it; the caller raises).
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
from ..matrix import DistributedMatrix
from ..pblas.rank_k import Piece, aligned_terms, excluded_triangle, piece_operands, slab_bounds, slab_pieces
from .product import Term, _ft_gemm
from .report import ABFTReport, BlockEvent

__all__ = ["checked_rank_update", "slab_bounds"]


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
    d = C64.desc
    ta, tb = ("N", "T") if trans == "N" else ("T", "N")
    if bs is None:  # chosen for the whole inner dimension: every term's k adds to the rounding
        bs = checksums.choose_bs(d.mb, d.nb, k * (1 + len(more)))
    terms = [(X, ix, jx, Y, iy, jy), *more]
    pieces = slab_pieces(uplo, n, slab_bounds(n, jc, d.nb))
    whole = aligned_terms(trans, terms, n, k, C64, ic, jc)  # each operand moved once, not once per piece
    target = _injected_piece(pieces, C64, ic, jc, inject.seed) if inject is not None else -1
    reports = []
    for p, piece in enumerate(pieces):
        r0, r1, c0, c1 = piece
        # the square's other triangle is never read: zero while the piece is computed (so its blocks check
        # too), then put back bit for bit (for a float32 C, C's own values)
        square, outside = excluded_triangle(C64, ic, jc, uplo, piece)
        kept = square[outside]
        kept_c = kept if C is C64 else excluded_triangle(C, ic, jc, uplo, piece)[0][outside]
        square[outside] = 0.0
        shifted = [_shift(term, trans, r0, c0) for term in terms]
        try:
            rep = _ft_gemm(ta, tb, r1 - r0, c1 - c0, k, alpha, *shifted[0], beta, C64, ic + r0, jc + c0, bs,
                           tol, mode, None, None, inject if p == target else None, False,
                           more_terms=shifted[1:],
                           aligned=[piece_operands(w, C64, ic, jc, piece) for w in whole])  # fmt: skip
        except ABFTError as exc:  # the same on every process: the other pieces are still done
            rep = exc.report  # type: ignore[assignment]
        square[outside] = kept
        if C is not C64:
            C.local_view(ic + r0, jc + c0, r1 - r0, c1 - c0)[...] = C64.local_view(ic + r0, jc + c0, r1 - r0,
                                                                                  c1 - c0)
            excluded_triangle(C, ic, jc, uplo, piece)[0][outside] = kept_c
        reports.append((piece, rep))
    return _merge(reports, C64, ic, jc, n)
