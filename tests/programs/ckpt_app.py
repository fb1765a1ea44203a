"""Checkpoint test program: takes a series of checkpoints of known data, or recovers and reports what it got.

write mode:   --levels 4,1    checkpoint i (0-based) at level levels[i], with data value(rank, i), step = i;
              --kill-rank R --kill-stage STAGE --kill-index I: SIGKILL rank R at STAGE of checkpoint I
              (--kill-how raise: rank R raises ProcessFailure there instead, as if only it saw a failure).
recover mode: prints one line per rank: "R<rank> recovered id=.. level=.. source=.. step=.. data=ok|BAD" or
              "R<rank> error <Type>: <message> | restarted=.. untouched=.. again=<Type> ckpt=<Type>".
"""
import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

import ftkit
from ftkit.failure import exit_without_finalize
from ftkit.inject import kill_self


def value(rank: int, i: int, n: int) -> np.ndarray:
    return rank * 1000.0 + i * 7.0 + np.arange(n) * 0.5


p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--mode", choices=["write", "recover"], required=True)
p.add_argument("--levels", default="1")
p.add_argument("--n", type=int, default=5000)
p.add_argument("--kill-rank", type=int, default=-1)
p.add_argument("--kill-stage", default="")
p.add_argument("--kill-index", type=int, default=-1)
p.add_argument("--kill-how", choices=["kill", "raise"], default="kill",
               help="raise: rank R only sees a process failure at STAGE (a ProcessFailure); the others go on")
p.add_argument("--finalize", action="store_true")
p.add_argument("--pause", type=float, default=0.0,
               help="write mode: seconds between checkpoints (the application computing)")
p.add_argument("--wait-after", action="store_true",
               help="write mode: ckpt.wait() after each checkpoint (where the removal of pruned ones ends)")
p.add_argument("--then-levels", default="",
               help="recover mode: then checkpoint at these levels (data as write mode's, from the recovered "
                    "step + 1 on) and print 'R<rank> wrote id=..' for each")
p.add_argument("--register", default="",
               help="MODULE:NAME: register the level record NAME of tests/programs/MODULE.py first")
a = p.parse_args()

if a.register:
    import importlib

    from ftkit.storage.levels import register_level

    module, name = a.register.split(":")
    register_level(getattr(importlib.import_module(module), name))
ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
rank = ckpt.comm.rank
data = np.full(a.n, -1.0)
step = np.full(1, -1, dtype=np.int64)
ckpt.protect("data", data)
ckpt.protect("step", step)

def leave(code: int) -> None:
    """End the write mode. After a rank of this job was killed, MPI_Finalize can wait forever for it
    (open-mpi/ompi#11404: the survivors of a run-lock test were seen still running after 3 minutes), so the
    survivors then leave without it, after agreeing to leave (one that exits early with an error code makes
    mpirun kill the others before they report)."""
    if a.kill_rank >= 0:
        exit_without_finalize(MPI.COMM_WORLD, code=code)
    sys.exit(code)


def fail_here() -> None:
    if a.kill_how == "raise":
        raise ftkit.ProcessFailure("injected: only this rank saw a peer fail here")
    kill_self()


if a.mode == "write":
    for i, lv in enumerate(int(x) for x in a.levels.split(",")):
        data[:] = value(rank, i, a.n)
        step[0] = i
        if i == a.kill_index and rank == a.kill_rank:
            stage = a.kill_stage
            ckpt._session.ctx.fault_hook = lambda s, stage=stage: (fail_here() if s == stage else None)
        try:
            cid = ckpt.checkpoint(lv)
        except ftkit.FtkitError as exc:
            print(f"R{rank} checkpoint error {type(exc).__name__}: {exc}", flush=True)
            leave(4)
        print(f"R{rank} wrote id={cid} level={lv}", flush=True)
        if a.wait_after:
            ckpt.wait()
        time.sleep(a.pause)
    if a.finalize:
        ckpt.finalize()
    leave(0)

before = data.copy()
try:
    info = ckpt.recover()
except ftkit.FtkitError as exc:
    untouched = bool(np.all(data == before)) and step[0] == -1
    try:
        ckpt.recover()
        again = "none"
    except ftkit.FtkitError as exc2:
        again = type(exc2).__name__
    try:
        ckpt.checkpoint(1)
        ck = "none"
    except ftkit.FtkitError as exc3:
        ck = type(exc3).__name__
    msg = str(exc).replace("\n", " ")
    print(f"R{rank} error {type(exc).__name__}: {msg} | restarted={ckpt.restarted} untouched={untouched} "
          f"again={again} ckpt={ck}", flush=True)
    sys.exit(0)
ok = bool(np.array_equal(data, value(rank, int(step[0]), a.n)))
print(f"R{rank} recovered id={info.checkpoint_id} level={info.level} source={info.source_level} "
      f"step={step[0]} "
      f"data={'ok' if ok else 'BAD'} skipped={len(info.skipped)} {' | '.join(info.skipped)}", flush=True)
for i, lv in enumerate((int(x) for x in a.then_levels.split(",") if x), start=int(step[0]) + 1):
    data[:] = value(rank, i, a.n)
    step[0] = i
    print(f"R{rank} wrote id={ckpt.checkpoint(lv)} level={lv}", flush=True)
if a.finalize:
    ckpt.finalize()
