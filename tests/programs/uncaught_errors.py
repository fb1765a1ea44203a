"""Uncaught ftkit errors, for the one-message-per-error tests (run under MPI, after a Checkpointer is made).

``--mode same``: every rank raises the same CheckpointError. ``--mode differ``: even and odd ranks raise
two different errors. ``--mode one``: only rank 1 raises; the others wait in a barrier on ``ckpt.comm``,
print ``R<rank> saw the failure`` when rank 1's process ends, and exit (status 0). ``--mode app``: every
rank raises a ValueError (not an ftkit error: printed as Python prints it). Each rank prints
``R<rank> raising`` before it raises. Except in ``--mode one``, no rank raises before every rank has
left ``Checkpointer()`` (a rendezvous through files beside the config, outside MPI): a rank that raised ends
through ftkit's exit hook, which revokes ``ckpt``'s communicators, and a slower rank still completing the
constructor's last collective would end by that revocation (``ProcessFailure``), not by its own error.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mpi4py import MPI

import ftkit
from ftkit import uncaught
from ftkit.errors import CheckpointError
from ftkit.failure import exit_without_finalize

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--mode", choices=("same", "differ", "one", "app"), required=True)
a = p.parse_args()

ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)
rank = ckpt.comm.Get_rank()
if a.mode == "one" and rank != 1:
    try:
        ckpt.comm.Barrier()  # waits for rank 1, which never comes: ends in error when its process ends
    except MPI.Exception:
        print(f"R{rank} saw the failure", flush=True)
    exit_without_finalize()  # MPI_Finalize after a failure may wait for the dead rank (open-mpi/ompi#11404)
if a.mode != "one":
    here = Path(a.config).resolve().parent
    (here / f"past-checkpointer.{rank}").touch()
    deadline = time.monotonic() + 120
    while len(list(here.glob("past-checkpointer.*"))) < ckpt.comm.Get_size() and time.monotonic() < deadline:
        time.sleep(0.02)
    # Every rank raises here: the exchange ends once all are heard, so an ample window costs nothing, and on a
    # loaded machine a rank can reach its hook more than the default 2 s after another (seen in CI).
    uncaught.install(ckpt.comm, wait=60)
print(f"R{rank} raising", flush=True)
if a.mode == "app":
    raise ValueError("an application error")
if a.mode == "differ":
    raise CheckpointError(f"the {'even' if rank % 2 == 0 else 'odd'} ranks' error")
raise CheckpointError("the same error on every rank that raises it")
