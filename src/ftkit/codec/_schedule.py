"""Compile a GF(2^8) matrix into a schedule of block operations for :func:`ftkit.codec._kernels.run_schedule`.

Output ``i`` is ``sum_j M[i, j] * in_j``. Writing each entry in binary, ``M[i, j] = sum_b bit_b 2^b``,
the output is evaluated by Horner's rule over the bit levels, from the highest used level down::

    out = S_top;  out = 2 * out ^ S_{top-1};  ...;  out = 2 * out ^ S_0,   S_b = XOR of in_j with bit b set

Every step is one fused pass over a block (a doubling and up to three XORs), computed in the output block
itself, so no scratch memory is needed and the cost of a row is about (highest bit + 1) passes. The matrix
choice in :mod:`ftkit.codec.gf256` minimises this cost (:func:`ftkit.codec.gf256.apply_cost`).
"""

from __future__ import annotations

import numpy as np

from . import _kernels as K

__all__ = ["compile_matrix"]

_SET = (K.OP_SET1, K.OP_SET2, K.OP_SET3)
_ACC = (K.OP_ACC1, K.OP_ACC2, K.OP_ACC3)
_HRN = (K.OP_HRN0, K.OP_HRN1, K.OP_HRN2, K.OP_HRN3)


def _row_ops(row: list[int], dst: int) -> list[tuple[int, int, int, int, int]]:
    ops: list[tuple[int, int, int, int, int]] = []

    def emit(code: int, srcs: list[int]) -> None:
        padded = srcs + [dst] * (3 - len(srcs))
        ops.append((code, dst, padded[0], padded[1], padded[2]))

    def accumulate(srcs: list[int]) -> None:
        for t in range(0, len(srcs), 3):
            chunk = srcs[t:t + 3]
            emit(_ACC[len(chunk) - 1], chunk)

    used = 0
    for v in row:
        used |= v
    if used == 0:
        emit(K.OP_ZERO, [])
        return ops
    top = used.bit_length() - 1
    for b in range(top, -1, -1):
        srcs = [j for j, v in enumerate(row) if (v >> b) & 1]
        if b == top:
            emit(_SET[min(len(srcs), 3) - 1], srcs[:3])
            accumulate(srcs[3:])
        else:
            emit(_HRN[min(len(srcs), 3)], srcs[:3])
            accumulate(srcs[3:])
    return ops


def compile_matrix(matrix: np.ndarray) -> np.ndarray:
    """Return the schedule (int64 array of rows ``(op, dst, s0, s1, s2)``) that applies ``matrix``.

    Operand ids: inputs are ``0 .. n_in-1`` (columns), outputs ``n_in .. n_in+n_out-1`` (rows).
    """
    mat = np.asarray(matrix, dtype=np.uint8)
    n_out, n_in = mat.shape
    ops: list[tuple[int, int, int, int, int]] = []
    for i in range(n_out):
        ops.extend(_row_ops([int(v) for v in mat[i]], n_in + i))
    return np.array(ops, dtype=np.int64).reshape(-1, 5)
