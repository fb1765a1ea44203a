"""The ScaLAPACK side of ``bench_pblas3.py``: Debian's libscalapack-openmpi through ctypes (BLACS grid,
descriptors, the operands and the PBLAS / ScaLAPACK calls timed). Never imports mpi4py (whose Open MPI is
ftkit's); run under Debian's ``mpirun``."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

__all__ = ["ScaLAPACK", "sl_call", "sl_operands"]


class ScaLAPACK:
    """Debian's libscalapack-openmpi through ctypes: a BLACS grid, descriptors, and the routines timed."""

    def __init__(self, lib: str, pr: int, pc: int) -> None:
        import ctypes

        self.ct = ct = ctypes
        self.L = L = ct.CDLL(lib, mode=ct.RTLD_GLOBAL)
        ci, ip, dp = ct.c_int, ct.POINTER(ct.c_int), ct.POINTER(ct.c_double)
        L.Cblacs_pinfo.argtypes = [ip, ip]
        L.Cblacs_get.argtypes = [ci, ci, ip]
        L.Cblacs_gridinit.argtypes = [ip, ct.c_char_p, ci, ci]
        L.Cblacs_gridinfo.argtypes = [ci, ip, ip, ip, ip]
        L.Cblacs_barrier.argtypes = [ci, ct.c_char_p]
        L.Cdgamx2d.argtypes = [ci, ct.c_char_p, ct.c_char_p, ci, ci, dp, ci, ip, ip, ci, ci, ci]
        L.Cdgsum2d.argtypes = [ci, ct.c_char_p, ct.c_char_p, ci, ci, dp, ci, ci, ci]
        L.numroc_.restype = ci
        me, nprocs = ci(), ci()
        L.Cblacs_pinfo(ct.byref(me), ct.byref(nprocs))  # initializes MPI (Debian's Open MPI)
        if nprocs.value != pr * pc:
            raise SystemExit(f"grid {pr}x{pc} needs {pr * pc} ranks, the job has {nprocs.value}")
        self.rank = me.value
        ctx = ci()
        L.Cblacs_get(-1, 0, ct.byref(ctx))
        L.Cblacs_gridinit(ct.byref(ctx), b"R", pr, pc)  # row-major, like ftkit.ProcessGrid
        self.ctx = ctx
        rows, cols, myrow, mycol = ci(), ci(), ci(), ci()
        L.Cblacs_gridinfo(ctx, ct.byref(rows), ct.byref(cols), ct.byref(myrow), ct.byref(mycol))
        self.pr, self.pc, self.myrow, self.mycol = pr, pc, myrow.value, mycol.value

    def i(self, v: int) -> Any:
        return self.ct.byref(self.ct.c_int(v))

    def d(self, v: float) -> Any:
        return self.ct.byref(self.ct.c_double(v))

    def ptr(self, a: np.ndarray) -> Any:
        return a.ctypes.data_as(self.ct.POINTER(self.ct.c_double))

    def local_indices(self, n: int, nb: int) -> tuple[np.ndarray, np.ndarray]:
        """Global row and column indices of this process's local rows / columns of an ``n x n`` matrix."""
        g = np.arange(n)
        return g[(g // nb) % self.pr == self.myrow], g[(g // nb) % self.pc == self.mycol]

    def desc(self, n: int, nb: int, lld: int) -> Any:
        d, info = (self.ct.c_int * 9)(), self.ct.c_int()
        self.L.descinit_(d, self.i(n), self.i(n), self.i(nb), self.i(nb), self.i(0), self.i(0),
                         self.ct.byref(self.ctx), self.i(max(1, lld)), self.ct.byref(info))  # fmt: skip
        if info.value != 0:
            raise SystemExit(f"descinit_ failed: info={info.value}")
        return d

    def reduce(self, value: float, op: str) -> float:
        """The maximum (``op="max"``) or sum of ``value`` over the grid, on every process."""
        v = self.ct.c_double(value)
        if op == "max":
            self.L.Cdgamx2d(self.ctx, b"A", b" ", 1, 1, self.ct.byref(v), 1, None, None, -1, -1, -1)
        else:
            self.L.Cdgsum2d(self.ctx, b"A", b" ", 1, 1, self.ct.byref(v), 1, -1, -1)
        return v.value


def sl_operands(sl: ScaLAPACK, n: int, nb: int) -> dict[str, np.ndarray]:
    """Local pieces of T, S, B, C as ``bench_pblas3.operands`` makes them (same distributions, other
    numbers)."""
    rows, cols = sl.local_indices(n, nb)
    rng = np.random.default_rng((sl.rank, n, nb))
    shape = (rows.size, cols.size)
    diag = rows[:, None] == cols[None, :]
    T = rng.uniform(-1.0, 1.0, shape)
    T = np.where(diag, n + np.abs(T), T)
    S = np.cos(1e-3 * (rows[:, None] + 1.0) * (cols[None, :] + 1.0)) + 2.0 * n * diag  # symmetric, dominant
    B, C = rng.uniform(-1.0, 1.0, shape), rng.uniform(-1.0, 1.0, shape)
    return {k: np.asfortranarray(v) for k, v in (("T", T), ("S", S), ("B", B), ("C", C))}


def sl_call(sl: ScaLAPACK, routine: str, n: int, ops: dict[str, np.ndarray],
            desc: Any) -> tuple[float, float, float, float]:
    """Run the ScaLAPACK ``routine`` on fresh copies (not timed) as ``bench_pblas3.call`` runs ftkit's (same
    options); (time, cpu, user cpu, system cpu), CPU seconds summed over the ranks."""
    L, i, d, p = sl.L, sl.i, sl.d, sl.ptr
    T, S, B, C = ops["T"], ops["S"].copy(order="F"), ops["B"].copy(order="F"), ops["C"].copy(order="F")
    info = sl.ct.c_int(0)
    sl.L.Cblacs_barrier(sl.ctx, b"A")
    t0, c0 = time.perf_counter(), os.times()
    if routine in ("pdtrsm", "pdtrmm"):
        getattr(L, routine + "_")(b"L", b"L", b"N", b"N", i(n), i(n), d(1.0), p(T), i(1), i(1), desc, p(B),
                                  i(1), i(1), desc)  # fmt: skip
    elif routine == "pdgemm":
        L.pdgemm_(b"N", b"N", i(n), i(n), i(n), d(1.0), p(ops["B"]), i(1), i(1), desc, p(T), i(1), i(1), desc,
                  d(1.0), p(C), i(1), i(1), desc)  # fmt: skip
    elif routine == "pdsymm":
        L.pdsymm_(b"L", b"L", i(n), i(n), d(1.0), p(T), i(1), i(1), desc, p(ops["B"]), i(1), i(1), desc,
                  d(1.0), p(C), i(1), i(1), desc)  # fmt: skip
    elif routine == "pdgeadd":
        L.pdgeadd_(b"N", i(n), i(n), d(1.0), p(ops["B"]), i(1), i(1), desc, d(1.0), p(C), i(1), i(1), desc)
    elif routine == "pdtradd":
        L.pdtradd_(b"L", b"N", i(n), i(n), d(1.0), p(ops["B"]), i(1), i(1), desc, d(1.0), p(C), i(1), i(1),
                   desc)  # fmt: skip
    elif routine == "pdtran":
        L.pdtran_(i(n), i(n), d(1.0), p(ops["B"]), i(1), i(1), desc, d(1.0), p(C), i(1), i(1), desc)
    elif routine == "pdsyrk":
        L.pdsyrk_(b"L", b"N", i(n), i(n), d(1.0), p(ops["B"]), i(1), i(1), desc, d(1.0), p(C), i(1), i(1),
                  desc)
    elif routine == "pdsyr2k":
        L.pdsyr2k_(b"L", b"N", i(n), i(n), d(1.0), p(ops["B"]), i(1), i(1), desc, p(T), i(1), i(1), desc,
                   d(1.0), p(C), i(1), i(1), desc)  # fmt: skip
    else:  # pdpotrf (Fortran: the hidden length of UPLO passed last)
        L.pdpotrf_(b"L", i(n), p(S), i(1), i(1), desc, sl.ct.byref(info), sl.ct.c_size_t(1))
    t = sl.reduce(time.perf_counter() - t0, "max")
    c1 = os.times()
    usr, sys_ = sl.reduce(c1.user - c0.user, "sum"), sl.reduce(c1.system - c0.system, "sum")
    if info.value != 0:
        raise SystemExit(f"{routine}: info={info.value}")
    return t, usr + sys_, usr, sys_
