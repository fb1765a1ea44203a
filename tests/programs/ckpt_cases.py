"""Checkpoint hardening cases (issue 13), one per mode; every rank prints ``R<rank> <outcome>`` lines.

args      bad levels and ids are refused with ftkit errors naming what is allowed; a good checkpoint follows.
txn       checkpoint 1 at L4; rank 0 fills meta_dir's disk; checkpoint 2 at L4 fails in its manifest commit;
          the disk is freed; checkpoint 3 at L1 commits. Prints the manifest's checkpoint ids.
hold      checkpoint 1 at L1, write the file <--release>.holding (rank 0's pid), wait (bounded) until the file
          --release exists, exit.
encode-kill
          checkpoint 1 at L1, then checkpoint 2 at L3 during which world rank --victim is SIGKILLed as it
          enters the L3 encoding (an application rank inline, or a head with ``head = 1``); survivors print
          the exception type of the checkpoint (inline) or of ``wait()`` (background).
l4-fail   checkpoint 1 at L4 through a background flush into a glbl_dir too small for it; prints the outcome.
recover   recover and print ``recovered id=<id> data=ok|BAD`` (checkpoint id i holds value(rank, i - 1)).
fuzz-write
          checkpoint 1 at L4 (through L1 and a flush), checkpoint 2 at L2; wait; exit without finalize.
recover-cases DIR...
          in each directory in turn: start a checkpointer on its ftkit.ini, recover, print
          ``case=<dir name> recovered id=<id> data=ok|BAD`` or ``case=<dir name> error <Type>: ...``,
          finalize.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ftkit
from ftkit.checkpoint.levels import encoded as l3
from ftkit.failure import exit_without_finalize
from ftkit.inject import kill_self

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["args", "txn", "hold", "encode-kill", "l4-fail", "recover", "fuzz-write",
                               "recover-cases"])
p.add_argument("cases", nargs="*", help="recover-cases: directories, each with its ftkit.ini")
p.add_argument("--config", default="ftkit.ini")
p.add_argument("--n", type=int, default=20000)
p.add_argument("--release", default="")
p.add_argument("--victim", type=int, default=-1)
a = p.parse_args()


def value(rank: int, i: int, n: int) -> np.ndarray:
    return rank * 1000.0 + i * 7.0 + np.arange(n) * 0.5


if a.mode == "encode-kill":
    real_encode = l3.encode_group

    def encode_then_die(*args, **kwargs):  # type: ignore[no-untyped-def]
        if MPI.COMM_WORLD.Get_rank() == a.victim:
            kill_self()
        return real_encode(*args, **kwargs)

    l3.encode_group = encode_then_die  # this process dies as it enters the L3 encoding

if a.mode == "recover-cases":
    for case in a.cases:
        os.chdir(case)
        name = os.path.basename(case)
        t0 = time.monotonic()
        try:
            ckpt = ftkit.Checkpointer("ftkit.ini", MPI.COMM_WORLD)
            data = np.full(a.n, -1.0)
            ckpt.protect("data", data)
            info = ckpt.recover()
            ok = np.array_equal(data, value(ckpt.comm.Get_rank(), info.checkpoint_id - 1, a.n))
            result = f"recovered id={info.checkpoint_id} data={'ok' if ok else 'BAD'}"
        except ftkit.FtkitError as exc:
            result = f"error {type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a non-ftkit error is what the fuzzer looks for
            result = f"error RAW {type(exc).__module__}.{type(exc).__name__}: {exc}"
        else:
            ckpt.finalize()
        took = time.monotonic() - t0
        print(f"R{MPI.COMM_WORLD.Get_rank()} case={name} {result} ({took:.1f} s)", flush=True)
        MPI.COMM_WORLD.Barrier()
    sys.exit(0)

try:
    ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
except ftkit.FtkitError as exc:
    print(f"R{MPI.COMM_WORLD.Get_rank()} start {type(exc).__name__}: {exc}", flush=True)
    sys.exit(0)
rank = ckpt.comm.Get_rank()
data = np.full(a.n, -1.0)
ckpt.protect("data", data)


def out(text: str) -> None:
    print(f"R{rank} {text}", flush=True)


def attempt(what: str, fn) -> str:  # type: ignore[no-untyped-def]
    try:
        fn()
        return "ok"
    except ftkit.FtkitError as exc:
        out(f"{what} {type(exc).__name__}: {exc}")
        return type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - a non-ftkit error is what the tests look for
        out(f"{what} RAW {type(exc).__module__}.{type(exc).__name__}: {exc}")
        return "RAW"


if a.mode == "args":
    data[:] = value(rank, 0, a.n)
    for bad in (1.9, "2", True, 0, 5, None):
        out(f"level {bad!r} -> {attempt(f'level {bad!r}', lambda bad=bad: ckpt.checkpoint(bad))}")
    for bad in (10**30, -1, 0, 2.0):
        out(f"id {bad!r} -> {attempt(f'id {bad!r}', lambda bad=bad: ckpt.checkpoint(1, id=bad))}")
    out(f"good -> {attempt('good', lambda: ckpt.checkpoint(1))}")
    out("status " + json.dumps([list(c[:2]) for c in ckpt.status().checkpoints]))
    ckpt.finalize()

elif a.mode == "txn":
    meta = Path(ckpt.config.meta_dir)
    data[:] = value(rank, 0, a.n)
    out(f"ckpt1 {ckpt.checkpoint(4)}")
    if rank == 0:
        fd = os.open(meta / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # ENOSPC: the disk is full
        finally:
            os.close(fd)
    data[:] = value(rank, 1, a.n)
    out(f"ckpt2 {attempt('ckpt2', lambda: ckpt.checkpoint(4))}")
    if rank == 0:
        (meta / "filler").unlink()
    data[:] = value(rank, 2, a.n)
    out(f"ckpt3 {attempt('ckpt3', lambda: ckpt.checkpoint(1))}")
    out("memory " + json.dumps(sorted(e.id for e in ckpt._session.store.manifest.checkpoints)))
    sys.exit(0)  # no finalize: the next run recovers

elif a.mode == "hold":
    data[:] = value(rank, 0, a.n)
    ckpt.checkpoint(1)
    if rank == 0:  # renamed: whole when it appears (the test reads the pid at once)
        Path(a.release + ".holding.tmp").write_text(str(os.getpid()))
        os.replace(a.release + ".holding.tmp", a.release + ".holding")
    out("HOLDING")
    deadline = time.monotonic() + 200
    while not os.path.exists(a.release) and time.monotonic() < deadline:
        time.sleep(0.05)
    ckpt.comm.Barrier()
    out("RELEASED")
    sys.exit(0)  # no finalize: the checkpoint stays for the next run

elif a.mode == "encode-kill":
    data[:] = value(rank, 0, a.n)
    ckpt.checkpoint(1)
    data[:] = value(rank, 1, a.n)
    got = attempt("ckpt2", lambda: ckpt.checkpoint(3))
    if got == "ok":
        got = attempt("ckpt2-wait", ckpt.wait)
    out(f"outcome {got}")
    exit_without_finalize(None, 0)

elif a.mode == "l4-fail":
    data[:] = value(rank, 0, a.n)
    got = attempt("ckpt1", lambda: ckpt.checkpoint(4))
    if got == "ok":
        got = attempt("ckpt1-wait", ckpt.wait)
    out(f"outcome {got}")
    out("levels " + json.dumps([list(c[2]) for c in ckpt.status().checkpoints]))
    sys.exit(0)

elif a.mode == "recover":
    try:
        info = ckpt.recover()
    except ftkit.FtkitError as exc:
        out(f"recover {type(exc).__name__}: {exc}")
        sys.exit(0)
    ok = np.array_equal(data, value(rank, info.checkpoint_id - 1, a.n))
    out(f"recovered id={info.checkpoint_id} data={'ok' if ok else 'BAD'}")
    ckpt.finalize()

elif a.mode == "fuzz-write":
    data[:] = value(rank, 0, a.n)
    ckpt.checkpoint(4)
    ckpt.wait()
    data[:] = value(rank, 1, a.n)
    ckpt.checkpoint(2)
    ckpt.wait()
    out("WRITTEN")
    sys.exit(0)
