"""Cholesky factorization and solve: PDPOTRF / PDPOTRS (:mod:`.potrf`, the panel steps in :mod:`._steps`) and
the fault-tolerant FT_PDPOTRF (:mod:`.ft_potrf`: ABFT-checked updates, panels checkpointed), imported on
first use so that a program that only factors does not load the ABFT kernels.
"""

from __future__ import annotations

from .potrf import FactorizationError, pdpotrf, pdpotrs

__all__ = ["pdpotrf", "pdpotrs", "FactorizationError"]
