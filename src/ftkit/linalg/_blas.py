"""In-place local GEMM ``c += alpha * a @ b`` straight through OpenBLAS's ``cblas_dgemm``.

numpy has no in-place ``C = alpha*A@B + beta*C``: ``c += alpha * (a @ b)`` costs a temporary and two extra
passes over ``c`` per call, which is 5-10 % of SUMMA's time with 2048-wide local blocks. numpy's wheel ships
OpenBLAS (ILP64, symbols prefixed ``scipy_``); we call its ``cblas_dgemm`` through ctypes, which releases the
GIL and accepts strided column-major views (any leading dimension), so ``c`` may be a view into a local
array. If the library or symbol cannot be found, the numpy expression is used instead. Compiled kernels call
the same ``cblas_dgemm`` through :func:`call_dgemm`, given :data:`KERNEL_DGEMM`.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

__all__ = ["gemm_update", "trsm_left", "trsm_right_lower_t", "HAVE_CBLAS", "KERNEL_DGEMM", "call_dgemm"]

_COL_MAJOR, _NO_TRANS, _TRANS = 102, 111, 112


def _load_symbol(names: tuple[str, ...], argtypes: list[object]) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """Return the first of the CBLAS symbols ``names`` (the ILP64 one first) of numpy's OpenBLAS, or None.

    ``argtypes`` uses ``ctypes.c_int64`` for BLAS integers; the 32-bit symbols get ``ctypes.c_int`` instead.
    """
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libdir, "libscipy_openblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is None:
                continue
            fn.restype = None
            ilp64 = name.endswith("64_")
            fn.argtypes = [t if ilp64 or t is not ctypes.c_int64 else ctypes.c_int for t in argtypes]
            return fn
    return None


def _load() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    i, d, p = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p
    return _load_symbol(("scipy_cblas_dgemm64_", "scipy_cblas_dgemm"),
                        [ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, d, p, i, p, i, d, p, i])


_dgemm = None if os.environ.get("FTKIT_NO_CBLAS") else _load()
HAVE_CBLAS = _dgemm is not None


# CBLAS dgemm called from compiled (numba) kernels. A kernel that multiplies small blocks calls cblas_dgemm
# itself (no Python between the calls) and takes the function as an argument, so that it stays cached (a
# ctypes function read as a global is compiled in as a constant, which numba does not cache). Passed as the
# ctypes function, every call of the kernel types and unboxes it in Python: ~4 us, ~8-20 us on a loaded core,
# a few hundred times per factorization; passed as its address (KERNEL_DGEMM, an int), the dispatch types it
# at once and call_dgemm calls through it (the kernels still accept the ctypes function).


def _address() -> int | None:
    """``cblas_dgemm``'s address when it takes 64-bit BLAS integers (ILP64, what :func:`_dgemm_at` calls),
    else ``None``."""
    fn = _dgemm
    if fn is None or fn.argtypes[3] is not ctypes.c_int64:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


_ADDRESS = _address()
#: What a compiled kernel takes as ``dgemm``: the ILP64 ``cblas_dgemm``'s address, else the ctypes function
#: (``None`` without CBLAS).
KERNEL_DGEMM: Any = _ADDRESS if _ADDRESS is not None else _dgemm


def call_dgemm(dgemm: Any, order: int, ta: int, tb: int, m: int, n: int, k: int, alpha: float, a: int,
               lda: int, b: int, ldb: int, beta: float, c: int, ldc: int) -> None:  # pragma: no cover
    """``cblas_dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`` from compiled code
    (``a``, ``b``, ``c``: addresses), ``dgemm`` the ctypes function or :data:`KERNEL_DGEMM`."""
    raise NotImplementedError("call_dgemm is called from numba-compiled code only")


@intrinsic
def _dgemm_at(typingctx: Any, address: Any, order: Any, ta: Any, tb: Any, m: Any, n: Any, k: Any,
              alpha: Any, a: Any, lda: Any, b: Any, ldb: Any, beta: Any, c: Any,
              ldc: Any) -> Any:  # pragma: no cover - compiled
    """Call the ILP64 ``cblas_dgemm`` at ``address``: the enum arguments as C ints, the sizes and leading
    dimensions as 64-bit ints, the scalars as doubles, the matrices' addresses as pointers."""
    sig = types.void(address, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        i32, i64, dbl, ptr = ir.IntType(32), ir.IntType(64), ir.DoubleType(), ir.IntType(8).as_pointer()
        kinds = (i32, i32, i32, i64, i64, i64, dbl, ptr, i64, ptr, i64, dbl, ptr, i64)
        fnty = ir.FunctionType(ir.VoidType(), kinds)
        target = builder.inttoptr(context.cast(builder, args[0], signature.args[0], types.int64),
                                  fnty.as_pointer())
        out = []
        for val, ty, kind in zip(args[1:], signature.args[1:], kinds, strict=True):
            if kind is dbl:
                out.append(context.cast(builder, val, ty, types.float64))
            elif kind is ptr:
                out.append(builder.inttoptr(context.cast(builder, val, ty, types.int64), ptr))
            else:
                out.append(context.cast(builder, val, ty, types.int32 if kind is i32 else types.int64))
        builder.call(target, out)

    return sig, codegen


@overload(call_dgemm)
def _call_dgemm(dgemm, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """:func:`call_dgemm`'s implementations: through the address, or the ctypes function's own call (their
    parameters unannotated, as numba compares them with the implementations')."""  # pragma: no cover
    if isinstance(dgemm, types.Integer):
        def by_address(dgemm, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
            _dgemm_at(dgemm, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return by_address
    if isinstance(dgemm, types.ExternalFunctionPointer):
        def by_ctypes(dgemm, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
            dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return by_ctypes
    return None


def _as_col_major(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Return ``(array, trans flag, leading dim)`` describing ``x`` to a column-major BLAS without copying."""
    if x.dtype != np.float64:
        x = x.astype(np.float64)
    s0, s1 = x.strides
    rows, cols = x.shape
    if s0 == 8 and s1 >= 8 * max(1, rows) and s1 % 8 == 0:
        return x, _NO_TRANS, max(1, s1 // 8)
    if s1 == 8 and s0 >= 8 * max(1, cols) and s0 % 8 == 0:
        return x, _TRANS, max(1, s0 // 8)
    x = np.asfortranarray(x)
    return x, _NO_TRANS, max(1, rows)


def gemm_update(alpha: float, a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float = 1.0) -> None:
    """Compute ``c = alpha * a @ b + beta * c`` in place.

    Parameters
    ----------
    alpha, beta
        Scalars; with ``beta == 0`` ``c`` is not read (NaNs are overwritten), as in BLAS.
    a, b
        ``(m, k)`` and ``(k, n)`` float64 arrays, any memory order (strided views allowed); the result
        depends on their values, not on their layout.
    c
        ``(m, n)`` float64 array updated in place; column-major views are used as they are, others go
        through the numpy fallback.
    """
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0 or alpha == 0.0:
        if beta == 0.0:
            c[...] = 0.0
        elif beta != 1.0:
            c *= beta
        return
    c_ok = c.dtype == np.float64 and c.strides[0] == 8 and c.strides[1] % 8 == 0 and c.strides[1] >= 8 * m
    if _dgemm is None or not c_ok:
        # numpy's matmul rounds a matrix-vector product differently by the operands' strides (a panel's rows
        # above checksum rows vs the bare panel: ft_pdsyrk's one-column tiles), BLAS's dgemm does not: one
        # layout, so the result depends on the values alone
        prod = np.asfortranarray(a) @ np.asfortranarray(b)
        if alpha != 1.0:
            prod *= alpha
        if beta == 0.0:
            c[...] = prod
        else:
            if beta != 1.0:
                c *= beta
            c += prod
        return
    a2, ta, lda = _as_col_major(a)
    b2, tb, ldb = _as_col_major(b)
    ldc = max(1, c.strides[1] // 8) if n > 1 else max(1, m)
    _dgemm(_COL_MAJOR, ta, tb, m, n, k, float(alpha), a2.ctypes.data, lda, b2.ctypes.data, ldb,
           float(beta), c.ctypes.data, ldc)


_LEFT, _RIGHT, _UPPER, _LOWER, _NON_UNIT = 141, 142, 121, 122, 131


def _load_trsm(prefix: str, real: type) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    c, i, p = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    return _load_symbol((f"scipy_cblas_{prefix}trsm64_", f"scipy_cblas_{prefix}trsm"),
                        [c, c, c, c, c, i, i, real, p, i, p, i])


_trsm = {} if os.environ.get("FTKIT_NO_CBLAS") else {
    np.dtype(np.float64): _load_trsm("d", ctypes.c_double),
    np.dtype(np.float32): _load_trsm("s", ctypes.c_float)}


def trsm_left(lower: bool, t: np.ndarray, w: np.ndarray) -> None:
    """Overwrite ``w`` with ``inv(t) @ w`` by substitution; ``t`` is square triangular (``lower`` or upper).

    Only ``t``'s ``lower`` (or upper) triangle and its diagonal are read. ``w`` may be a strided view; it and
    ``t`` must share the dtype (float64 or float32). BLAS's ``?trsm`` when available, else numpy's solve of
    the triangle (same solution up to rounding).
    """
    n, ncols = w.shape
    if n == 0 or ncols == 0:
        return
    fn = _trsm.get(w.dtype)
    t = np.asfortranarray(t, dtype=w.dtype)
    col_major = w.strides[0] == w.itemsize and w.strides[1] % w.itemsize == 0 and \
        w.strides[1] >= w.itemsize * n
    if fn is None:
        tri = np.tril(t) if lower else np.triu(t)
        w[...] = np.linalg.solve(tri, w)
        return
    x = w if col_major else np.asfortranarray(w)
    ldb = max(1, x.strides[1] // x.itemsize) if ncols > 1 else max(1, n)
    fn(_COL_MAJOR, _LEFT, _LOWER if lower else _UPPER, _NO_TRANS, _NON_UNIT, n, ncols, 1.0,
       t.ctypes.data, max(1, n), x.ctypes.data, ldb)
    if x is not w:
        w[...] = x


def trsm_right_lower_t(t: np.ndarray, w: np.ndarray) -> None:
    """Overwrite ``w`` with ``w @ inv(t).T`` by substitution; ``t`` is square lower triangular.

    Only ``t``'s lower triangle and diagonal are read. ``w`` (``m x n``, ``n`` the order of ``t``) must be
    column-major (any leading dimension) and share ``t``'s dtype (float64 or float32). BLAS's ``?trsm``
    (right side, transposed) when available: no transposed copies of ``w``, the layout a block column's
    rows below a Cholesky panel already have; else numpy's solve (same solution up to rounding).
    """
    m, n = w.shape
    if m == 0 or n == 0:
        return
    fn = _trsm.get(w.dtype)
    t = np.asfortranarray(t, dtype=w.dtype)
    if fn is None or not (w.strides[0] == w.itemsize and w.strides[1] % w.itemsize == 0 and
                          w.strides[1] >= w.itemsize * m):
        w[...] = np.linalg.solve(np.tril(t), w.T).T
        return
    ldb = max(1, w.strides[1] // w.itemsize) if n > 1 else max(1, m)
    fn(_COL_MAJOR, _RIGHT, _LOWER, _TRANS, _NON_UNIT, m, n, 1.0, t.ctypes.data, max(1, n), w.ctypes.data,
       ldb)
