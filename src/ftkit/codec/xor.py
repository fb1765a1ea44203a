"""XOR parity code (SCR's XOR scheme): one parity fragment, the XOR of the ``k`` data fragments."""

from __future__ import annotations

import numpy as np

from ..errors import CodecError
from ._linear import LinearCode

__all__ = ["XORCode"]


class XORCode(LinearCode):
    """Single-parity code: ``parity = data_0 ^ ... ^ data_{k-1}``; survives the loss of any one fragment.

    Parameters
    ----------
    k : int
        Number of data fragments, ``1 <= k <= 255``.

    Raises
    ------
    CodecError
        If ``k`` is out of range.
    """

    def __init__(self, k: int) -> None:
        if isinstance(k, bool) or not hasattr(k, "__index__"):
            raise CodecError(f"k must be an integer, got {k!r}")
        k = int(k)
        if not 1 <= k <= 255:
            raise CodecError(f"XORCode needs 1 <= k <= 255, got k={k}")
        super().__init__(np.ones((1, k), dtype=np.uint8))
