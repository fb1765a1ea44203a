"""Distributed dense linear algebra: 2-D block-cyclic matrices and PBLAS level-3 routines.

``ProcessGrid`` (BLACS grid), ``Descriptor`` and the index helpers (ScaLAPACK's, 0-based),
``DistributedMatrix`` (ScaLAPACK's local storage: Fortran order, float64 or float32), ``pdgemm`` / ``pdsymm``
(SUMMA; ``cannon`` on square grids), the rest of PBLAS's level 3: ``pdtrsm`` / ``pdtrmm`` (triangular solve
and multiply), ``pdsyrk`` / ``pdsyr2k`` (symmetric rank-k updates), ``pdgeadd`` / ``pdtradd`` / ``pdtran``
(matrix additions and transpose); ``pdpotrf`` / ``pdpotrs`` (Cholesky factorization and solve). The
fault-tolerant routines (``ft_pdgemm``, ``ft_pdsymm``, ``ft_pdtrsm``, ``ft_pdtrmm``, ``ft_pdsyrk``,
``ft_pdsyr2k``, ``ft_pdpotrf``, ``resilient_pdgemm``, ``protect_operands``) and the process-state table
(``get_state_table``, ``set_state_table``, ``reset_state``) are re-exported lazily, so a program that only
multiplies does not pay for importing their kernels. The internals other ftkit modules extend (SUMMA engine,
panel exchange) live in ``_summa``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .cholesky import FactorizationError, pdpotrf, pdpotrs
from .descriptor import BlockCyclic1D, Descriptor, indxg2l, indxg2p, indxl2g, numroc
from .grid import ProcessGrid
from .matrix import DistributedMatrix
from .pblas import cannon, pdgemm, pdsymm
from .pblas_add import pdgeadd, pdtradd, pdtran
from .pblas_rank import pdsyr2k, pdsyrk
from .pblas_tri import pdtrmm, pdtrsm

# name -> module (relative to this package) that defines it; imported on first access
_LAZY = {
    "ft_pdgemm": ".ft",
    "ft_pdsymm": ".ft",
    "ft_pdtrsm": ".ft_pblas3",
    "ft_pdtrmm": ".ft_pblas3",
    "ft_pdsyrk": ".ft_pblas3",
    "ft_pdsyr2k": ".ft_pblas3",
    "ft_pdpotrf": ".ft_cholesky",
    "ABFTReport": ".ft",
    "ABFTPolicy": ".ft",
    "resilient_pdgemm": ".resilient",
    "ResilientResult": ".resilient",
    "protect_operands": ".protected",
    "ProtectedOperands": ".protected",
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
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
_LAZY.update(dict.fromkeys(("resilient_pdsymm", "resilient_call", "ProductForm"), ".resilient"))
__all__ += ["resilient_pdsymm", "resilient_call", "ProductForm"]
