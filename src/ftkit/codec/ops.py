"""Byte-buffer helpers built on the codec kernels."""

from __future__ import annotations

import numpy as np

from ..errors import CodecError
from .base import check_fragment

__all__ = ["xor_into"]


def xor_into(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """XOR ``src`` into ``dst`` in place (``dst ^= src``) without the GIL, and return ``dst``.

    Parameters
    ----------
    dst : numpy.ndarray
        Writeable 1-D C-contiguous uint8 array.
    src : numpy.ndarray
        1-D C-contiguous uint8 array of the same length in bytes.

    Raises
    ------
    CodecError
        If an array is not a 1-D contiguous uint8 array, ``dst`` is read-only, or the lengths differ.
    """
    check_fragment(dst, "dst", writeable=True)
    check_fragment(src, "src")
    if dst.shape[0] != src.shape[0]:
        raise CodecError(f"xor_into: dst has {dst.shape[0]} bytes but src has {src.shape[0]}")
    if dst.shape[0]:
        from . import _kernels  # numba: imported at the first use, not with the package

        _kernels.xor_into_kernel(
            np.int64(dst.__array_interface__["data"][0]), np.int64(src.__array_interface__["data"][0]),
            np.int64(dst.shape[0]),
        )
    return dst
