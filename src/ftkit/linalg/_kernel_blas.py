"""CBLAS ``dgemm`` called from compiled (numba) kernels, handed to them as an address.

A kernel that multiplies small blocks calls ``cblas_dgemm`` itself (no Python between the calls); it takes
the function as an argument, so that it stays cached (a ctypes function read as a global is compiled in as a
constant, which numba does not cache). Passed as the ctypes function, every call of the kernel types and
unboxes it in Python: ~4 us, ~8 us on a loaded core, a few hundred times per factorization. Passed as its
address (:data:`KERNEL_DGEMM`, an int), the kernel's dispatch types it at once and :func:`call_dgemm` calls
through it; a kernel still accepts the ctypes function (``_blas._dgemm``), which :func:`call_dgemm` calls
as before.
"""

from __future__ import annotations

import ctypes
from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from . import _blas

__all__ = ["KERNEL_DGEMM", "call_dgemm"]


def _address() -> int | None:
    """``cblas_dgemm``'s address when it takes 64-bit BLAS integers (ILP64, what :func:`_dgemm_at` calls),
    else ``None``."""
    fn = _blas._dgemm
    if fn is None or fn.argtypes[3] is not ctypes.c_int64:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


_ADDRESS = _address()
#: What a compiled kernel takes as ``dgemm``: the ILP64 ``cblas_dgemm``'s address, else the ctypes function
#: (``None`` without CBLAS).
KERNEL_DGEMM: Any = _ADDRESS if _ADDRESS is not None else _blas._dgemm


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
