"""One trial of the random kill campaign: resilient_pdgemm while the driver SIGKILLs a rank from outside.

Every rank writes ``<dir>/pid.<rank>``; rank 0 writes ``<dir>/started`` just before the failure detector's
set-up begins (with ``--start-at-step`` when the first SUMMA step begins), so the driver can time its kill
from there. Each step sleeps ``--step-pause`` seconds (on every rank) to spread the multiply over a window a
kill can land in. The detector is set up first (``detector_for``, what the calls would do themselves), then
the operands are protected (``--mode protect``) and multiplied. Rank 0 appends ``<phase> <time.time()>``
lines to ``<dir>/marks`` as it goes (``setup``, ``protect``, ``step`` per step, ``returned``), so the
driver can tell in which phase a kill landed (as rank 0 saw it). ``--hold-rank`` with ``--hold-at``: that
rank writes ``started`` and sleeps until it is killed, just before the set-up or just before the multiply.

Prints, per surviving rank, one of ``DONE rank=.. failed=[..] verified=..`` (a result was returned, with the
number of a dead rank's blocks this rank recomputed and verified, and
``<dir>/out.<rank>.npz`` holds this rank's piece of it: global rows, global columns, values, failed ranks),
``PROCESSFAILURE rank=.. failed_ranks=[..]`` or ``FENCED rank=..``, then writes ``<dir>/end.<rank>`` and
exits once every other rank has ended or is gone (:func:`leave`).

``--setup in-call`` (issue 33) measures a kill at any moment of the call itself: nothing builds the detector
beforehand (in ``--mode protect``, ``protect_operands`` does, and the call reuses it), ``started`` is written
just before ``resilient_pdgemm`` is called, and rank 0 marks ``call`` there and ``setup`` when the call
reaches the detector's set-up (the ``"setup"`` stage of
:data:`ftkit.linalg.resilient._call_state.fault_hook`); ``--hold-at setup`` then holds the victim at that
stage, inside the call, after it saved its inputs. The driver (``benchmarks/kill_campaign.py``) assembles the
pieces and compares them with numpy.

``--routine trmm|syrk|syr2k`` (issue 33) runs ``resilient_pdtrmm`` (``--trans`` is SIDE UPLO TRANSA DIAG,
e.g. ``LUNN``; the result is B), ``resilient_pdsyrk`` or ``resilient_pdsyr2k`` (``--trans`` is UPLO TRANS,
e.g. ``LT``) instead, on the whole n x n matrices; ``--mode protect`` protects their fixed operands first with
``protect_pdtrmm`` / ``protect_pdsyrk`` / ``protect_pdsyr2k`` (``protect_pdtrsm``, ``protect_pdsymm``
likewise; the additions take ``--mode store`` only). Rank 0 writes numpy's expected
result to ``<dir>/ref.npz`` (``ref``, and ``fixed``: the entries that must equal the input bit for bit, the
triangle a rank-k update does not touch), which the driver compares the pieces with.

``--routine symm|trsm|geadd|tradd|tran`` (issue 33) runs ``resilient_pdsymm`` (``--trans`` is SIDE UPLO),
``resilient_pdtrsm`` (``--trans`` as for trmm; A is made well conditioned: its entries divided by n, 2 added
to its diagonal), ``resilient_pdgeadd`` (``--trans`` is TRANS), ``resilient_pdtradd`` (UPLO TRANS) or
``resilient_pdtran`` (``--trans`` ignored). ``ref.npz`` also
holds ``exact``: whether the result must equal ``ref`` bit for bit (the additions), not only to rounding.

``--calls-before K`` (``--mode protect``): K error-free calls on the handle (on copies of the output) come
after the protection and before the call the kill is timed for (``started`` and ``call`` are written after
them), so that call rewrites the input files the previous one kept (a call on a handle keeps its own saved
inputs for the next call to write over in place).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.errors import ProcessFailure
from ftkit.failure import Fenced, exit_without_finalize
from ftkit.linalg import DistributedMatrix, ProcessGrid
from ftkit.linalg.resilient import (
    ProtectedOperands,
    ResilientResult,
    _call_state,
    protect_pdsymm,
    protect_pdsyr2k,
    protect_pdsyrk,
    protect_pdtrmm,
    protect_pdtrsm,
    resilient_pdgeadd,
    resilient_pdgemm,
    resilient_pdsymm,
    resilient_pdsyr2k,
    resilient_pdsyrk,
    resilient_pdtradd,
    resilient_pdtran,
    resilient_pdtrmm,
    resilient_pdtrsm,
)
from ftkit.linalg.resilient._grid_detector import detector_for
from ftkit.linalg.resilient.protected import protect_operands

p = argparse.ArgumentParser()
p.add_argument("--grid", default="2x3")
p.add_argument("--n", type=int, default=96)
p.add_argument("--routine", default="gemm",
               choices=["gemm", "symm", "trmm", "trsm", "syrk", "syr2k", "geadd", "tradd", "tran"])
p.add_argument("--nb", type=int, default=8)
p.add_argument("--trans", default="TN")
p.add_argument("--alpha", type=float, default=1.5)
p.add_argument("--beta", type=float, default=0.0)
p.add_argument("--mode", choices=["store", "protect"], default="protect")
p.add_argument("--step-pause", type=float, default=0.0)
p.add_argument("--start-at-step", action="store_true",
               help="write <dir>/started when the multiply's first step begins (not before protecting)")
p.add_argument("--hold-rank", type=int, default=-1,
               help="this rank writes <dir>/started at --hold-at and sleeps until it is killed")
p.add_argument("--hold-at", choices=["setup", "multiply", "prepare"], default="multiply",
               help="prepare: inside the call, just before the routine's collective prepare step")
p.add_argument("--setup", choices=["before", "in-call"], default="before",
               help="build the failure detector before protecting and multiplying, or leave it to the calls")
p.add_argument("--timeout", type=float, default=None)
p.add_argument("--calls-before", type=int, default=0,
               help="error-free calls on copies of the output before the call the kill is timed for (each "
                    "rewrites the inputs the previous one kept: --mode protect), after the protection")
p.add_argument("--dir", required=True)
a = p.parse_args()
if a.routine in ("geadd", "tradd", "tran") and a.mode == "protect":
    p.error("--mode protect serves the multiplying routines only (the additions take no protected operands)")

world = MPI.COMM_WORLD
rank = world.Get_rank()
Path(a.dir, f"pid.{rank}").write_text(str(os.getpid()))
P, Q = (int(x) for x in a.grid.split("x"))
grid = ProcessGrid(world, P, Q)
n, nb = a.n, a.nb
A = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=1)
B = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=2)
C = DistributedMatrix.random(grid, n, n, mb=nb, nb=nb, seed=3)
if a.routine == "trsm":  # a well-conditioned triangle (also with a unit diagonal)
    A.local[...] = A.local / n + 2.0 * (A.global_rows()[:, None] == A.global_cols()[None, :])
a_g, b_g, c_g = A.to_global(), B.to_global(), C.to_global()
ta, tb = (a.trans + "NN")[0], (a.trans + "NN")[1]  # gemm only
store = Path(a.dir, "store")


def reference() -> tuple[np.ndarray, np.ndarray]:
    """numpy's result of the routine, and the mask of entries that must stay bit for bit as on entry."""
    fixed = np.zeros((n, n), dtype=bool)
    ones = np.ones((n, n), dtype=bool)
    if a.routine in ("trmm", "trsm"):
        side, uplo, transa, diag = a.trans
        t = np.triu(a_g) if uplo == "U" else np.tril(a_g)
        if diag == "U":
            np.fill_diagonal(t, 1.0)
        t = t.T if transa != "N" else t
        if a.routine == "trsm":
            x = np.linalg.solve(t, b_g) if side == "L" else np.linalg.solve(t.T, b_g.T).T
            return a.alpha * x, fixed
        return a.alpha * (t @ b_g if side == "L" else b_g @ t), fixed
    if a.routine == "symm":
        side, uplo = a.trans[:2]
        s = np.triu(a_g) + np.triu(a_g, 1).T if uplo == "U" else np.tril(a_g) + np.tril(a_g, -1).T
        return a.alpha * (s @ b_g if side == "L" else b_g @ s) + a.beta * c_g, fixed
    if a.routine in ("geadd", "tradd", "tran"):  # rounded as pdgeadd rounds: beta * c + alpha * a
        op = a_g.T if a.routine == "tran" or a.trans[-1] != "N" else a_g
        if a.routine == "tradd":
            fixed = ~(np.triu(ones) if a.trans[0] == "U" else np.tril(ones))
        return np.where(fixed, c_g, a.beta * c_g + a.alpha * op), fixed
    if a.routine in ("syrk", "syr2k"):
        uplo, trans = a.trans
        opa, opb = (a_g, b_g) if trans == "N" else (a_g.T, b_g.T)
        upd = opa @ opa.T if a.routine == "syrk" else opa @ opb.T + opb @ opa.T
        fixed = ~(np.triu(ones) if uplo == "U" else np.tril(ones))
        return np.where(fixed, c_g, a.alpha * upd + a.beta * c_g), fixed
    opa = a_g.T if ta != "N" else a_g
    opb = b_g.T if tb != "N" else b_g
    return a.alpha * opa @ opb + a.beta * c_g, fixed


if rank == 0:
    np.savez(Path(a.dir, "inputs.npz"), a=a_g, b=b_g, c=c_g)
    ref, fixed = reference()
    exact = a.routine in ("geadd", "tradd", "tran")
    np.savez(Path(a.dir, "ref.npz"), ref=ref, fixed=fixed, exact=np.array(exact))
world.Barrier()
in_call = a.setup == "in-call"
if rank == 0 and not a.start_at_step and a.hold_rank < 0 and not in_call:
    Path(a.dir, "started").write_text(str(time.time()))


def mark(phase: str) -> None:
    if rank == 0:
        with open(Path(a.dir, "marks"), "a") as f:
            f.write(f"{phase} {time.time()!r}\n")


def hold(where: str) -> None:
    if rank == a.hold_rank and a.hold_at == where:  # the others go on while this one is killed from outside
        Path(a.dir, "started").write_text(str(time.time()))
        time.sleep(60)


def at_stage(stage: str) -> None:
    if stage == "prepare":  # the call's collective prepare step (e.g. PDTRSM's inverse) is next
        hold("prepare")
    if stage == "setup":  # the call builds its failure detector (after saving its inputs)
        mark("setup")
        if in_call:
            hold("setup")


def on_step(step: int) -> None:
    if rank == 0 and step == 0 and a.start_at_step:
        Path(a.dir, "started").write_text(str(time.time()))
    mark("step")
    if a.step_pause:
        time.sleep(a.step_pause)


def protect(store: Path) -> ProtectedOperands:
    """The routine's operands protected once, before the call (``--mode protect``)."""
    kw = {"store": store, "timeout": a.timeout}
    if a.routine in ("trmm", "trsm"):
        fn = protect_pdtrmm if a.routine == "trmm" else protect_pdtrsm
        return fn(*a.trans, n, n, A, 0, 0, B, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "symm":
        return protect_pdsymm(*a.trans[:2], n, n, A, 0, 0, B, 0, 0, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "syrk":
        return protect_pdsyrk(*a.trans, n, n, A, 0, 0, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "syr2k":
        return protect_pdsyr2k(*a.trans, n, n, A, 0, 0, B, 0, 0, C, 0, 0, **kw)  # type: ignore[arg-type]
    return protect_operands(ta, tb, n, n, n, A, 0, 0, B, 0, 0, C, 0, 0, **kw)  # type: ignore[arg-type]


def leave(limit: float = 60.0) -> None:
    """Exit without ``MPI_Finalize`` (it may wait for the dead: open-mpi/ompi#11404) once every other rank has
    ended its call too (written ``<dir>/end.<rank>``) or is gone (its pid no longer exists), at most
    ``limit`` seconds, driving MPI's progress meanwhile.

    A survivor that leaves is a failure to MPI: if all the others left at once, one still finishing the
    call's last agreement would be left without a peer holding its outcome (a trial of issue 33 ended with 4
    survivors returning and the fifth naming them all dead). Real applications go on computing after a call;
    this keeps the trial's survivors alive as long as that.
    """
    Path(a.dir, f"end.{rank}").write_text("")
    others = [r for r in range(world.Get_size()) if r != rank]
    deadline = time.monotonic() + limit

    def over(r: int) -> bool:
        if Path(a.dir, f"end.{r}").exists():
            return True
        try:
            os.kill(int(Path(a.dir, f"pid.{r}").read_text()), 0)
        except (ProcessLookupError, ValueError, FileNotFoundError):
            return True
        return False

    while time.monotonic() < deadline and not all(over(r) for r in others):
        try:
            world.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)  # progress: a peer's agreement may still need this rank
        except MPI.Exception:
            pass
        time.sleep(0.01)
    exit_without_finalize()


def multiply(B: DistributedMatrix, C: DistributedMatrix, **kw: object) -> ResilientResult:
    """The routine's call on A, ``B`` and ``C`` (the output is B for TRMM and TRSM, else C)."""
    if a.routine == "trmm":
        return resilient_pdtrmm(*a.trans, n, n, a.alpha, A, 0, 0, B, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "symm":
        return resilient_pdsymm(*a.trans[:2], n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "trsm":
        return resilient_pdtrsm(*a.trans, n, n, a.alpha, A, 0, 0, B, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "geadd":
        return resilient_pdgeadd(a.trans[-1], n, n, a.alpha, A, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "tradd":
        return resilient_pdtradd(*a.trans[:2], n, n, a.alpha, A, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "tran":
        return resilient_pdtran(n, n, a.alpha, A, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "syrk":
        return resilient_pdsyrk(*a.trans, n, n, a.alpha, A, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]
    if a.routine == "syr2k":
        return resilient_pdsyr2k(*a.trans, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]
    return resilient_pdgemm(ta, tb, n, n, n, a.alpha, A, 0, 0, B, 0, 0, a.beta, C, 0, 0, **kw)  # type: ignore[arg-type]


_call_state.fault_hook = at_stage
try:
    if not in_call:
        mark("setup")
        hold("setup")
        detector_for(grid, a.timeout)
    mark("protect")
    where = store
    if a.mode == "protect":
        where = protect(store)  # type: ignore[assignment]
    hold("multiply")
    for _ in range(a.calls_before):  # error-free, on copies of the output: the kept inputs to rewrite
        multiply(B.copy() if a.routine in ("trmm", "trsm") else B, C.copy(), store=where, timeout=a.timeout,
                 width=nb)
    if in_call:
        if rank == 0 and not a.start_at_step and a.hold_rank < 0:
            Path(a.dir, "started").write_text(str(time.time()))
        mark("call")
    res = multiply(B, C, store=where, timeout=a.timeout, width=nb, on_step=on_step)
    mark("returned")
except Fenced:
    print(f"FENCED rank={rank}", flush=True)
    leave()
except ProcessFailure as exc:
    why = str(exc).replace("\n", " ")  # for diagnosis; the driver parses failed_ranks only
    print(f"PROCESSFAILURE rank={rank} failed_ranks={sorted(exc.failed_ranks)} why={why}", flush=True)
    leave()
# No MPI after the call: a kill that lands after it returned must not make the check itself hang. Each rank
# writes its piece of the result (global rows, columns, values); the driver assembles and checks them.
np.savez(Path(a.dir, f"out.{rank}.tmp.npz"), rows=res.C.global_rows(), cols=res.C.global_cols(),
         c=res.C.local, failed=np.array(res.failed_ranks, dtype=np.int64))  # fmt: skip
os.replace(Path(a.dir, f"out.{rank}.tmp.npz"), Path(a.dir, f"out.{rank}.npz"))
print(f"DONE rank={rank} failed={list(res.failed_ranks)} verified={res.tiles_verified}", flush=True)
leave()
