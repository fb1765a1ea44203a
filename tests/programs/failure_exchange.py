"""Exchange rounds under the failure detector, with a kill or a stall; then agree, repair, record the table.

Every step each rank exchanges a small array with every live peer and checks what it got. Options inject a
SIGKILL from inside (``--kill-rank/--kill-step``), a wait for a kill from outside
(``--wait-rank/--wait-step``:
the rank writes ``<dir>/ready`` and sleeps; the test driver kills it by the pid in ``<dir>/pid.<rank>``), or a
stall longer than the timeout (``--slow-rank/--slow-step/--sleep``). At the end survivors agree on the
dead set,
repair the communicator, check it with an allreduce and print ``RESULT rank=.. dead=.. table=.. sum=..``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit import inject
from ftkit.errors import ProcessFailure
from ftkit.failure import (
    FailureDetector,
    Fenced,
    agree_on_dead,
    exit_without_finalize,
    get_state_table,
    record_failures,
    repair,
)

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--timeout", type=float, default=None)
p.add_argument("--kill-rank", type=int, action="append", default=[])
p.add_argument("--kill-step", type=int, action="append", default=[])
p.add_argument("--wait-rank", type=int, default=-1)
p.add_argument("--wait-step", type=int, default=-1)
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-step", type=int, default=-1)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--strict", action="store_true", help="use exchange_or_raise and report what it raises")
p.add_argument("--dir", default=".")
p.add_argument("--grid", default=None, help="PxQ shape of the state table (default 1xN)")
a = p.parse_args()

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
Path(a.dir, f"pid.{rank}").write_text(str(os.getpid()))
print(f"PID rank={rank} pid={os.getpid()}", flush=True)
det = FailureDetector(world, timeout=a.timeout)
if rank == 0:
    print(f"TIMEOUT {det.timeout:.3f} RTT {det.rtt:.6f}", flush=True)

fenced_error = None
t_start = time.monotonic()
try:
    for step in range(a.steps):
        for r, s in zip(a.kill_rank, a.kill_step, strict=False):
            if rank == r and step == s:
                inject.kill_self()
        if rank == a.wait_rank and step == a.wait_step:
            Path(a.dir, "ready").write_text(str(rank))
            time.sleep(60)  # the driver kills us long before this ends
        if rank == a.slow_rank and step == a.slow_step:
            time.sleep(a.sleep)
        peers = [q for q in range(size) if q != rank]
        sends = {q: np.full(3, 100.0 * step + rank) for q in peers}
        recvs = {q: np.full(3, -1.0) for q in peers}
        if a.strict:
            t_wait = time.monotonic()
            try:
                det.exchange_or_raise(sends, recvs, tag=step)
            except Fenced:
                raise
            except ProcessFailure as exc:
                print(
                    f"RAISED rank={rank} {type(exc).__name__} failed_ranks={list(exc.failed_ranks)} "
                    f"after={time.monotonic() - t_wait:.2f}s",
                    flush=True,
                )
                break
            continue
        missing = det.exchange(sends, recvs, tag=step)
        for q in peers:
            if q not in missing:
                assert (recvs[q] == 100.0 * step + q).all(), (rank, q, step, recvs[q])
except Fenced as exc:
    fenced_error = exc
    print(f"FENCED rank={rank} failed_ranks={list(exc.failed_ranks)}", flush=True)

dead = agree_on_dead(det.comm, det.dead, abstain=det.fenced)
elapsed = time.monotonic() - t_start
new = repair(det.comm, dead)
if new is None:
    print(f"OUT rank={rank} dead={sorted(dead)}", flush=True)
    exit_without_finalize()
shape = tuple(int(x) for x in a.grid.split("x")) if a.grid else (1, size)
record_failures(shape, {divmod(d, shape[1]) for d in dead}, writer=new.Get_rank() == 0)
try:
    total = new.allreduce(rank)
except MPI.Exception as exc:  # pragma: no cover - shown in the output on failure
    raise ProcessFailure(f"repaired communicator unusable: {exc}") from exc
table = get_state_table()
print(
    f"RESULT rank={rank} dead={sorted(dead)} table={table.ravel().tolist()} sum={total} "
    f"newsize={new.Get_size()} elapsed={elapsed:.2f}",
    flush=True,
)
if dead:
    exit_without_finalize(new)  # MPI_Finalize may wait for the dead (open-mpi/ompi#11404)
