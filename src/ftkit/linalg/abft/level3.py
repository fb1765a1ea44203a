"""FT_PDTRSM, FT_PDTRMM, FT_PDSYRK, FT_PDSYR2K: the level-3 routines protected by block checksums.

Each takes its plain routine's arguments (:mod:`ftkit.linalg.pblas.triangular`,
:mod:`ftkit.linalg.pblas.rank_k`) plus ``bs``, ``tol``, ``mode``, ``inject`` and ``unchecked_is_error`` as
:func:`~ftkit.linalg.abft.ft_pdgemm` has them, and returns the same :class:`~ftkit.linalg.abft.ABFTReport`
(identical on every process).

- ``ft_pdtrmm`` runs the plain sweep (only the triangle is multiplied) and checks the result's blocks with
  ``ft_pdgemm``'s checksums (:mod:`ftkit.linalg.abft._tri_product`): location and O(1) correction of a
  single wrong element, the flagged column segments computed again. Injection points as ``ft_pdtrsm``'s.
- ``ft_pdsyrk`` and ``ft_pdsyr2k`` compute only C's ``uplo`` triangle, as the plain routines do: one
  checked SUMMA whose panels are multiplied only into each process's tiles of the triangle
  (:mod:`ftkit.linalg.abft._rank_tiles`), ``alpha op(A) op(A).T + beta C`` and
  ``alpha op(A) op(B).T + alpha op(B) op(A).T + beta C`` (both terms into the same tiles, their checksums
  into one prediction, C verified once, only the tiles' blocks read). Event coordinates are those of the
  product (B's or C's submatrix).
- ``ft_pdtrsm`` runs the plain solve and checks the checksums the solution must satisfy, per block
  (:mod:`ftkit.linalg.abft._solve_sums`): a single wrong element of the solution is located from them and
  fixed in O(1) (``"located"``); otherwise the flagged column segments are solved again (``"recomputed"``;
  a process column that holds one solves all its columns again, as BLAS grouped them in the first solve).
  Injection points: ``"A"`` (the solve's copy of the triangle, after its checksums), ``"B"`` (``alpha B``
  before the solve), ``"C"`` step 0 (before the solve) or 1 (the solution, before the check).

float32 matrices are checked in float64 (the bounds are float64's) and the result is rounded to float32
after the check. Positions of ``bs`` (then ``tol``, ``mode``, ``inject``): 16 for TRSM / TRMM, 15 for SYRK,
19 for SYR2K.
"""

from __future__ import annotations

import numpy as np

from ...errors import ABFTError
from ...inject import InjectionPlan
from .. import checksums
from .._grid_failure import names_failures
from ..matrix import DistributedMatrix
from ..pblas._panel_buffers import release_pool
from ..pblas._redistribute import redistribute
from ..pblas._tri_sweep import sweep, tri_cols, triangle_operand
from ..pblas.rank_k import check_rank_args
from ..pblas.triangular import check_tri_args
from ._blocks import Threshold
from ._rank_tiles import checked_rank_update
from ._solve_sums import SolveChecksums
from ._tri_product import checked_tri_multiply, segmentation, triangle_with_checksums
from .product import Term
from .report import ABFTReport, BlockEvent, check_ft_args

__all__ = ["ft_pdtrsm", "ft_pdtrmm", "ft_pdsyrk", "ft_pdsyr2k"]


def _as64(M: DistributedMatrix) -> DistributedMatrix:
    """M itself if float64, else a float64 copy."""
    return M if M.dtype == np.float64 else DistributedMatrix(M.grid, M.desc, M.local.astype(np.float64))


def _store(M: DistributedMatrix, M64: DistributedMatrix, i: int, j: int, m: int, n: int) -> None:
    """Copy ``M64``'s submatrix into M's, rounding to M's dtype (nothing to do if they are one matrix)."""
    if M is not M64:
        M.local_view(i, j, m, n)[...] = M64.local_view(i, j, m, n)


@names_failures("FT_PDTRMM", "B", "resilient_pdtrmm")
def ft_pdtrmm(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float,
              A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int, *,
              bs: int | None = None, tol: float | str | None = None, mode: str = "correct",
              inject: InjectionPlan | None = None, unchecked_is_error: bool = False) -> ABFTReport:
    """Compute :func:`~ftkit.linalg.pdtrmm` (``B = alpha op(A) B`` or ``alpha B op(A)``), checked.

    The plain routine's sweep, which multiplies by the triangle only, with block checksums around it
    (:mod:`ftkit.linalg.abft._tri_product`): a single wrong element of a block is located and fixed in O(1)
    (``"located"``), other flagged blocks are computed again (``"recomputed"``). ``bs=None`` chooses the
    block size as ``ft_pdgemm`` does. Returns the :class:`~ftkit.linalg.abft.ABFTReport` (the same on every
    process; events in B's submatrix coordinates).

    Raises
    ------
    PBLASArgumentError
        As ``pdtrmm``; ``bs``, ``tol``, ``mode``, ``inject`` are positions 16-19.
    ABFTError
        ``mode="correct"`` and a block still disagrees after computing it again (A itself is corrupted), or
        ``unchecked_is_error`` and a block could not be checked; B then holds the (flagged) product.
    """
    r = "FT_PDTRMM"
    side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb = check_tri_args(
        r, side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    check_ft_args(r, 16, bs, tol, mode, inject)
    threshold = Threshold.parse(tol)
    if m == 0 or n == 0 or alpha == 0.0:
        if alpha == 0.0:
            B.local_view(ib, jb, m, n)[...] = 0.0  # reads neither A nor B, as pdtrmm
        return ABFTReport(threshold=threshold.name)
    A64, B64 = _as64(A), _as64(B)
    W, w, rows, wcols, transpose = _work(B64, ib, jb, m, n, side, transa)
    lower = (uplo == "L") != transpose
    cols = tri_cols(rows, B.grid.npcol)
    size = int(bs) if bs is not None else checksums.choose_bs(rows.nb, wcols.nb, rows.n)
    seg = segmentation(B64, ib, jb, m, n, size) if W is None else segmentation(W, 0, 0, n, m, size)
    pool: dict[object, np.ndarray] = {}  # T in a buffer kept between calls (the plain routine's is fresh)
    try:
        t, achk = triangle_with_checksums(A64, ia, ja, transpose, lower, diag == "U", rows, cols, seg,
                                          threshold.kinds, pool)
        if alpha != 1.0:
            w *= alpha
        report = checked_tri_multiply(B.grid, t, achk, w, rows, cols, lower, seg, threshold, mode, inject,
                                      lambda: triangle_operand(A64, ia, ja, transpose, lower, diag == "U",
                                                               rows, cols), side == "R")  # fmt: skip
    finally:
        release_pool(pool)
    if W is not None:
        B64.local_view(ib, jb, m, n)[...] = redistribute(W, 0, 0, True, B64.row_map(ib, m),
                                                         B64.col_map(jb, n))
    _store(B, B64, ib, jb, m, n)
    _raise_if_failed("ft_pdtrmm", report, mode, unchecked_is_error, "computing it again")
    return report


def _work(B64: DistributedMatrix, ib: int, jb: int, m: int, n: int, side: str, transa: str):  # type: ignore[no-untyped-def]
    """What the triangular routines work on: ``(W, w, rows, wcols, transpose)``. Side "L": B's submatrix
    itself (``W`` is ``None``, ``w`` its local view); side "R" (``X op(A) = B`` is ``op(A).T X.T = B.T``): a
    copy ``W`` of ``B.T``. ``rows`` / ``wcols`` map ``w``'s rows and columns; ``transpose``: whether ``T`` is
    ``A.T``."""
    if side == "L":
        return None, B64.local_view(ib, jb, m, n), B64.row_map(ib, m), B64.col_map(jb, n), transa == "T"
    W = DistributedMatrix.zeros(B64.grid, n, m, mb=B64.desc.nb, nb=B64.desc.mb)
    rows, wcols = W.row_map(0, n), W.col_map(0, m)
    W.local[...] = redistribute(B64, ib, jb, True, rows, wcols)
    return W, W.local, rows, wcols, transa == "N"


def _raise_if_failed(name: str, report: ABFTReport, mode: str, unchecked_is_error: bool, again: str) -> None:
    """Raise :class:`ABFTError` (on every process: the report is the same everywhere) if the call failed."""
    if mode == "correct" and report.uncorrected:
        raise ABFTError(f"{name}: {report.uncorrected} block(s) of the result still disagree with the "
                        f"checksums after {again}: an operand itself is corrupted (call again with clean "
                        "inputs)",
                        report=report)
    if unchecked_is_error and report.unchecked:
        raise ABFTError(f"{name}: {report.unchecked} block(s) could not be checked (their checksums or "
                        "bounds are not finite: Inf, NaN or overflowing values)", report=report)


def _rank_checked(r: str, uplo: str, trans: str, n: int, k: int, alpha: float, X: DistributedMatrix, ix: int,
                  jx: int, Y: DistributedMatrix, iy: int, jy: int, beta: float, C: DistributedMatrix,
                  ic: int, jc: int, bs: int | None, tol: float | str | None, mode: str,
                  inject: InjectionPlan | None, unchecked_is_error: bool, more: list[Term] | None = None,
                  ) -> ABFTReport:
    """``C_uplo = alpha op(X) op(Y).T (+ the ``more`` terms) + beta C_uplo``, only the triangle's tiles
    computed (:mod:`._rank_tiles`)."""
    report = checked_rank_update(uplo, trans, n, k, alpha, X, ix, jx, Y, iy, jy, beta, _as64(C), ic, jc, bs,
                                 tol, mode, inject, unchecked_is_error, C, more or [])  # fmt: skip
    _raise_if_failed(r.lower(), report, mode, unchecked_is_error, "recomputation")
    return report


@names_failures("FT_PDSYRK", "C", "resilient_pdsyrk")
def ft_pdsyrk(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
              beta: float, C: DistributedMatrix, ic: int, jc: int, *, bs: int | None = None,
              tol: float | str | None = None, mode: str = "correct", inject: InjectionPlan | None = None,
              unchecked_is_error: bool = False) -> ABFTReport:
    """Compute :func:`~ftkit.linalg.pdsyrk` (C's ``uplo`` triangle only), checked.

    Raises
    ------
    PBLASArgumentError
        As ``pdsyrk``; ``bs``, ``tol``, ``mode``, ``inject`` are positions 15-18.
    ABFTError
        As :func:`~ftkit.linalg.abft.ft_pdgemm` (C then holds the whole, flagged, result).
    """
    r = "FT_PDSYRK"
    uplo, trans, n, k, alpha, ia, ja, _, _, beta, ic, jc = check_rank_args(
        r, uplo, trans, n, k, alpha, A, ia, ja, None, 0, 0, beta, C, ic, jc)
    check_ft_args(r, 15, bs, tol, mode, inject)
    if n == 0:
        return ABFTReport(threshold=Threshold.parse(tol).name)
    A64 = _as64(A)
    return _rank_checked(r, uplo, trans, n, k, alpha, A64, ia, ja, A64, ia, ja, beta, C, ic, jc, bs, tol,
                         mode, inject, unchecked_is_error)


@names_failures("FT_PDSYR2K", "C", "resilient_pdsyr2k")
def ft_pdsyr2k(uplo: str, trans: str, n: int, k: int, alpha: float, A: DistributedMatrix, ia: int, ja: int,
               B: DistributedMatrix, ib: int, jb: int, beta: float, C: DistributedMatrix, ic: int, jc: int,
               *, bs: int | None = None, tol: float | str | None = None, mode: str = "correct",
               inject: InjectionPlan | None = None, unchecked_is_error: bool = False) -> ABFTReport:
    """Compute :func:`~ftkit.linalg.pdsyr2k` (C's ``uplo`` triangle only), checked: both terms go into
    each piece of the triangle with one prediction and one verification of the piece, as PDSYR2K's two
    PDGEMMs do, without copying the operands.

    Raises
    ------
    PBLASArgumentError
        As ``pdsyr2k``; ``bs``, ``tol``, ``mode``, ``inject`` are positions 19-22.
    ABFTError
        As :func:`~ftkit.linalg.abft.ft_pdgemm` (C then holds the whole, flagged, result).
    """
    r = "FT_PDSYR2K"
    uplo, trans, n, k, alpha, ia, ja, ib, jb, beta, ic, jc = check_rank_args(
        r, uplo, trans, n, k, alpha, A, ia, ja, B, ib, jb, beta, C, ic, jc)
    check_ft_args(r, 19, bs, tol, mode, inject)
    if n == 0:
        return ABFTReport(threshold=Threshold.parse(tol).name)
    A64, B64 = _as64(A), _as64(B)
    return _rank_checked(r, uplo, trans, n, k, alpha, A64, ia, ja, B64, ib, jb, beta, C, ic, jc, bs, tol,
                         mode, inject, unchecked_is_error, [(B64, ib, jb, A64, ia, ja)])


@names_failures("FT_PDTRSM", "B", "resilient_pdtrsm")
def ft_pdtrsm(side: str, uplo: str, transa: str, diag: str, m: int, n: int, alpha: float,
              A: DistributedMatrix, ia: int, ja: int, B: DistributedMatrix, ib: int, jb: int, *,
              bs: int | None = None, tol: float | str | None = None, mode: str = "correct",
              inject: InjectionPlan | None = None, unchecked_is_error: bool = False) -> ABFTReport:
    """Compute :func:`~ftkit.linalg.pdtrsm` (solve ``op(A) X = alpha B`` or ``X op(A) = alpha B``), checked.

    The solution is checked block by block against checksums of ``op(A)`` and ``alpha B`` taken before the
    solve (:mod:`ftkit.linalg.abft._solve_sums`); a single wrong element is located and fixed in O(1) (event
    ``"located"``, ``element`` in B's submatrix coordinates), otherwise the flagged column segments are
    solved again (``"recomputed"``). ``bs=None`` chooses the block size as ``ft_pdgemm`` does.

    Raises
    ------
    PBLASArgumentError
        As ``pdtrsm``; ``bs``, ``tol``, ``mode``, ``inject`` are positions 16-19.
    ABFTError
        ``mode="correct"`` and a block still disagrees after solving again (A itself is corrupted), or
        ``unchecked_is_error`` and a block could not be checked; B then holds the (flagged) solution.
    """
    r = "FT_PDTRSM"
    side, uplo, transa, diag, m, n, alpha, ia, ja, ib, jb = check_tri_args(
        r, side, uplo, transa, diag, m, n, alpha, A, ia, ja, B, ib, jb)
    check_ft_args(r, 16, bs, tol, mode, inject)
    threshold = Threshold.parse(tol)
    if m == 0 or n == 0 or alpha == 0.0:
        if alpha == 0.0:
            B.local_view(ib, jb, m, n)[...] = 0.0
        return ABFTReport(threshold=threshold.name)
    A64, B64 = _as64(A), _as64(B)
    g = B.grid
    W, w, rows, wcols, transpose = _work(B64, ib, jb, m, n, side, transa)
    lower = (uplo == "L") != transpose
    cols = tri_cols(rows, g.npcol)
    chk = SolveChecksums(g, rows, cols, wcols, int(bs) if bs is not None else
                         checksums.choose_bs(rows.nb, wcols.nb, rows.n), lower)
    pool: dict[object, np.ndarray] = {}  # T and the copy of alpha B, in buffers kept between calls
    try:
        t = chk.make_triangle(A64, ia, ja, transpose, diag == "U", pool)
        if alpha != 1.0:
            w *= alpha
        w0 = chk.encode(w, pool)  # the copy of alpha B that flagged segments are solved again from
        if inject is not None:
            inject.resolve(g.size, 1)
            inject.apply("A", g.rank, 0, t)
            inject.apply("B", g.rank, 0, w)
            inject.apply("C", g.rank, 0, w)
        sweep(g, t, w, rows, cols, lower, True)
        if inject is not None:
            inject.apply("C", g.rank, 1, w)
        report = _check_solution(chk, w, w0, threshold, mode, lambda: triangle_operand(
            A64, ia, ja, transpose, lower, diag == "U", rows, cols), lower, side == "R")
    finally:
        release_pool(pool)
    if W is not None:
        B64.local_view(ib, jb, m, n)[...] = redistribute(W, 0, 0, True, B64.row_map(ib, m),
                                                         B64.col_map(jb, n))
    _store(B, B64, ib, jb, m, n)
    _raise_if_failed("ft_pdtrsm", report, mode, unchecked_is_error, "solving again")
    return report


def _check_solution(chk: SolveChecksums, w: np.ndarray, w0: np.ndarray, threshold: Threshold, mode: str,
                    rebuild, lower: bool, transposed: bool) -> ABFTReport:  # type: ignore[no-untyped-def]
    """Check the solution ``w``, solve flagged column segments again (``mode="correct"``), report."""
    g = chk.grid
    res, thr, rig = chk.residuals(w, threshold.tol)
    finite = np.isfinite(res) & np.isfinite(thr)
    # the residuals are the same bit for bit everywhere (chk.residuals), so is this decision
    flagged = [(int(i), int(j)) for i, j in zip(*np.nonzero(finite & (res > thr)), strict=True)]
    actions = {b: "detected" for b in flagged}
    elements: dict[int, tuple[int, int]] = {}
    if flagged and mode == "correct":
        segs = sorted({bj for _, bj in flagged})
        chk.gather_t_sums()
        # one wrong element per column segment: located and fixed in O(1) from the checksums
        fixes = [(bj, loc) for bj in segs if (loc := chk.locate(bj, thr[:, bj])) is not None] \
            if g.rank == 0 else None
        for bj, (i, j, d) in g.comm.bcast(fixes, root=0):
            chk.fix(w, i, j, d)
            elements[bj] = (i, j)
        if elements:
            res, thr, rig = chk.residuals(w, threshold.tol)
            elements = {bj: e for bj, e in elements.items() if bool(np.all(res[:, bj] <= thr[:, bj]))}
        resolve = [bj for bj in segs if bj not in elements]
        if resolve:  # the rest: solve their column segments again
            t = rebuild()  # a corrupted copy of the triangle is replaced too
            sel = chk.local_columns(resolve)
            # A process column holding a flagged segment solves all its columns again, as the first solve
            # did: BLAS may round a solve of fewer columns differently (seen with OpenBLAS on AMD EPYC),
            # and the corrected segments must be the error-free solution bit for bit.
            mine = bool(sel.any())
            ws = np.array(w0 if mine else w0[:, :0], order="F")
            sweep(g, t, ws, chk.rows, chk.cols, lower, True)
            if mine:
                w[:, sel] = ws[:, sel]
            res, thr, rig = chk.residuals(w, threshold.tol)
        for bi, bj in flagged:
            ok = bool(res[bi, bj] <= thr[bi, bj])
            rounding = threshold.tol == "statistical" and bool(res[bi, bj] <= rig[bi, bj])
            fixed = "located" if bj in elements else "recomputed"
            actions[(bi, bj)] = fixed if ok else "rounding" if rounding else "uncorrected"
        finite = np.isfinite(res) & np.isfinite(thr)
    for bi, bj in zip(*np.nonzero(~finite), strict=True):
        actions.setdefault((int(bi), int(bj)), "unchecked")
    events = [_event(chk, bi, bj, a, transposed, elements.get(bj) if a == "located" else None)
              for (bi, bj), a in actions.items()]
    events.sort(key=lambda e: (e.row_block, e.col_block))
    ok = finite & (res <= thr) & (thr > 0)
    ratio = float(np.max(res[ok] / thr[ok])) if np.any(ok) else 0.0
    n_unchecked = int(np.sum(~finite))
    return ABFTReport(
        blocks_checked=chk.nI * chk.nJ - n_unchecked,
        detected=sum(a not in ("rounding", "unchecked") for a in actions.values()),
        corrected=sum(a in ("located", "recomputed") for a in actions.values()),
        rounding_alarms=sum(a == "rounding" for a in actions.values()),
        events=tuple(events), max_ratio=ratio, threshold=threshold.name, bs=chk.bs, unchecked=n_unchecked)


def _event(chk: SolveChecksums, bi: int, bj: int, action: str, transposed: bool,
           element: tuple[int, int] | None) -> BlockEvent:
    """The report event of block ``(bi, bj)`` of ``X`` (in B's coordinates: swapped for side "R"); a located
    error's ``element`` (submatrix row, column of ``X``) is the one fixed in its column segment."""
    r0, c0 = int(chk.rg[bi]), int(chk.cg[bj])
    rows, cols = int(chk.rg[bi + 1]) - r0, int(chk.cg[bj + 1]) - c0
    rank = chk.owner(bi, bj)
    if transposed:
        return BlockEvent(bj, bi, c0, r0, cols, rows, rank, action, element and (element[1], element[0]))
    return BlockEvent(bi, bj, r0, c0, rows, cols, rank, action, element)
