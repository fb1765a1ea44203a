"""Distributed dense linear algebra: 2-D block-cyclic matrices and PBLAS level-3 routines.

``ProcessGrid`` (BLACS grid), ``Descriptor`` and the index helpers (ScaLAPACK's, 0-based),
``DistributedMatrix`` (ScaLAPACK's local storage: Fortran order, float64 or float32), ``pdgemm`` / ``pdsymm``
(SUMMA; ``cannon`` on square grids), the rest of PBLAS's level 3: ``pdtrsm`` / ``pdtrmm`` (triangular solve
and multiply), ``pdsyrk`` / ``pdsyr2k`` (symmetric rank-k updates), ``pdgeadd`` / ``pdtradd`` / ``pdtran``
(matrix additions and transpose); ``pdpotrf`` / ``pdpotrs`` (Cholesky factorization and solve). The
fault-tolerant routines (``ft_pdgemm``, ``ft_pdsymm``, ``ft_pdtrsm``, ``ft_pdtrmm``, ``ft_pdsyrk``,
``ft_pdsyr2k``, ``ft_pdpotrf``, ``resilient_pdgemm``, ``protect_operands``) and the process-state table
(``get_state_table``, ``set_state_table``, ``reset_state``) are re-exported lazily, so a program that only
multiplies does not pay for importing their kernels.

The package's parts, each using only those listed before it: the distributed matrix (:mod:`.grid`,
:mod:`.descriptor`, :mod:`.matrix`, local kernels in :mod:`._blas`); :mod:`.pblas` (the plain routines and
the SUMMA / Cannon engines other parts extend); :mod:`.checksums` (the block-checksum algebra);
:mod:`.resilient` (process failures); :mod:`.abft` (silent errors); :mod:`.cholesky` (PDPOTRF / PDPOTRS and
the fault-tolerant FT_PDPOTRF).
"""

from __future__ import annotations

import importlib
from typing import Any

from .cholesky import FactorizationError, pdpotrf, pdpotrs
from .descriptor import BlockCyclic1D, Descriptor, indxg2l, indxg2p, indxl2g, numroc
from .grid import ProcessGrid
from .matrix import DistributedMatrix
from .pblas import (
    cannon,
    pdgeadd,
    pdgemm,
    pdsymm,
    pdsyr2k,
    pdsyrk,
    pdtradd,
    pdtran,
    pdtrmm,
    pdtrsm,
    release_buffers,
)

# name -> module (relative to this package) that defines it; imported on first access
_LAZY = {
    **dict.fromkeys(("ft_pdgemm", "ft_pdsymm", "ft_pdtrsm", "ft_pdtrmm", "ft_pdsyrk", "ft_pdsyr2k",
                     "ABFTReport", "ABFTPolicy"), ".abft"),
    "ft_pdpotrf": ".cholesky.ft_potrf",
    **dict.fromkeys(("resilient_pdgemm", "resilient_pdsymm", "resilient_pdtrsm", "resilient_pdtrmm",
                     "resilient_pdsyrk", "resilient_pdsyr2k", "resilient_pdgeadd", "resilient_pdtradd",
                     "resilient_pdtran", "resilient_call", "ProductForm", "ResilientResult",
                     "protect_operands", "ProtectedOperands", "protect_pdsymm", "protect_pdtrsm",
                     "protect_pdtrmm", "protect_pdsyrk", "protect_pdsyr2k"), ".resilient"),
    "get_state_table": "..failure",
    "set_state_table": "..failure",
    "reset_state": "..failure",
}
__all__ = [
    "ProcessGrid",
    "Descriptor",
    "BlockCyclic1D",
    "DistributedMatrix",
    "numroc",
    "indxg2p",
    "indxg2l",
    "indxl2g",
    "pdgemm",
    "pdsymm",
    "cannon",
    "pdtrsm",
    "pdtrmm",
    "pdsyrk",
    "pdsyr2k",
    "pdgeadd",
    "pdtradd",
    "pdtran",
    "pdpotrf",
    "pdpotrs",
    "FactorizationError",
    "release_buffers",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
