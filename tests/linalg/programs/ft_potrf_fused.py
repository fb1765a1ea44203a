"""FT_PDPOTRF's fused update (:mod:`ftkit.linalg.cholesky._fused`: per block column its rows checked, its
GEMM, its carry) against the unfused one (every check and carry first, then the GEMMs), on 2 x 2 and 2 x 3
from 6 ranks (2 x 2 from the first 4).

usage: ft_potrf_fused.py (6 ranks)

Cases, per grid: error-free, the fused path taken on every process with a trailing block column, the factor
and the carried checksums bit for bit the unfused path's (the same dgemm calls and operands) and the factor
PDPOTRF's; a flip in the rows of panel 1 a process's columns multiply (``"B"``) restored before its GEMM and
carry, as the unfused path restores it, with the same events and the same factor bit for bit. Rank 0 prints
``CASE ...`` / ``FAIL ...`` lines and ``DONE failures=F``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ftkit import linalg
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg.cholesky import _abft, _fused, ft_potrf

N, NB = 100, 8


def _run(grid: linalg.ProcessGrid, a: np.ndarray, fused: bool, flips: list[BitFlip]) -> tuple:
    """Factor ``a`` by ft_pdpotrf, fused or not: (local factor, carried checksums, events, fused calls)."""
    made: list[_abft.UpdateChecks] = []
    calls = [0]
    init, run, supports = _abft.UpdateChecks.__init__, _fused.FusedUpdate.run, ft_potrf.supports_fused

    def record(self, *args, **kw):  # type: ignore[no-untyped-def]
        init(self, *args, **kw)
        made.append(self)

    def counted(self, *args, **kw):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return run(self, *args, **kw)

    _abft.UpdateChecks.__init__, _fused.FusedUpdate.run = record, counted
    ft_potrf.supports_fused = supports if fused else (lambda *_: False)
    try:
        A = linalg.DistributedMatrix.from_global(grid, a, mb=NB, nb=NB)
        plan = InjectionPlan(flips, seed=1)
        rep = linalg.ft_pdpotrf("L", N, A, 0, 0, inject=plan if flips else None, inject_panel=1)
    finally:
        _abft.UpdateChecks.__init__, _fused.FusedUpdate.run, ft_potrf.supports_fused = init, run, supports
    events = sorted((ev.action, ev.row_block, ev.col_block) for ev in rep.events)
    return A.local.copy(), made[-1].chk_t.copy(), events, calls[0]


def main() -> None:
    world = MPI.COMM_WORLD
    failures = 0
    r = np.random.default_rng(7).standard_normal((N, N))
    a = r @ r.T / N + np.eye(N)
    for shape in ((2, 2), (2, 3)):
        comm = world.Split(0 if world.rank < shape[0] * shape[1] else MPI.UNDEFINED, world.rank)
        if comm == MPI.COMM_NULL:
            world.Barrier()
            continue
        grid = linalg.ProcessGrid(comm, *shape)
        ref = linalg.DistributedMatrix.from_global(grid, a, mb=NB, nb=NB)
        linalg.pdpotrf("L", N, ref, 0, 0)
        # "B" on rank 1: rows received from another process row; on the last rank (2 x 2: a diagonal
        # process) rows that are its own too (the GEMMs' left operand: checked whole first)
        for name, flips in (("error-free", []),
                            ("B received", [BitFlip(target="B", rank=1, index=(9, 3), bit=61)]),
                            ("B own", [BitFlip(target="B", rank=grid.size - 1, index=(9, 3), bit=61)])):
            f_l, f_c, f_ev, f_calls = _run(grid, a, True, flips)
            u_l, u_c, u_ev, _ = _run(grid, a, False, flips)
            same = np.array_equal(f_l, u_l) and np.array_equal(f_c, u_c) and f_ev == u_ev
            if not flips:
                same = same and not f_ev and np.array_equal(f_l, ref.local)
            else:  # restored in transit (an operand event, block column -1), nothing left to locate
                same = same and f_ev == [("located", 1, -1)]
            ok = bool(comm.allreduce(int(same and f_calls > 0), op=MPI.MIN))
            failures += not ok
            if comm.rank == 0:
                print(f"{'CASE' if ok else 'FAIL'} {shape[0]}x{shape[1]} {name} fused_calls={f_calls}",
                      flush=True)
        grid.free()
        comm.Free()
        world.Barrier()
    if world.rank == 0:
        print(f"DONE failures={failures}", flush=True)


if __name__ == "__main__":
    main()
