"""Distributed dense linear algebra: 2-D block-cyclic matrices and PBLAS level-3 routines.

``ProcessGrid`` (BLACS grid), ``Descriptor`` and the index helpers (ScaLAPACK's, 0-based),
``DistributedMatrix`` (ScaLAPACK's local storage: Fortran order), ``pdgemm`` / ``pdsymm`` (SUMMA;
``cannon`` on square grids). The internals other ftkit modules extend (SUMMA engine, panel exchange)
live in ``_summa``.
"""

from __future__ import annotations

from .descriptor import BlockCyclic1D, Descriptor, indxg2l, indxg2p, indxl2g, numroc
from .grid import ProcessGrid
from .matrix import DistributedMatrix
from .pblas import cannon, pdgemm, pdsymm

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
]
