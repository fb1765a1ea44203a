"""Reed-Solomon erasure code over GF(2^8) with a Cauchy generator (FTI's level-3 code)."""

from __future__ import annotations

from ..errors import CodecError
from . import gf256
from ._linear import LinearCode

__all__ = ["RSCode"]


class RSCode(LinearCode):
    """Systematic MDS Reed-Solomon code: ``k`` data fragments, ``m`` parity fragments, any ``k`` suffice.

    The parity matrix is ftkit's scaled Cauchy matrix (:func:`ftkit.codec.gf256.parity_matrix`), a pure
    function of ``(k, m)``: fragments encoded by one ftkit version decode with any later one.

    Parameters
    ----------
    k : int
        Number of data fragments, ``k >= 1``.
    m : int
        Number of parity fragments, ``m >= 1``, with ``k + m <= 256``.

    Raises
    ------
    CodecError
        If ``k`` or ``m`` is out of range.
    """

    def __init__(self, k: int, m: int) -> None:
        for name, value in (("k", k), ("m", m)):
            if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
                raise CodecError(f"{name} must be an integer, got {value!r}")
        k, m = int(k), int(m)
        if k < 1 or m < 1 or k + m > 256:
            raise CodecError(f"RSCode needs k >= 1, m >= 1 and k + m <= 256 (GF(2^8)), got k={k}, m={m}")
        super().__init__(gf256.parity_matrix(k, m))
