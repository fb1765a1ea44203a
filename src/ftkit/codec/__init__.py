"""Erasure codes for ftkit's level 3: Reed-Solomon over GF(2^8) and XOR, with GIL-free numba kernels.

``RSCode(k, m)`` and ``XORCode(k)`` implement the :class:`ErasureCode` contract (:mod:`ftkit.codec.base`).
"""

from __future__ import annotations

from .base import ErasureCode
from .ops import xor_into
from .rs import RSCode
from .xor import XORCode

__all__ = ["ErasureCode", "RSCode", "XORCode", "xor_into"]
