"""Where the ranks of ``pdpotrf`` wait: count and wall time per rank of each wait, by what it waited for.

usage: ftkit launch -n 6 -- python benchmarks/profile_potrf_waits.py --grid 2x3 --n 4096 --nb 128 [--reps 3]
       [--ft]

Wraps the waits of the factorization's look-ahead (:mod:`ftkit.linalg.cholesky._lookahead`) and counts, per
rank, over ``--reps`` calls (after one untimed warm-up; mean per call): the waits of the panel's messages
(:meth:`PanelFlight.wait`) by the stage still missing when the wait began (``diag``: the minor, ``row``: the
panel's data or, with ``columns="direct"``, every message; ``gather``: what comes down the process column;
``none``: everything had arrived), the panel's process column's wait for ``L_kk`` before its solve
(``diagonal``: :meth:`DiagonalMessage.wait_arrival`), the calls that progress the messages between the
update's GEMMs (``progress``, wall and CPU) and the update itself (``apply_update``, its GEMMs and the
progress calls nested in it). Wall time above CPU time in a wait is a rank sleeping: with as many ranks as
cores or more, the time the factor's critical path (the next diagonal block's owner, its process column's
solve) waited on it. ``--ft`` also profiles ``ft_pdpotrf``, alternating with ``pdpotrf`` (one table each),
with its own steps beside: the checksums' carry (``carry``: :meth:`UpdateChecks.update`, the transit check
of the received rows included) and the panel's arrival (``gather_panel``: what came down the process
column taken apart, checked and merged). A profile, not a benchmark: take the ratios from
``bench_pblas3.py --side-by-side``.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _phase_timer import profile_parser
from bench_pblas3 import operands
from mpi4py import MPI

from ftkit import linalg
from ftkit.linalg.cholesky import _abft, _lookahead, _steps, ft_potrf

#: name -> [count, wall seconds, CPU seconds] in the current call
TALLY: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])


def _timed(name: Callable[..., str] | str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``fn`` to add its count, wall and CPU seconds to ``TALLY[name]`` (``name(*args)`` if callable,
    evaluated before the call)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = name(*args) if callable(name) else name
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            t = TALLY[key]
            t[0] += 1
            t[1] += time.perf_counter() - w0
            t[2] += time.process_time() - c0
    return wrapper


def _missing(flight: _lookahead.PanelFlight) -> str:
    """The first stage of ``flight`` not arrived yet, as the wait begins."""
    if flight.bad is None and not flight.diagonal.test():
        return "flight.wait: diag"
    if flight._row is not True:  # noqa: SLF001 - a profile reads the stages
        return "flight.wait: row"
    return "flight.wait: gather" if flight._gather is not True else "flight.wait: none"  # noqa: SLF001


def _install() -> None:
    pf, st = _lookahead.PanelFlight, _steps.CholeskySteps
    pf.wait = _timed(_missing, pf.wait)  # type: ignore[method-assign]
    pf.progress = _timed("progress", pf.progress)  # type: ignore[method-assign]
    if hasattr(_steps.DiagonalMessage, "wait_arrival"):
        _steps.DiagonalMessage.wait_arrival = _timed("diagonal: wait_arrival",  # type: ignore[method-assign]
                                                     _steps.DiagonalMessage.wait_arrival)
    _steps.DiagonalMessage.wait = _timed("diagonal: wait", _steps.DiagonalMessage.wait)  # type: ignore[method-assign]
    st.apply_update = _timed("apply_update", st.apply_update)  # type: ignore[method-assign]
    st.solve_rows = _timed("solve_rows", st.solve_rows)  # type: ignore[method-assign]
    _abft.UpdateChecks.update = _timed("carry", _abft.UpdateChecks.update)  # type: ignore[method-assign]
    ft_potrf.gather_panel = _timed("gather_panel", ft_potrf.gather_panel)
    if hasattr(ft_potrf, "select_part"):  # the relay's packing (inside progress)
        ft_potrf.select_part = _timed("select_part", ft_potrf.select_part)


def main() -> None:
    ap = profile_parser(__doc__)
    ap.set_defaults(grid="2x3")
    ap.add_argument("--ft", action="store_true", help="also profile ft_pdpotrf (alternating with pdpotrf)")
    args = ap.parse_args()
    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    S = operands(grid, args.n, args.nb)["S"]  # the benchmark's SPD matrix
    _install()
    routines = ("pdpotrf", "ft_pdpotrf") if args.ft else ("pdpotrf",)
    calls: dict[str, list[dict[str, list[float]]]] = {r: [] for r in routines}
    for rep in range(args.reps + 1):
        for routine in routines:  # alternating: the machine's load falls on both alike
            A = S.copy()
            TALLY.clear()
            comm.Barrier()
            w0, c0 = time.perf_counter(), time.process_time()
            getattr(linalg, routine)("L", args.n, A, 0, 0)
            total = [1, time.perf_counter() - w0, time.process_time() - c0]
            comm.Barrier()
            if rep:
                calls[routine].append({"TOTAL": total, **{k: list(v) for k, v in TALLY.items()}})
    for routine in routines:
        _print(comm, routine, args, calls[routine], pc)


def _print(comm: Any, routine: str, args: Any, calls: list[dict[str, list[float]]], pc: int) -> None:
    """Print, on rank 0, every rank's mean count, wall and CPU ms per call of each wait of ``routine``."""
    every = comm.gather(calls, root=0)
    if comm.rank:
        return
    keys = sorted({k for r in every for c in r for k in c}, key=lambda k: (k != "TOTAL", k))
    print(f"{routine} grid={args.grid} n={args.n} nb={args.nb}: mean per call over {args.reps} calls; "
          "per rank: count, wall ms (CPU ms)")
    print(f"{'':24}" + "".join(f"{f'r{r} ({r // pc},{r % pc})':>22}" for r in range(comm.size))
          + f"{'wall sum':>10}")
    for k in keys:
        cells, wall = "", 0.0
        for r in every:
            c, w, cpu = (float(np.mean([call.get(k, [0, 0.0, 0.0])[i] for call in r])) for i in range(3))
            cells += f"{c:6.0f} {w * 1e3:7.1f} ({cpu * 1e3:5.1f})"
            wall += w
        print(f"{k:24}{cells}{wall * 1e3:10.1f}")

if __name__ == "__main__":
    main()
