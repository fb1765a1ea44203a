"""Checkpoint at L1 (``ckpt``), or restart (``recover``) with rank 1's file changed between its verification
and its read: every rank must raise the same RecoveryError naming rank 1 (``READ`` lines)."""

import sys

import numpy as np
from mpi4py import MPI

import ftkit
from ftkit.errors import RecoveryError


class Stop(Exception):
    """Leave the Checkpointer without finalize: its checkpoints stay for the next run."""


rank = MPI.COMM_WORLD.Get_rank()
a = np.arange(1 << 16, dtype=np.float64) + rank
try:
    with ftkit.Checkpointer(sys.argv[1]) as ck:
        ck.protect("a", a)
        if sys.argv[2] == "ckpt":
            ck.checkpoint(1)
            raise Stop
        step = ck.recovery_steps[0]   # L1: the rank's own file
        locate = step.locate

        def changed_after_locate(ctx, entry, need):  # type: ignore[no-untyped-def]
            found = locate(ctx, entry, need)
            if ctx.rank == 1 and found.ok:
                with open(found.storage.path(entry.id, ctx.rank), "r+b") as f:
                    f.truncate(4096)   # verified a moment ago, now cut short (another process wrote it)
            return found

        step.locate = changed_after_locate  # type: ignore[method-assign]
        a[:] = -1.0
        try:
            ck.recover()
            print("READ", rank, "recovered", flush=True)
        except RecoveryError as exc:
            print("READ", rank, "refused:", exc, flush=True)
        raise Stop
except Stop:
    pass
