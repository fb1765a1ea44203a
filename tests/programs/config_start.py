"""Start a Checkpointer on ``--config`` the way a user would; print ``R<rank> started`` or
``R<rank> error <Type>: <message>``, then finalize. The ``Checkpointer(...)`` call is on the line marked
``USER CALL``: a ConfigWarning must point there, not at ftkit's source."""
import argparse

from mpi4py import MPI

import ftkit

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
a = p.parse_args()
rank = MPI.COMM_WORLD.Get_rank()
try:
    ckpt = ftkit.Checkpointer(a.config, MPI.COMM_WORLD)  # USER CALL
except Exception as exc:  # noqa: BLE001 - the test names any outcome, ftkit's or not
    print(f"R{rank} error {type(exc).__name__}: {exc}", flush=True)
else:
    print(f"R{rank} started", flush=True)
    ckpt.finalize()
