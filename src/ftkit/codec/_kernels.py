"""Numba kernels of the codec: a GF(2^8) linear-map interpreter over cache-sized blocks, and ``xor_into``.

Why an interpreter: a GF(2^8) matrix is applied as a *schedule* of whole-block passes computed once per
matrix in Python (:mod:`ftkit.codec._schedule`). Each pass is ``d = s0 ^ s1 ^ ...``, ``d ^= s0 ^ ...`` or
``d = 2*d ^ s0 ^ ...`` where ``2*d`` doubles every byte in GF(2^8) (shift left, XOR 0x1d where the top bit
fell off). Those are branch-free byte loops that LLVM vectorises (a doubling is ``vpaddb``, a compare and a
masked XOR), and the schedule runs over one block (a few KiB) of every fragment at a time so that the passes
hit L1/L2. Fragments are addressed by raw pointers with byte loads and stores, so any uint8 buffer works:
views, odd offsets, odd lengths, no copies, no tails.

All kernels are ``nogil=True`` (a background thread encodes while Python computes) and ``cache=True``
(compiled once per machine, not at every start). They trust their arguments: validation is done by the
callers in :mod:`ftkit.codec.base`.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["run_schedule", "address_of", "xor_into_kernel"]

# Opcodes of a schedule row ``(op, dst, s0, s1, s2)``. Operands are fragment ids: inputs ``0 .. n_in-1``,
# then outputs ``n_in .. n_in+n_out-1``. "d" is the destination block, "2d" its doubling in GF(2^8).
OP_ZERO = 0     # d = 0
OP_SET1 = 1     # d = s0
OP_SET2 = 2     # d = s0 ^ s1
OP_SET3 = 3     # d = s0 ^ s1 ^ s2
OP_ACC1 = 4     # d ^= s0
OP_ACC2 = 5     # d ^= s0 ^ s1
OP_ACC3 = 6     # d ^= s0 ^ s1 ^ s2
OP_HRN0 = 7     # d = 2d
OP_HRN1 = 8     # d = 2d ^ s0
OP_HRN2 = 9     # d = 2d ^ s0 ^ s1
OP_HRN3 = 10    # d = 2d ^ s0 ^ s1 ^ s2

_I8 = ir.IntType(8)


def _make_pass(n_src: int, mode: str):
    """An intrinsic ``f(d, a, b, c, t)`` doing one byte of a pass at offset ``t`` of the raw addresses.

    ``mode`` is "set" (d = XOR of sources), "acc" (d ^= ...) or "hrn" (d = 2d ^ ...). Written in LLVM IR on
    i8 values so that no integer promotion gets in the way of byte-wide vectorisation.
    """

    @intrinsic
    def _pass(typingctx, d, a, b, c, t):
        sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            def ptr(addr):
                return builder.gep(builder.inttoptr(addr, _I8.as_pointer()), [args[4]])

            dptr = ptr(args[0])
            value = None
            if mode in ("acc", "hrn"):
                value = builder.load(dptr, align=1)
            if mode == "hrn":
                doubled = builder.shl(value, ir.Constant(_I8, 1))
                carry = builder.ashr(value, ir.Constant(_I8, 7))  # 0xff where the top bit was set
                value = builder.xor(doubled, builder.and_(carry, ir.Constant(_I8, 0x1D)))
            for s in args[1:1 + n_src]:
                v = builder.load(ptr(s), align=1)
                value = v if value is None else builder.xor(value, v)
            if value is None:
                value = ir.Constant(_I8, 0)
            builder.store(value, dptr, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return _pass


_set0 = _make_pass(0, "set")
_set1 = _make_pass(1, "set")
_set2 = _make_pass(2, "set")
_set3 = _make_pass(3, "set")
_acc1 = _make_pass(1, "acc")
_acc2 = _make_pass(2, "acc")
_acc3 = _make_pass(3, "acc")
_hrn0 = _make_pass(0, "hrn")
_hrn1 = _make_pass(1, "hrn")
_hrn2 = _make_pass(2, "hrn")
_hrn3 = _make_pass(3, "hrn")


@numba.njit(nogil=True, cache=True)
def _run_block(ops, addrs, start, stop):
    # One loop per opcode: the destination is loaded and stored through one pointer, so LLVM's runtime
    # overlap checks (destination vs. the distinct sources) pass and every loop runs vectorised.
    for o in range(ops.shape[0]):
        code = ops[o, 0]
        d = addrs[ops[o, 1]]
        a = addrs[ops[o, 2]]
        b = addrs[ops[o, 3]]
        c = addrs[ops[o, 4]]
        if code == OP_HRN3:
            for t in range(start, stop):
                _hrn3(d, a, b, c, t)
        elif code == OP_HRN2:
            for t in range(start, stop):
                _hrn2(d, a, b, c, t)
        elif code == OP_HRN1:
            for t in range(start, stop):
                _hrn1(d, a, b, c, t)
        elif code == OP_HRN0:
            for t in range(start, stop):
                _hrn0(d, a, b, c, t)
        elif code == OP_ACC3:
            for t in range(start, stop):
                _acc3(d, a, b, c, t)
        elif code == OP_ACC2:
            for t in range(start, stop):
                _acc2(d, a, b, c, t)
        elif code == OP_ACC1:
            for t in range(start, stop):
                _acc1(d, a, b, c, t)
        elif code == OP_SET3:
            for t in range(start, stop):
                _set3(d, a, b, c, t)
        elif code == OP_SET2:
            for t in range(start, stop):
                _set2(d, a, b, c, t)
        elif code == OP_SET1:
            for t in range(start, stop):
                _set1(d, a, b, c, t)
        elif code == OP_ZERO:
            for t in range(start, stop):
                _set0(d, a, b, c, t)


@numba.njit(nogil=True, cache=True)
def run_schedule(ops, addrs, nbytes, block_bytes):
    """Apply a schedule to bytes ``0 .. nbytes-1`` of every fragment, writing the outputs.

    Parameters
    ----------
    ops : int64 array, shape (n, 5)
        The schedule: rows ``(opcode, dst, s0, s1, s2)`` (unused sources repeat a valid id).
    addrs : int64 array
        Addresses of the input fragments followed by the output fragments (each ``nbytes`` long).
    nbytes : int
        Fragment length in bytes (any value >= 0).
    block_bytes : int
        Block length in bytes: the schedule runs over one block of every fragment at a time, so the
        blocks of all fragments should fit in the L1/L2 cache together.
    """
    for start in range(0, nbytes, block_bytes):
        _run_block(ops, addrs, start, min(start + block_bytes, nbytes))


@numba.njit(cache=True)
def address_of(array):
    """The address of an array's first byte (cheaper than ``array.ctypes.data`` from Python)."""
    return np.int64(array.ctypes.data)


@numba.njit(nogil=True, cache=True)
def xor_into_kernel(dst_addr, src_addr, nbytes):
    """``dst[:nbytes] ^= src[:nbytes]`` for two raw buffers (may be unaligned or overlap exactly)."""
    for t in range(nbytes):
        _acc1(dst_addr, src_addr, src_addr, src_addr, t)
