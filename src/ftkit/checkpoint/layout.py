"""What ``protect(..., global_shape=, offset=)`` and ``protect_matrix`` mean: a checked global layout.

The argument checks of :meth:`Checkpointer.protect` live here too, so the checkpointer only records what it
is given. A matrix is recognised by what it offers (duck typing: ``local``, ``shape`` and
``global_boxes()``, as :class:`ftkit.linalg.DistributedMatrix` does); ``checkpoint`` never imports
``linalg``. Its column-major local array is protected as its C-order transpose, with layout order ``"F"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CheckpointError, FormatError
from ..storage.format.global_layout import Layout, parse_layout

__all__ = ["check_protect", "box_layout", "matrix_layout"]

_NAME_MAX = 200


def check_protect(name: Any, array: Any) -> None:
    """Check a name and array given to ``protect``.

    Raises
    ------
    CheckpointError
        If ``array`` is not a C-contiguous NumPy array of a bool, integer, float or complex dtype, or the
        name is empty, not printable or too long.
    """
    if not isinstance(name, str) or not name or len(name) > _NAME_MAX or not name.isprintable():
        raise CheckpointError(f"protect: name {name!r} must be a non-empty printable string of at most "
                              f"{_NAME_MAX} characters")
    if not isinstance(array, np.ndarray):
        raise CheckpointError(f"protect({name!r}): expected a numpy array, got {type(array).__name__}")
    if array.dtype.kind not in "biufc" or array.dtype.hasobject:
        raise CheckpointError(f"protect({name!r}): dtype {array.dtype} is not supported: use a bool, "
                              "integer, float or complex array")
    if not array.flags.c_contiguous:
        raise CheckpointError(f"protect({name!r}): the array is not C-contiguous: protect "
                              "np.ascontiguousarray(a) and compute in that array")


def box_layout(name: str, array: np.ndarray, global_shape: Sequence[int] | None,
               offset: Sequence[int] | None) -> Layout | None:
    """The one-box layout of ``protect(name, array, global_shape=, offset=)`` (None without both).

    Raises
    ------
    CheckpointError
        If only one of the two is given, they do not have ``array.ndim`` non-negative integers, or the box
        ``offset + array.shape`` does not fit in ``global_shape``.
    """
    if global_shape is None and offset is None:
        return None
    if global_shape is None or offset is None:
        raise CheckpointError(f"protect({name!r}): give both global_shape and offset (the global array's "
                              "shape and the index of this rank's array in it), or neither")
    doc = {"global_shape": _index(name, "global_shape", global_shape, array.ndim),
           "boxes": [[[0] * array.ndim, _index(name, "offset", offset, array.ndim), list(array.shape)]]}
    return _parse(name, doc, array.shape)


def matrix_layout(name: str, matrix: Any) -> tuple[np.ndarray, Layout]:
    """The buffer to protect for a distributed matrix and its layout (order "F": its transpose is stored).

    Raises
    ------
    CheckpointError
        If ``matrix`` has no F-contiguous 2-D ``local`` and no ``global_boxes()`` (not a DistributedMatrix).
    """
    local = getattr(matrix, "local", None)
    if not callable(getattr(matrix, "global_boxes", None)) or not isinstance(local, np.ndarray) or \
            local.ndim != 2 or not local.flags.f_contiguous:
        raise CheckpointError(f"protect_matrix({name!r}): expected a ftkit.linalg.DistributedMatrix (an "
                              "object with an F-ordered 2-D .local and .global_boxes()), got "
                              f"{type(matrix).__name__}")
    m, n = (int(d) for d in matrix.shape)
    boxes = [[[lc, lr], [gc, gr], [nc, nr]] for (lr, lc), (gr, gc), (nr, nc) in matrix.global_boxes()]
    buffer = local.T  # C-contiguous view: recovery writes into the matrix's own local array
    return buffer, _parse(name, {"global_shape": [n, m], "boxes": boxes, "order": "F"}, buffer.shape)


def _index(name: str, what: str, v: Any, ndim: int) -> list[int]:
    try:
        out = [int(d) for d in v]
        ok = len(out) == ndim and all(d >= 0 and d == e for d, e in zip(out, v, strict=True))
    except (TypeError, ValueError):
        ok = False
    if not ok or ndim == 0:
        raise CheckpointError(f"protect({name!r}): {what}={v!r} must be {ndim} non-negative integers (one "
                              "per axis of the array; a 0-d array cannot have a layout)")
    return out


def _parse(name: str, doc: dict[str, Any], shape: Sequence[int]) -> Layout:
    try:
        return parse_layout(doc, shape, f"protect({name!r}): ")
    except FormatError as exc:
        raise CheckpointError(str(exc)) from exc
