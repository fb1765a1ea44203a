"""What a failure-tolerant Level-3 routine computes: :class:`ProductForm`, the routine's side of
:func:`~ftkit.linalg.resilient.engine.resilient_call` (the engine's module docstring says how it is run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..matrix import DistributedMatrix
from ..pblas._operands import AlignedOperands
from .protected import Operands

__all__ = ["ProductForm"]


@dataclass(frozen=True)
class ProductForm:
    """What a Level-3 routine computes, in the form the failure-tolerant scheme runs (module docstring).

    ``C(ic:ic+m, jc:jc+n) = alpha * op(A)(ia:, ja:) @ op(B)(ib:, jb:) + beta * C(ic:, jc:)``, arguments
    already checked and normalized (``ta``, ``tb`` in ``"N"``, ``"T"``).

    Attributes
    ----------
    routine
        The routine's PBLAS name (``"PDGEMM"``, ``"PDSYMM"``), for its errors and its files' names.
    prepare
        If given, a collective step run in place of taking A and B as they are, returning the operands
        ``(A, ia, ja, B, ib, jb)`` to multiply (e.g. PDSYMM's full symmetric matrix from its stored
        triangle). It runs where the operands' redistribution does: a process failure in it fails the call
        alike on every survivor (nothing can be protected before it).
    keep
        If given, only part of ``C(ic:ic+m, jc:jc+n)`` is updated (PDSYRK's triangle): ``keep(rows, cols)``,
        with submatrix row and column indices (0-based int arrays), returns the boolean matrix of the entries
        updated; every other entry keeps its value bit for bit (restored after the steps, and in a dead
        process's recomputed tiles from its stored C, which is then always saved).
    fixed
        The sides of the product (``"a"``, ``"b"``) whose operands stay the same between calls, which
        :func:`protect_form` saves once: ``"ab"``, or the triangle's side of PDTRSM and PDTRMM (B is their
        output). With only one side fixed, ``prepare`` takes the operands it built when the form was
        protected and builds the other side only (``prepare(previous)``; ``align`` likewise takes the
        saved aligned operands).
    flags
        The routine's flags the built operands depend on (side, uplo, trans, diag), for the protection's key.
    triangle
        ``"U"`` or ``"L"`` (with ``keep`` that triangle's mask, and ``m == n``): only this triangle's tiles
        of C are multiplied, cut as the plain rank-k updates cut them (:mod:`~._part`).
    align
        If given, a collective step run in place of ``prepare`` and the redistribution: it returns the
        aligned operands themselves (PDTRMM's triangle made in the layout the product needs, by the plain
        routine's :func:`~ftkit.linalg.pblas._tri_sweep.triangle_operand`). Given the operands saved when the
        form was protected, it reuses their ``fixed`` side and builds the other one only.
    triangular
        ``(side, uplo)``: the operand ``side`` (``"a"`` or ``"b"``) of the product is zero outside its
        ``uplo`` triangle (in its (row, k) or (k, column) indices, which are C's submatrix indices): each
        step multiplies only into the band of C its k range reaches (:class:`~._part.TriangularBands`).
    """

    routine: str
    ta: str
    tb: str
    m: int
    n: int
    k: int
    alpha: float
    A: DistributedMatrix
    ia: int
    ja: int
    B: DistributedMatrix
    ib: int
    jb: int
    beta: float
    C: DistributedMatrix
    ic: int
    jc: int
    prepare: Callable[..., Operands] | None = None
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    fixed: str = "ab"
    flags: tuple[str, ...] = ()
    triangle: str | None = None
    align: Callable[[AlignedOperands | None], AlignedOperands] | None = None
    triangular: tuple[str, str] | None = None
