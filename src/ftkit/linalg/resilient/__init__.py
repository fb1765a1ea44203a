"""PBLAS routines that survive process failures in the middle: "keep going, settle up at the end" (FT-PBLAS
2.3).

- :mod:`.engine`: :func:`resilient_call` runs a :class:`ProductForm` (what a routine computes, as a product
  the scheme can save, exchange with deadlines and recompute from) through the phases protect, iterate,
  agree and repair, settle up (:mod:`._failure_exchange`, :mod:`._settle`; the state one call shares
  between them in :mod:`._call_state`);
- :mod:`.multiply`: ``resilient_pdgemm`` and ``resilient_pdsymm`` (the scheme described there);
- :mod:`.routines`: PDTRSM, PDTRMM, PDSYRK and PDSYR2K as product forms; :mod:`.additions`: PDGEADD,
  PDTRADD and PDTRAN as products with the identity;
- :mod:`.protected`: ``protect_operands``, inputs saved ahead of the calls, and the grid's failure detector;
  :mod:`.form_protection`: the same for every product form (``protect_pdsymm``, ``protect_pdtrsm``, ...).
"""

from __future__ import annotations

from ._call_state import ResilientResult
from .additions import resilient_pdgeadd, resilient_pdtradd, resilient_pdtran
from .engine import resilient_call
from .form import ProductForm
from .multiply import protect_pdsymm, resilient_pdgemm, resilient_pdsymm
from .protected import ProtectedOperands, protect_operands
from .routines import (
    protect_pdsyr2k,
    protect_pdsyrk,
    protect_pdtrmm,
    protect_pdtrsm,
    resilient_pdsyr2k,
    resilient_pdsyrk,
    resilient_pdtrmm,
    resilient_pdtrsm,
)

__all__ = [
    "resilient_pdgemm", "resilient_pdsymm", "resilient_pdtrsm", "resilient_pdtrmm", "resilient_pdsyrk",
    "resilient_pdsyr2k", "resilient_pdgeadd", "resilient_pdtradd", "resilient_pdtran", "resilient_call",
    "ProductForm", "ResilientResult", "protect_operands", "ProtectedOperands", "protect_pdsymm",
    "protect_pdtrsm", "protect_pdtrmm", "protect_pdsyrk", "protect_pdsyr2k",
]
