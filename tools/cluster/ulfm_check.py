"""Under an MPI without working ULFM, every rank must get ULFMUnavailable from require_ulfm (and no hang).

Prints one line per rank: ``ULFM-UNAVAILABLE <rank> <message>`` (expected here) or ``ULFM-AVAILABLE <rank>``;
exits 0 only if every rank was refused with a message that says why and how to enable ULFM.
"""

from __future__ import annotations

from mpi4py import MPI

from ftkit.errors import ULFMUnavailable
from ftkit.failure import require_ulfm

comm = MPI.COMM_WORLD
try:
    require_ulfm(comm, "online recovery")
    print(f"ULFM-AVAILABLE {comm.rank}", flush=True)
    ok = 0
except ULFMUnavailable as exc:
    print(f"ULFM-UNAVAILABLE {comm.rank} {exc}", flush=True)
    ok = int("online recovery needs ULFM" in str(exc) and "To enable it" in str(exc))
raise SystemExit(0 if comm.allreduce(ok, op=MPI.MIN) else 1)
