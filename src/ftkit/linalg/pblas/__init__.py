"""PBLAS level 3 with ScaLAPACK semantics, 0-based offsets: the plain routines and the engines under them.

- :mod:`.gemm`: PDGEMM and PDSYMM (SUMMA; ``cannon`` on square grids) and the argument checks the other
  routines share;
- :mod:`.triangular`: PDTRSM and PDTRMM (a block sweep, :mod:`._tri_sweep`);
- :mod:`.rank_k`: PDSYRK and PDSYR2K;
- :mod:`.add`: PDGEADD, PDTRADD and PDTRAN;
- engines: :mod:`._summa` (SUMMA on aligned local operands, with a replaceable panel exchange that the
  ABFT and failure-tolerant variants wrap), :mod:`._cannon`, :mod:`._operands` (op(A), op(B) and C's
  submatrix brought into the aligned form the engines take) and :mod:`._redistribute` (PxGEMR2D).
"""

from __future__ import annotations

from ._panel_buffers import release_buffers
from .add import pdgeadd, pdtradd, pdtran
from .gemm import cannon, pdgemm, pdsymm
from .rank_k import pdsyr2k, pdsyrk
from .triangular import pdtrmm, pdtrsm

__all__ = ["pdgemm", "pdsymm", "cannon", "pdtrsm", "pdtrmm", "pdsyrk", "pdsyr2k", "pdgeadd", "pdtradd",
           "pdtran", "release_buffers"]
