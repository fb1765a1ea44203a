"""resilient_pdgemm on a PxQ grid with a rank killed (inside or from outside) or stalled at chosen steps.

Prints ``STEPS n`` (rank 0), per survivor ``STATE rank=.. failed=.. table=.. reads=.. verified=..`` and,
on the
survivors' rank 0, ``CHECK maxerr=.. ok=..`` comparing the gathered C with numpy's product.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import inject
from ftkit.errors import ABFTError, ProcessFailure, StorageError
from ftkit.failure import Fenced, exit_without_finalize, load_state_table, persist_state_table
from ftkit.linalg import DistributedMatrix, ProcessGrid, pdgemm
from ftkit.linalg.resilient import _call_state, resilient_pdgemm, resilient_pdsymm

p = argparse.ArgumentParser()
p.add_argument("--grid", default="2x2")
p.add_argument("--n", type=int, default=48)
p.add_argument("--nb", type=int, default=8)
p.add_argument("--trans", default="NN")
p.add_argument("--algorithm", default="summa")
p.add_argument("--via-ft", action="store_true", help="call ft_pdgemm(..., protect_inputs=store) instead")
p.add_argument("--protect-first", action="store_true",
               help="protect_operands() once, then multiply --calls times with the handle as store=")
p.add_argument("--calls", type=int, default=1, help="with --protect-first: multiplies with the same handle")
p.add_argument("--alpha", type=float, default=1.5)
p.add_argument("--beta", type=float, default=0.5)
p.add_argument("--timeout", type=float, default=None)
p.add_argument("--kill-rank", type=int, action="append", default=[])
p.add_argument("--kill-step", type=int, action="append", default=[])
p.add_argument("--wait-rank", type=int, default=-1)
p.add_argument("--wait-step", type=int, default=-1)
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-step", type=int, default=-1)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--lose-inputs", action="store_true", help="killed ranks delete their stored inputs first")
p.add_argument("--compare-pdgemm", action="store_true", help="also run pdgemm and compare bit for bit")
p.add_argument("--continue-after", dest="cont", action="store_true",
               help="after a failure: a call on the old grid must raise at once (state table), then a "
               "multiply on the survivors' grid must work; the state table is persisted in <dir>/state.json")
p.add_argument("--hook-rank", type=int, default=-1,
               help="this rank writes <dir>/ready and waits to be killed when it reaches --hook-stage")
p.add_argument("--hook-stage", default="",
               help="a stage name of ftkit.linalg.resilient._call_state.fault_hook")
p.add_argument("--hook-error", action="store_true", help="at --hook-stage, raise an error instead")
p.add_argument("--error-rank", type=int, default=-1, help="this rank raises its own error at --error-step, "
               "then stays alive until the survivors are done (at most 60 s)")
p.add_argument("--error-step", type=int, default=-1)
p.add_argument("--routine", choices=["gemm", "symm"], default="gemm",
               help="symm: resilient_pdsymm with --side, --uplo (A symmetric from its --uplo triangle)")
p.add_argument("--side", default="L")
p.add_argument("--uplo", default="U")
p.add_argument("--store", default=None, help="the store directory (default <dir>/store)")
p.add_argument("--dir", required=True)
a = p.parse_args()
STORE = Path(a.store) if a.store else Path(a.dir, "store")

world = MPI.COMM_WORLD
rank = world.Get_rank()
Path(a.dir, f"pid.{rank}").write_text(str(os.getpid()))
P, Q = (int(x) for x in a.grid.split("x"))
grid = ProcessGrid(world, P, Q)
n, nb = a.n, a.nb
A = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
B = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
C = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
a_g, b_g, c_g = A.to_global(), B.to_global(), C.to_global()
C_ref = C.copy()
if rank == 0:
    print(f"STEPS {-(-n // nb) if a.algorithm == 'summa' else P}", flush=True)


def on_step(step: int) -> None:
    for r, s in zip(a.kill_rank, a.kill_step, strict=False):
        if rank == r and step == s:
            if a.lose_inputs:
                for f in Path(a.dir, "store").glob(f"*/*.{rank}.ftk"):
                    f.unlink()
            inject.kill_self()
    if rank == a.wait_rank and step == a.wait_step:
        Path(a.dir, "ready").write_text(str(rank))
        time.sleep(60)  # the test driver kills this process by pid long before
    if rank == a.slow_rank and step == a.slow_step:
        time.sleep(a.sleep)
    if rank == a.error_rank and step == a.error_step:
        raise RuntimeError(f"an error of rank {rank}'s own at step {step}")


def at_stage(stage: str) -> None:
    if rank == a.hook_rank and stage == a.hook_stage:
        if a.hook_error:
            raise RuntimeError(f"an error of rank {rank}'s own at stage {stage}")
        Path(a.dir, "ready").write_text(str(rank))
        time.sleep(60)  # the test driver kills this process by pid long before


_call_state.fault_hook = at_stage


if a.cont:
    persist_state_table(Path(a.dir, "state.json"))
try:
    if a.via_ft:
        from ftkit.linalg.abft import ft_pdgemm

        report = ft_pdgemm(a.trans[0], a.trans[1], n, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0, 0,
                           width=nb, protect_inputs=Path(a.dir, "store"))  # fmt: skip
        kind = type(report.result).__name__
        print(f"FTREPORT rank={rank} failed={list(report.failed_ranks)} result={kind}", flush=True)
        res = report.result
    elif a.protect_first:
        from ftkit.linalg.resilient.protected import protect_operands

        ops = protect_operands(a.trans[0], a.trans[1], n, n, n, A, 0, 0, B, 0, 0, C, 0, 0,
                               store=STORE, algorithm=a.algorithm,
                               timeout=a.timeout)  # fmt: skip
        for call in range(a.calls):  # the same C each time: every call must give the same product
            C.local[...] = C_ref.local
            if call == a.calls - 1 and a.calls > 1:  # (no failure in this mode: plain barriers are safe)
                world.Barrier()
                print(f"STOREFILES rank={rank} before_last_call="
                      f"{sorted(f.name for f in Path(a.dir, 'store').rglob('*.ftk'))}", flush=True)
                world.Barrier()
            res = resilient_pdgemm(a.trans[0], a.trans[1], n, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0,
                                   0, store=ops, timeout=a.timeout, width=nb, on_step=on_step,
                                   algorithm=a.algorithm)  # fmt: skip
        if not res.failed_ranks:
            ops.release()
    elif a.routine == "symm":
        res = resilient_pdsymm(a.side, a.uplo, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0, 0, store=STORE,
                               timeout=a.timeout, width=nb, on_step=on_step)  # fmt: skip
    else:
        res = resilient_pdgemm(a.trans[0], a.trans[1], n, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0, 0,
                               store=STORE, timeout=a.timeout, width=nb, on_step=on_step,
                               algorithm=a.algorithm)  # fmt: skip
except Fenced as exc:
    print(f"FENCED rank={rank} failed_ranks={list(exc.failed_ranks)}", flush=True)
    exit_without_finalize()
except ProcessFailure as exc:
    print(f"PROCESSFAILURE rank={rank} failed_ranks={list(exc.failed_ranks)} msg={exc}", flush=True)
    exit_without_finalize()
except ABFTError as exc:
    print(f"ABFTERROR rank={rank} msg={exc}", flush=True)
    Path(a.dir, f"done.{rank}").write_text("")  # finished (an --error-rank waits for that)
    exit_without_finalize()
except StorageError as exc:
    print(f"STORAGEERROR rank={rank} errno={exc.errno} msg={exc}", flush=True)
    exit_without_finalize()
except RuntimeError as exc:  # --error-rank: an application that handles its error and keeps running
    others = [r for r in range(world.Get_size()) if r != rank]
    limit = time.monotonic() + 60
    while time.monotonic() < limit and not all(Path(a.dir, f"done.{r}").exists() for r in others):
        try:  # still making MPI progress (as an application doing other MPI work would): never suspected
            world.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
        except MPI.Exception:
            pass
        time.sleep(0.05)
    done = all(Path(a.dir, f"done.{r}").exists() for r in others)
    print(f"OWNERROR rank={rank} {type(exc).__name__}: {exc}; survivors_done_meanwhile={done}", flush=True)
    exit_without_finalize()
print(
    f"STATE rank={rank} failed={list(res.failed_ranks)} table={res.state_table.ravel().tolist()} "
    f"reads={res.storage_reads} verified={res.tiles_verified} grid={res.grid.nprow}x{res.grid.npcol} "
    f"reassigned={res.reassigned}",
    flush=True,
)
Path(a.dir, f"done.{rank}").write_text("")
if a.compare_pdgemm:
    pdgemm(a.trans[0], a.trans[1], n, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C_ref, 0, 0, width=nb)
    same = bool(np.array_equal(C_ref.local, res.C.local))
    print(f"BITWISE rank={rank} same={same}", flush=True)
got = res.C.to_global(root=0)
if res.comm.Get_rank() == 0:
    opa = a_g.T if a.trans[0] != "N" else a_g
    opb = b_g.T if a.trans[1] != "N" else b_g
    if a.routine == "symm":  # only the uplo triangle of A is the matrix; the other one must not be read
        tri = np.triu(a_g) if a.uplo == "U" else np.tril(a_g)
        sym = tri + tri.T - np.diag(np.diag(a_g))
        opa, opb = (sym, b_g) if a.side == "L" else (b_g, sym)
    ref = a.alpha * opa @ opb + a.beta * c_g
    err = float(np.abs(got - ref).max())
    tol = 1e-12 * n * max(1.0, float(np.abs(ref).max()))
    print(f"CHECK maxerr={err:.3e} ok={err <= tol} survivors={res.comm.Get_size()}", flush=True)
if a.cont and res.failed_ranks:
    saved = load_state_table(Path(a.dir, "state.json"), install=False)
    print(f"STATEFILE rank={rank} alive={saved.ravel().tolist()}", flush=True)
    t0 = time.monotonic()
    try:  # the old grid holds a dead process: the state table says so, no timeout is waited for
        resilient_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=Path(a.dir, "store"))
        print(f"SECOND rank={rank} no error", flush=True)
    except ProcessFailure as exc:
        print(f"SECOND rank={rank} ProcessFailure failed_ranks={list(exc.failed_ranks)} "
              f"after={time.monotonic() - t0:.2f}s", flush=True)
    g2 = res.grid
    A2 = DistributedMatrix.random(g2, n, n, mb=nb, nb=nb, seed=1)
    B2 = DistributedMatrix.random(g2, n, n, mb=nb, nb=nb, seed=2)
    C2 = DistributedMatrix.zeros(g2, n, n, mb=nb, nb=nb)
    res2 = resilient_pdgemm("N", "N", n, n, n, 1.0, A2, 0, 0, B2, 0, 0, 0.0, C2, 0, 0,
                            store=Path(a.dir, "store"), width=nb)
    got2 = res2.C.to_global(root=0)
    if res2.comm.Get_rank() == 0:
        err2 = float(np.abs(got2 - a_g @ b_g).max())
        print(f"CONTINUE ok={err2 <= 1e-12 * n} failed={list(res2.failed_ranks)} grid={g2.nprow}x{g2.npcol}",
              flush=True)
if res.failed_ranks:
    exit_without_finalize(res.comm)  # MPI_Finalize may wait for the dead (open-mpi/ompi#11404)
