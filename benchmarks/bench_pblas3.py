"""Time ftkit's PBLAS routines and the Cholesky solver, plain and ABFT-checked, beside ScaLAPACK's.

usage: python benchmarks/bench_pblas3.py --side-by-side --grid 2x2 --cases 4096,128 [--rounds 3]
       [--repeats 2] [--routines pdtrsm ft_pdtrsm ...] [--seed 1]     (the driver: not under mpirun)
       ftkit launch -n 4 -- python benchmarks/bench_pblas3.py --grid 2x2 --cases 4096,128 [--repeats 2]
       [--routines pdtrsm ft_pdtrsm ...] [--check]                        (the ftkit side alone)

``--side-by-side`` runs, per round and case, one ScaLAPACK job and one ftkit job (which goes first alternates
by round, and each job takes the routines in an order shuffled per round from ``--seed``), then prints per
routine the median and 90th percentile of the timed calls of each system and the ratios of medians and of
p90s: ftkit / ScaLAPACK for the plain routines, ``ft_`` / plain and the checkpointed ``ft_pdpotrf`` / plain
within ftkit. The ScaLAPACK side is Debian's ``libscalapack-openmpi`` (``--scalapack-lib``; BLACS inside it)
called through ctypes (``_scalapack.py``; this file's ``--worker scalapack``), started by Debian's Open MPI
(``--sl-mpirun``, default ``mpirun.openmpi``) with this interpreter; it never imports mpi4py (whose Open MPI
is ftkit's) and uses BLACS for its barrier and reductions. Its BLAS is whatever ``libblas.so.3`` resolves to:
install ``libopenblas0-pthread`` (as ``/work/shared/anchors/scalapack``) or ScaLAPACK runs on the reference
BLAS; the job prints which one (``INFO``). Its operands are generated locally as the ftkit side's are (same
distributions, not the same numbers; T well conditioned, S symmetric and diagonally dominant).

Each case ``N,NB``: N x N matrices with NB x NB blocks (RSRC = CSRC = 0, ScaLAPACK's layout), uniform [-1, 1)
data (the triangular and SPD operands made well conditioned). Routines: ``pdgemm`` ("N", "N", k = N, beta
1), ``pdsymm`` (side L, lower, beta 1), ``pdtrsm`` / ``pdtrmm`` (side L, lower, no transpose, non-unit, alpha
1), ``pdsyrk`` / ``pdsyr2k`` (lower, "N", k = N, beta 1), ``pdgeadd`` ("N"), ``pdtradd`` (lower, "N") and
``pdtran`` (alpha 1, beta 1), ``pdpotrf`` (lower), the ``ft_`` versions of the first six (rigorous
threshold), ``ft_pdpotrf_ckpt`` (ft_pdpotrf with a level-1
checkpoint every 4 panels, into ``--ckpt-dir``), and the ``resilient_`` versions of the four level-3 routines,
each compared with its plain ftkit routine: ``resilient_pdtrsm`` etc. with their fixed operands protected once
per case before the timed calls (``protect_pdtrsm`` ..., untimed; its time printed as ``PROTECT`` lines), the
issue's measure, and ``resilient_pdtrsm_store`` etc. given a store directory under ``--ckpt-dir`` (every call
builds and saves its operands). Each ``resilient_`` call also fills its phase times, printed per rank as
``PHASE sys=ftkit routine=.. rank=.. protect_s=.. iterate_s=.. settle_s=.. cpu=..`` (the profile per phase
and rank; ``cpu`` that rank's CPU seconds in the call).
After the warm-up calls the timed calls are interleaved (every routine once per repetition), so a variant
and its plain routine run under the same load; the table gives the ratio of CPU-second medians beside the
wall-time ones. Timing as in the ScaLAPACK anchor programs
(``/work/shared/anchors/scalapack``): untimed warm-up call, then ``Barrier; t0; call; allreduce(MAX)``, CPU
time summed over ranks; every timed call starts from a fresh copy of its operands (copy not timed). Prints
``RES sys=ftkit routine=.. grid=.. n=.. nb=.. rep=.. t=.. gflops=.. cpu=.. usr=.. sys=..`` per call (``usr``
and ``sys``: the user and system parts of ``cpu``, all ranks summed; the table has their medians), the flop
counts of ScaLAPACK's testers (GEMM/SYMM 2 N^3, TRSM/TRMM N^3, SYRK N^3, SYR2K 2 N^3, POTRF N^3/3; the
additions and the transpose have ``gflops=-``: compare their times). ``--check`` also compares
each result with numpy on rank 0 (small sizes only) and prints ``CHECK ... OK|FAIL``.

Set ``OPENBLAS_NUM_THREADS=1`` for 1-thread ranks, as the ScaLAPACK side runs (the driver sets it for
both jobs). Do not read timings taken on a loaded machine: the driver prints the 1-minute load per job.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from _scalapack import ScaLAPACK, sl_call, sl_operands

if TYPE_CHECKING:  # the ScaLAPACK worker and the driver must not load mpi4py (another Open MPI)
    from ftkit import linalg

#: flops / N^3 of the routines that compute (the additions and the transpose only move data: time alone)
FLOPS = {"pdgemm": 2.0, "pdsymm": 2.0, "pdtrsm": 1.0, "pdtrmm": 1.0, "pdsyrk": 1.0, "pdsyr2k": 2.0,
         "pdpotrf": 1.0 / 3.0}
ALL = ["pdgemm", "ft_pdgemm", "pdsymm", "ft_pdsymm", "pdgeadd", "pdtradd", "pdtran", "pdtrsm", "ft_pdtrsm",
       "pdtrmm", "ft_pdtrmm", "pdsyrk", "ft_pdsyrk", "pdsyr2k", "ft_pdsyr2k",
       "pdpotrf", "ft_pdpotrf", "ft_pdpotrf_ckpt", "resilient_pdtrsm", "resilient_pdtrmm", "resilient_pdsyrk",
       "resilient_pdsyr2k", "resilient_pdtrsm_store", "resilient_pdtrmm_store", "resilient_pdsyrk_store",
       "resilient_pdsyr2k_store"]
#: The variants of a plain routine: ABFT (``ft_``), checkpointed (``_ckpt``), process-failure tolerant
#: (``resilient_``: with protected operands; ``_store``: given a store directory, saving operands per call).
PREFIXES, SUFFIXES = ("ft_", "resilient_"), ("_ckpt", "_store")


def gflops(routine: str, n: int, t: float) -> str:
    """The GFLOP/s of a call of ``routine`` on order ``n`` taking ``t`` seconds, ``-`` if it does no flops."""
    f = FLOPS.get(base_of(routine))
    return "-" if f is None else f"{f * n**3 / t / 1e9:.2f}"


def base_of(routine: str) -> str:
    """The plain routine a variant is compared with."""
    for p in PREFIXES:
        routine = routine.removeprefix(p)
    for s in SUFFIXES:
        routine = routine.removesuffix(s)
    return routine


def protected(routine: str) -> bool:
    """Whether ``routine`` is a ``resilient_`` one run with protected operands."""
    return routine.startswith("resilient_") and not routine.endswith("_store")


def protect(routine: str, n: int, ops: Mats, store: str) -> Any:
    """Protect the fixed operands of ``routine``'s benchmark call (:func:`call`) once (collective)."""
    from ftkit import linalg

    base = base_of(routine)
    fn = getattr(linalg, base.replace("pd", "protect_pd", 1))
    if base in ("pdtrsm", "pdtrmm"):
        return fn("L", "L", "N", "N", n, n, ops["T"], 0, 0, ops["B"], 0, 0, store=store)
    if base == "pdsyrk":
        return fn("L", "N", n, n, ops["B"], 0, 0, ops["C"], 0, 0, store=store)
    return fn("L", "N", n, n, ops["B"], 0, 0, ops["T"], 0, 0, ops["C"], 0, 0, store=store)
Mats = dict[str, "linalg.DistributedMatrix"]
RES_LINE = re.compile(r"RES sys=(\S+) routine=(\S+) grid=\S+ n=(\d+) nb=(\d+) rep=\d+ t=([\d.]+) "
                      r"gflops=\S+ cpu=([\d.]+) usr=([\d.]+) sys=([\d.]+)")


def operands(grid: linalg.ProcessGrid, n: int, nb: int) -> Mats:
    """T (well-conditioned lower triangle), S (SPD), B and C (uniform), generated without a global array."""
    from ftkit import linalg

    T = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    S = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
    rows, cols = T.global_rows()[:, None], T.global_cols()[None, :]
    T.local[...] = np.where(rows == cols, n + np.abs(T.local), T.local)
    S.local[...] = np.where(rows == cols, 2.0 * n, S.local + 0.0)
    # S = (R + R.T) / 2 + 2n I: symmetric and strictly diagonally dominant, hence SPD
    sym = linalg.DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
    linalg.pdtran(n, n, 0.5, S, 0, 0, 0.0, sym, 0, 0)
    linalg.pdgeadd("N", n, n, 0.5, S, 0, 0, 1.0, sym, 0, 0)
    B = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
    C = linalg.DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
    return {"T": T, "S": sym, "B": B, "C": C}


def call(routine: str, n: int, ops: Mats, ckpt: object, store: Any = None) -> linalg.DistributedMatrix:
    """Run ``routine`` on fresh copies of its operands; return the matrix it wrote. ``store``: the input
    store directory or protected operands of the ``resilient_`` routines (their phase times in
    ``call.stats``)."""
    import functools

    from mpi4py import MPI

    from ftkit import linalg

    T, S, B, C = ops["T"], ops["S"].copy(), ops["B"].copy(), ops["C"].copy()
    base = base_of(routine)
    fn = getattr(linalg, routine.removesuffix("_ckpt").removesuffix("_store"))
    stats: dict[str, float] = {}
    call.stats = stats  # type: ignore[attr-defined]
    if routine.startswith("resilient_"):
        fn = functools.partial(fn, store=store, stats=stats)
    comm = T.grid.comm
    comm.Barrier()
    t0, c0 = time.perf_counter(), os.times()
    if base in ("pdtrsm", "pdtrmm"):
        fn("L", "L", "N", "N", n, n, 1.0, T, 0, 0, B, 0, 0)
        out = B
    elif base == "pdgemm":
        fn("N", "N", n, n, n, 1.0, ops["B"], 0, 0, T, 0, 0, 1.0, C, 0, 0)
        out = C
    elif base == "pdsymm":
        fn("L", "L", n, n, 1.0, T, 0, 0, ops["B"], 0, 0, 1.0, C, 0, 0)
        out = C
    elif base in ("pdgeadd", "pdtradd", "pdtran"):
        flags = {"pdgeadd": ("N",), "pdtradd": ("L", "N"), "pdtran": ()}[base]
        fn(*flags, n, n, 1.0, ops["B"], 0, 0, 1.0, C, 0, 0)
        out = C
    elif base == "pdsyrk":
        fn("L", "N", n, n, 1.0, ops["B"], 0, 0, 1.0, C, 0, 0)
        out = C
    elif base == "pdsyr2k":
        fn("L", "N", n, n, 1.0, ops["B"], 0, 0, ops["T"], 0, 0, 1.0, C, 0, 0)
        out = C
    elif routine == "ft_pdpotrf_ckpt":
        fn("L", n, S, 0, 0, ckpt=ckpt, ckpt_every=4)
        out = S
    else:
        fn("L", n, S, 0, 0)
        out = S
    t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    c1 = os.times()
    usr, sys_ = comm.allreduce(np.array([c1.user - c0.user, c1.system - c0.system]), op=MPI.SUM)
    call.last = (t, float(usr + sys_), float(usr), float(sys_))  # type: ignore[attr-defined]
    return out


def check(routine: str, n: int, ops: Mats, out: linalg.DistributedMatrix) -> str:
    """Compare ``out`` with numpy; return ``OK`` or ``FAIL <error>`` (collective: gathers)."""
    g = {k: v.to_global() for k, v in ops.items()}
    got = out.to_global()
    base = base_of(routine)
    low = np.tril(g["T"])
    if base in ("pdgemm", "pdsymm"):
        a = g["B"] @ g["T"] if base == "pdgemm" else (low + np.tril(low, -1).T) @ g["B"]
        err = np.abs(got - a - g["C"]).max() / (np.abs(g["T"]).max() * np.abs(g["B"]).max() * n)
    elif base in ("pdgeadd", "pdtradd", "pdtran"):
        ref = g["C"] + (g["B"].T if base == "pdtran" else g["B"])  # each entry c + b, as numpy rounds it
        mask = np.tril(np.ones((n, n), bool)) if base == "pdtradd" else np.ones((n, n), bool)
        if not np.array_equal(got[mask], ref[mask]) or not np.array_equal(got[~mask], g["C"][~mask]):
            return "FAIL not c + op(b) bit for bit (tradd: and C above the diagonal)"
        err = 0.0
    elif base == "pdtrsm":
        err = np.abs(low @ got - g["B"]).max() / (np.abs(low).max() * np.abs(got).max() * n)
    elif base == "pdtrmm":
        err = np.abs(got - low @ g["B"]).max() / (np.abs(low).max() * np.abs(g["B"]).max() * n)
    elif base in ("pdsyrk", "pdsyr2k"):
        ref = g["B"] @ g["B"].T if base == "pdsyrk" else g["B"] @ g["T"].T + g["T"] @ g["B"].T
        ref = ref + g["C"]
        mask = np.tril(np.ones((n, n), bool))
        err = np.abs(got - ref)[mask].max() / (np.abs(ref).max() * n)
        if not np.array_equal(got[~mask], g["C"][~mask]):
            return "FAIL upper triangle changed"
    else:
        f = np.tril(got)
        err = np.abs(f @ f.T - g["S"]).max() / (np.abs(g["S"]).max() * n)
    return "OK" if err < 1e-14 else f"FAIL rel_err={err:.2e}"


def ftkit_worker(args: argparse.Namespace) -> None:
    """The ftkit side: every routine of ``args.routines`` on every case (run under ``ftkit launch``)."""
    from mpi4py import MPI

    from ftkit import linalg

    pr, pc = map(int, args.grid.split("x"))
    comm = MPI.COMM_WORLD
    grid = linalg.ProcessGrid(comm, pr, pc)
    ckpt = None
    made: list[str] = []  # directories this run made (removed at its end; not a given --ckpt-dir)

    def scratch() -> str:
        if args.ckpt_dir:
            return str(args.ckpt_dir)
        if not made:
            made.append(comm.bcast(tempfile.mkdtemp(prefix="bench_pblas3_") if comm.rank == 0 else None))
        return made[0]

    if "ft_pdpotrf_ckpt" in args.routines:
        import ftkit  # the checkpoint layer: only this variant needs it

        root = Path(scratch())
        ckpt = ftkit.Checkpointer(config=ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global",
                                                      meta_dir=root / "meta"), comm=comm)
    store: str | None = None
    if any(r.startswith("resilient_") for r in args.routines):
        store = str(Path(scratch()) / "inputs")
    for case in args.cases:
        n, nb = map(int, case.split(","))
        ops = operands(grid, n, nb)
        handles: dict[str, Any] = {}
        for routine in filter(protected, args.routines):  # once per case, before (and apart from) the calls
            comm.Barrier()
            t0 = time.perf_counter()
            handles[routine] = protect(routine, n, ops, store)  # type: ignore[arg-type]
            t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if comm.rank == 0:
                print(f"PROTECT sys=ftkit routine={routine} grid={args.grid} n={n} nb={nb} t={t:.4f}",
                      flush=True)
        for routine in args.routines:
            out = call(routine, n, ops, ckpt, handles.get(routine, store))  # warm-up (untimed)
            if args.check:
                verdict = check(routine, n, ops, out)
                if comm.rank == 0:
                    print(f"CHECK sys=ftkit routine={routine} grid={args.grid} n={n} nb={nb} {verdict}",
                          flush=True)
        for rep in range(args.reps):  # interleaved: a variant and its plain routine see the same load
            for routine in args.routines:
                c0 = time.process_time()
                call(routine, n, ops, ckpt, handles.get(routine, store))
                t, cpu, usr, sys_ = call.last  # type: ignore[attr-defined]
                if comm.rank == 0:
                    print(f"RES sys=ftkit routine={routine} grid={args.grid} n={n} nb={nb} rep={rep} "
                          f"t={t:.4f} gflops={gflops(routine, n, t)} cpu={cpu:.3f} usr={usr:.3f} "
                          f"sys={sys_:.3f}", flush=True)
                if routine.startswith("resilient_"):
                    _print_phases(comm, routine, rep, call.stats, time.process_time() - c0)  # type: ignore[attr-defined]
        for handle in handles.values():
            handle.release()
    if ckpt is not None:
        ckpt.finalize()
    comm.Barrier()
    if made and comm.rank == 0:
        shutil.rmtree(made[0], ignore_errors=True)


def _print_phases(comm: Any, routine: str, rep: int, stats: dict[str, float], cpu: float) -> None:
    """Print every rank's phase times and CPU seconds of one call on rank 0 (``PHASE`` lines; collective)."""
    rows = comm.gather((comm.rank, stats, cpu), root=0)
    if comm.rank == 0:
        for rank, st, c in rows:
            print(f"PHASE sys=ftkit routine={routine} rep={rep} rank={rank} "
                  + " ".join(f"{k}={st.get(k, 0.0):.4f}" for k in ("protect_s", "iterate_s", "settle_s"))
                  + f" cpu={c:.3f}", flush=True)


# ---------------------------------------------------------------- the ScaLAPACK side (ctypes, no mpi4py)
def scalapack_worker(args: argparse.Namespace) -> None:
    """The ScaLAPACK side: the plain routines of ``args.routines`` (run under Debian's mpirun)."""
    pr, pc = map(int, args.grid.split("x"))
    sl = ScaLAPACK(args.scalapack_lib, pr, pc)
    if sl.rank == 0:
        blas = next((line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                     if "libblas" in line or "openblas" in line.lower()), "?")  # fmt: skip
        print(f"INFO sys=scalapack lib={args.scalapack_lib} blas={os.path.realpath(blas)}", flush=True)
    for case in args.cases:
        n, nb = map(int, case.split(","))
        rows, _ = sl.local_indices(n, nb)
        ops = sl_operands(sl, n, nb)
        desc = sl.desc(n, nb, rows.size)
        for routine in (r for r in args.routines if r == base_of(r)):
            sl_call(sl, routine, n, ops, desc)  # warm-up (untimed)
            for rep in range(args.reps):
                t, cpu, usr, sys_ = sl_call(sl, routine, n, ops, desc)
                if sl.rank == 0:
                    print(f"RES sys=scalapack routine={routine} grid={args.grid} n={n} nb={nb} rep={rep} "
                          f"t={t:.4f} gflops={gflops(routine, n, t)} cpu={cpu:.3f} "
                          f"usr={usr:.3f} sys={sys_:.3f}", flush=True)
    sl.L.Cblacs_gridexit(sl.ctx)
    sl.L.Cblacs_exit(0)


# ---------------------------------------------------------------- the side-by-side driver
def _jobs(args: argparse.Namespace, routines: list[str]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The two jobs' command lines and environments (1-thread ranks; Debian's job without ftkit's MPI)."""
    me = str(Path(__file__).resolve())
    nprocs = str(np.prod([int(x) for x in args.grid.split("x")]))
    common = ["--grid", args.grid, "--reps", str(args.reps), "--cases", *args.cases, "--routines", *routines]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    foreign = ("OMPI_", "PMIX_", "PRTE_", "OPAL_")  # ftkit's Open MPI must not leak into Debian's job
    sl_env = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH" and not k.startswith(foreign)}
    sl = [args.sl_mpirun, "-n", nprocs, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
          "-x", "OPENBLAS_NUM_THREADS", "-x", "OMP_NUM_THREADS", sys.executable, me, "--worker", "scalapack",
          "--scalapack-lib", args.scalapack_lib, *common]  # fmt: skip
    ft = [str(Path(sys.executable).with_name("ftkit")), "launch", "-n", nprocs, "--", sys.executable, me,
          *common]  # fmt: skip
    return {"scalapack": (sl, sl_env), "ftkit": (ft, env)}


def _div(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is 0 (a short call's CPU seconds: ``os.times`` counts 10 ms ticks)."""
    return a / b if b else float("nan")


def _quantile(xs: list[float], q: float) -> float:
    return float(np.quantile(np.array(xs), q)) if xs else float("nan")


def side_by_side(args: argparse.Namespace) -> int:
    """Run the rounds (see the module docstring); print the per-job lines, then the table of ratios."""
    rng = random.Random(args.seed)
    times: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (case, sys, routine) -> seconds
    cpus: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # the same, CPU seconds of all ranks
    usrs: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # the user part of those
    syss: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # and the system (kernel) part
    failed = 0
    for rnd in range(args.rounds):
        routines = list(args.routines)
        rng.shuffle(routines)
        jobs = _jobs(args, routines)
        order = ["scalapack", "ftkit"] if rnd % 2 == 0 else ["ftkit", "scalapack"]
        for name in order:
            cmd, env = jobs[name]
            load = float(Path("/proc/loadavg").read_text().split()[0])
            t0 = time.monotonic()
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            print(f"# round {rnd} {name}: rc={r.returncode} wall={time.monotonic() - t0:.1f}s "
                  f"load1={load:.2f} order={','.join(routines)}", flush=True)  # fmt: skip
            for line in r.stdout.splitlines():
                m = RES_LINE.match(line)
                if m:
                    key = (f"{m.group(3)},{m.group(4)}", m.group(1), m.group(2))
                    times[key].append(float(m.group(5)))
                    cpus[key].append(float(m.group(6)))
                    usrs[key].append(float(m.group(7)))
                    syss[key].append(float(m.group(8)))
                if line.startswith(("RES", "INFO", "CHECK", "PROTECT", "PHASE")):
                    print(f"r{rnd} {line}", flush=True)
            if r.returncode != 0 or "illegal value" in r.stderr:  # PXERBLA prints and returns
                failed += 1
                print(f"# {name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}", flush=True)
    _report(args, times, cpus, usrs, syss)
    return 1 if failed else 0


Samples = dict[tuple[str, str, str], list[float]]


def _report(args: argparse.Namespace, times: Samples, cpus: Samples, usrs: Samples, syss: Samples) -> None:
    """Medians, p90s and their ratios per case and routine; the ratio of CPU-second medians beside them (on
    a busy machine the wall time of a job swings with the load, the CPU seconds much less), and the medians
    of their user and system (kernel: page faults, zeroing, syscalls) parts, all ranks summed."""
    print(f"\n{'case':>10} {'routine':>18} {'ftkit med':>10} {'p90':>8} {'ref':>20} {'ref med':>10} "
          f"{'p90':>8} {'ratio med':>9} {'p90':>6} {'cpu med':>8} {'ref cpu':>8} "
          f"{'cpu ratio':>9} {'usr':>7} {'sys':>6} {'ref usr':>7} {'ref sys':>7}")  # fmt: skip
    for case in args.cases:
        for routine in args.routines:
            base = base_of(routine)
            ref_sys = "scalapack" if routine == base else "ftkit"
            mine, ref = (case, "ftkit", routine), (case, ref_sys, base)
            med, p90 = _quantile(times.get(mine, []), 0.5), _quantile(times.get(mine, []), 0.9)
            rmed, rp90 = _quantile(times.get(ref, []), 0.5), _quantile(times.get(ref, []), 0.9)
            cmed, rcmed = _quantile(cpus.get(mine, []), 0.5), _quantile(cpus.get(ref, []), 0.5)
            print(f"{case:>10} {routine:>18} {med:10.4f} {p90:8.4f} {ref_sys + ' ' + base:>20} {rmed:10.4f} "
                  f"{rp90:8.4f} {_div(med, rmed):9.3f} {_div(p90, rp90):6.3f} {cmed:8.3f} {rcmed:8.3f} "
                  f"{_div(cmed, rcmed):9.3f} {_quantile(usrs.get(mine, []), 0.5):7.3f} "
                  f"{_quantile(syss.get(mine, []), 0.5):6.3f} {_quantile(usrs.get(ref, []), 0.5):7.3f} "
                  f"{_quantile(syss.get(ref, []), 0.5):7.3f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="2x2")
    ap.add_argument("--cases", nargs="+", default=["4096,128"])
    ap.add_argument("--reps", "--repeats", dest="reps", type=int, default=2, help="timed calls per routine")
    ap.add_argument("--routines", nargs="+", default=ALL, choices=ALL)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ckpt-dir", default=None, help="checkpoint directory (default: a temporary one)")
    ap.add_argument("--side-by-side", action="store_true", help="drive both systems' jobs (not under mpirun)")
    ap.add_argument("--rounds", type=int, default=3, help="side by side: rounds (one job per system each)")
    ap.add_argument("--seed", type=int, default=1, help="side by side: seed of the routine order per round")
    ap.add_argument("--timeout", type=float, default=3600.0, help="side by side: hard limit per job (s)")
    ap.add_argument("--worker", choices=("ftkit", "scalapack"), default="ftkit")
    ap.add_argument("--scalapack-lib", default="libscalapack-openmpi.so.2.2")
    ap.add_argument("--sl-mpirun", default="mpirun.openmpi", help="Debian's Open MPI launcher")
    args = ap.parse_args()
    if args.side_by_side:
        sys.exit(side_by_side(args))
    if args.worker == "scalapack":
        scalapack_worker(args)
    else:
        ftkit_worker(args)


if __name__ == "__main__":
    main()
