"""Compile the linear algebra's numba kernels into numba's cache, in one process.

usage: ``python -m ftkit.linalg._warm`` (``make test`` runs it before the tests)

Every kernel is compiled with ``cache=True``: the first process that calls it with a new signature compiles it
and saves it beside its source (``__pycache__``, or in ``NUMBA_CACHE_DIR``), later processes load it. The
ranks of a job started on a cold cache all compile the same kernels at once (the tests' 2 x 3 ABFT campaign on
2 cores: 305 s on a cold cache, 9 s after this module). This module calls every routine -- plain, ``ft_`` and
``resilient_`` forms, float32 and float64 (the products: float64), every flag combination, clean and with a
bit flip in A, B or C -- on random small cases on a 1 x 1 grid of this process alone, so that the kernels are
compiled once, here (about 160 s on a cold cache, 8 s on a warm one). A signature records its arrays' layouts,
and a piece of one row or column is both C and F contiguous: the cases draw sizes (1 to 19), block sizes (1 to
6) and offsets as the conformance tests do, so that the degenerate layouts come up too. What only a grid of
more processes calls (FT_PDPOTRF's update kernels take a tuple of one piece per process row) is left to the
first job that needs it. It prints one line: how many calls, kernel signatures compiled and loaded, in how
long.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import linalg
from ..inject import BitFlip, InjectionPlan
from . import DistributedMatrix, ProcessGrid

__all__ = ["main"]

#: Random cases per routine, flag combination and dtype.
CASES = 3
DTYPES = (np.float32, np.float64)
#: The products in float64 only: the tests use float32 with the triangular and rank-k routines and the
#: additions only, and the float32 kernels of ``ft_pdgemm`` / ``ft_pdsymm`` took 50 s of 210 here for nothing.
PRODUCT_DTYPES = (np.float64,)

Args = tuple[Any, ...]


class _Cases:
    """Random operands on a 1 x 1 grid, and the forms of a routine to call with them."""

    def __init__(self, grid: ProcessGrid, store: str, seed: int) -> None:
        self.grid, self.store, self.rng = grid, store, np.random.default_rng(seed)
        self.calls = 0

    def size(self, low: int = 1) -> int:
        return int(self.rng.integers(low, 20))

    def scalar(self, zero: bool = True) -> float:
        return float(self.rng.choice([1.0, -2.5, 0.5, 0.0] if zero else [1.0, -2.5, 0.5]))

    def tol(self) -> str | None:
        """The rigorous (``None``) or the statistical threshold of a checked routine, at random."""
        return None if self.rng.random() < 0.5 else "statistical"

    def matrix(self, rows: int, cols: int, dtype: type, spd: bool = False) -> Args:
        """``(matrix, i, j)``: ``rows x cols`` at a random offset of a larger matrix in random blocks."""
        rng = self.rng
        i, j = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        g = rng.uniform(-1.0, 1.0, (i + rows + int(rng.integers(0, 3)), j + cols + int(rng.integers(0, 3))))
        if spd:
            s = g[i:i + rows, j:j + cols]
            g[i:i + rows, j:j + cols] = s @ s.T + rows * np.eye(rows)
        mb, nb = (int(b) for b in rng.integers(1, 7, size=2))
        return DistributedMatrix.from_global(self.grid, g.astype(dtype), mb=mb, nb=nb), i, j

    def forms(self, name: str, checked: bool) -> Iterator[Callable[..., Any]]:
        """``name``'s plain routine; its ``ft_`` form clean twice, then with a flip in A, B and C; its
        ``resilient_`` form."""
        yield getattr(linalg, name)
        if checked:
            ft = getattr(linalg, "ft_" + name)
            for target in (None, None, "A", "B", "C"):
                flip = [BitFlip(target=target, bits=(44, 61), persistent=False)] if target else []
                kw = dict(bs=int(self.rng.integers(2, 9)), tol=self.tol(),
                          inject=InjectionPlan(flip, seed=self.calls) if flip else None)
                yield lambda *args, ft=ft, kw=kw: ft(*args, **kw)
        resilient = getattr(linalg, "resilient_" + name)
        yield lambda *args: resilient(*args, store=self.store)

    def run(self, name: str, make: Callable[[type], Args], checked: bool = True,
            dtypes: tuple[type, ...] = DTYPES) -> None:
        """Call every form of ``name`` on ``CASES`` new argument tuples ``make(dtype)`` per dtype."""
        for dtype, _ in itertools.product(dtypes, range(CASES)):
            for call in self.forms(name, checked):
                call(*make(dtype))
                self.calls += 1


def _products(c: _Cases) -> None:
    for ta, tb in itertools.product("NT", "NT"):
        def gemm(dtype: type, ta: str = ta, tb: str = tb) -> Args:
            m, n, k = c.size(), c.size(), c.size(0)
            A = c.matrix(*((m, k) if ta == "N" else (k, m)), dtype)
            B = c.matrix(*((k, n) if tb == "N" else (n, k)), dtype)
            return (ta, tb, m, n, k, c.scalar(), *A, *B, c.scalar(), *c.matrix(m, n, dtype))
        c.run("pdgemm", gemm, dtypes=PRODUCT_DTYPES)
    for side, uplo in itertools.product("LR", "UL"):
        def symm(dtype: type, side: str = side, uplo: str = uplo) -> Args:
            m, n = c.size(), c.size()
            ka = m if side == "L" else n
            return (side, uplo, m, n, c.scalar(), *c.matrix(ka, ka, dtype), *c.matrix(m, n, dtype),
                    c.scalar(), *c.matrix(m, n, dtype))
        c.run("pdsymm", symm, dtypes=PRODUCT_DTYPES)


def _triangular(c: _Cases) -> None:
    for name, (side, uplo, ta, diag) in itertools.product(("pdtrsm", "pdtrmm"),
                                                          itertools.product("LR", "UL", "NT", "NU")):
        def tri(dtype: type, side: str = side, uplo: str = uplo, ta: str = ta, diag: str = diag) -> Args:
            m, n = c.size(), c.size()
            ka = m if side == "L" else n
            return (side, uplo, ta, diag, m, n, c.scalar(zero=False), *c.matrix(ka, ka, dtype, spd=True),
                    *c.matrix(m, n, dtype))
        c.run(name, tri)


def _rank_k(c: _Cases) -> None:
    for uplo, trans in itertools.product("UL", "NT"):
        def operand(n: int, k: int, dtype: type, trans: str = trans) -> Args:
            return c.matrix(*((n, k) if trans == "N" else (k, n)), dtype)

        def syrk(dtype: type, uplo: str = uplo, trans: str = trans) -> Args:
            n, k = c.size(), c.size(0)
            return (uplo, trans, n, k, c.scalar(), *operand(n, k, dtype), c.scalar(), *c.matrix(n, n, dtype))

        def syr2k(dtype: type, uplo: str = uplo, trans: str = trans) -> Args:
            n, k = c.size(), c.size(0)
            return (uplo, trans, n, k, c.scalar(), *operand(n, k, dtype), *operand(n, k, dtype), c.scalar(),
                    *c.matrix(n, n, dtype))
        c.run("pdsyrk", syrk)
        c.run("pdsyr2k", syr2k)


def _additions(c: _Cases) -> None:
    for trans, uplo in itertools.product("NT", "UL"):
        def geadd(dtype: type, trans: str = trans) -> Args:
            m, n = c.size(), c.size()
            return (trans, m, n, c.scalar(), *c.matrix(*((m, n) if trans == "N" else (n, m)), dtype),
                    c.scalar(), *c.matrix(m, n, dtype))

        def tradd(dtype: type, uplo: str = uplo, trans: str = trans) -> Args:
            return (uplo, *geadd(dtype, trans))
        c.run("pdgeadd", geadd, checked=False)
        c.run("pdtradd", tradd, checked=False)

    def tran(dtype: type) -> Args:
        m, n = c.size(), c.size()
        return (m, n, c.scalar(), *c.matrix(n, m, dtype), c.scalar(), *c.matrix(m, n, dtype))
    c.run("pdtran", tran, checked=False)


def _cholesky(c: _Cases) -> None:
    """PDPOTRF, PDPOTRS and FT_PDPOTRF clean, with a flip in A, B or C, and with two flips in one column of a
    block (recomputed)."""
    for dtype, uplo, _ in itertools.product(DTYPES, "LU", range(CASES)):
        n, nrhs = 10 + c.size(), c.size()
        A, i, j = c.matrix(n, n, dtype, spd=True)
        linalg.pdpotrf(uplo, n, A, i, j)
        linalg.pdpotrs(uplo, n, nrhs, A, i, j, *c.matrix(n, nrhs, dtype))
        for target in (None, None, "A", "B", "C"):
            flip = [BitFlip(target=target, bits=(52, 61))] if target else []
            linalg.ft_pdpotrf(uplo, n, *c.matrix(n, n, dtype, spd=True), bs=int(c.rng.integers(1, 9)),
                              tol=c.tol(), inject=InjectionPlan(flip, seed=c.calls) if flip else None,
                              inject_panel=1)
            c.calls += 1
        c.calls += 2
    n = 48  # panel 1's trailing rows 9 and 12 are in one block of 8 rows
    g = c.rng.uniform(-1.0, 1.0, (n, n))
    for uplo, mb in itertools.product("LU", (8, 6)):
        A = DistributedMatrix.from_global(c.grid, g @ g.T / n + np.eye(n), mb=mb, nb=8)
        two = [BitFlip(target="C", step=1, index=(i, 0), bit=61) for i in (9, 12)]
        linalg.ft_pdpotrf(uplo, n, A, 0, 0, inject=InjectionPlan(two, seed=1), inject_panel=1)
        c.calls += 1


def _dispatchers() -> list[Any]:
    """The numba dispatchers of ftkit's imported modules."""
    from numba.core.registry import CPUDispatcher

    found = {}
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("ftkit.") and mod is not None:
            for obj in vars(mod).values():
                if isinstance(obj, CPUDispatcher):
                    found[id(obj)] = obj
    return list(found.values())


def main() -> int:
    """Run every case on a 1 x 1 grid of this process; print what it compiled and how long it took.

    Returns
    -------
    int
        0; an error of a routine is raised (it is a real one: the cases are seeded, the same every run).
    """
    t0 = time.perf_counter()
    grid = ProcessGrid(MPI.COMM_SELF, 1, 1)
    try:
        with np.errstate(all="ignore"), tempfile.TemporaryDirectory() as store:
            cases = _Cases(grid, store, seed=0)
            for part in (_products, _triangular, _rank_k, _additions, _cholesky):
                part(cases)
    finally:
        grid.free()
    stats = [d.stats for d in _dispatchers()]
    compiled = sum(len(s.cache_misses) for s in stats)
    loaded = sum(len(s.cache_hits) for s in stats)
    print(f"ftkit.linalg._warm: {cases.calls} calls on a 1 x 1 grid, {compiled} kernel signatures compiled, "
          f"{loaded} loaded from numba's cache, {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
