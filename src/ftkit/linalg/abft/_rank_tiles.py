"""The checked rank-k update behind :func:`~ftkit.linalg.abft.ft_pdsyrk` and ``ft_pdsyr2k``: only the
referenced triangle is computed.

As the plain routines (:mod:`ftkit.linalg.pblas.rank_k`): every operand is brought into C's layout once per
call, and one SUMMA over the inner dimension sends each panel once, with ``ft_pdgemm``'s checksums inside
(checksum rows of every row segment of op(X), columns of every column segment of op(Y).T: one prediction of
every block). Each process multiplies the panels only into its tiles of the triangle
(:func:`~ftkit.linalg.pblas.rank_k.triangle_tiles`: the plain routines' tiles, so an error-free result is
theirs bit for bit; cut by distribution blocks, which checked blocks never straddle, so a block is wholly
computed or not at all); only the blocks in the tiles are summed, verified, located, corrected or
recomputed (C0 read and copied there alone). The diagonal blocks' elements outside the triangle are set to
zero first (they are never read, so C0 counts as zero there and those blocks check too) and put back bit
for bit afterwards. A block left uncorrected is in the report, never raised here (C then holds the whole,
flagged, result; the caller raises). A "C" flip of an injection plan lands inside the triangle.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ABFTError
from ...inject import InjectionPlan
from .. import checksums
from ..matrix import DistributedMatrix
from ..pblas._panel_buffers import release_pool
from ..pblas.rank_k import aligned_terms, triangle_tiles
from .product import Term, _ft_gemm
from .report import ABFTReport

__all__ = ["checked_rank_update"]


def checked_rank_update(uplo: str, trans: str, n: int, k: int, alpha: float, X: DistributedMatrix, ix: int,
                        jx: int, Y: DistributedMatrix, iy: int, jy: int, beta: float, C64: DistributedMatrix,
                        ic: int, jc: int, bs: int | None, tol: float | str | None, mode: str,
                        inject: InjectionPlan | None, unchecked_is_error: bool, C: DistributedMatrix,
                        more: Sequence[Term] = ()) -> ABFTReport:
    """``alpha op(X) op(Y).T + beta C`` on the ``uplo`` triangle of ``C64(ic:ic+n, jc:jc+n)``, checked, into
    ``C`` (``C64`` itself, or C when ``C64`` is its float64 copy); returns the report (collective).
    ``more``: further terms ``(X, ix, jx, Y, iy, jy)`` added to the product (PDSYR2K's second).
    Blocks left uncorrected or unchecked are in the report, never raised here."""
    d = C64.desc
    ta, tb = ("N", "T") if trans == "N" else ("T", "N")
    if bs is None:  # chosen for the whole inner dimension: every term's k adds to the rounding
        bs = checksums.choose_bs(d.mb, d.nb, k * (1 + len(more)))
    terms = [(X, ix, jx, Y, iy, jy), *more]
    stairs = triangle_tiles(C64, ic, jc, n, uplo)  # the plain routine's tiles: unions of checked blocks
    c = C64.local_view(ic, jc, n, n)
    saved = stairs.save(c)
    out = C.local_view(ic, jc, n, n)
    saved_out = saved if C is C64 else stairs.save(out)
    stairs.zero(c)
    pool: dict[object, np.ndarray] = {}  # the moved operands, in buffers kept between calls
    try:
        aligned = aligned_terms(trans, terms, n, k, C64, ic, jc, pool)
        return _ft_gemm(ta, tb, n, n, k, alpha, *terms[0], beta, C64, ic, jc, bs, tol, mode, None, None,
                        inject, False, more_terms=terms[1:], aligned=aligned, stairs=stairs)  # fmt: skip
    except ABFTError as exc:  # the same on every process: the caller raises it with its own name
        return exc.report  # type: ignore[return-value]
    finally:
        release_pool(pool)  # the recomputation, the last reader of the operands, is done
        stairs.restore(c, saved)
        if C is not C64:  # the triangle rounded into C, C's own values outside it
            for rs, cs in stairs.tiles:
                out[rs, cs] = c[rs, cs]
            stairs.restore(out, saved_out)
