"""Regression program: a repair after a communicator creation that failed with a death completes.

Four processes make ``W`` (a duplicate of the world), then ``A`` and ``B`` from it (``B``'s context id above
``A``'s). Rank 3 SIGKILLs itself; the others' ``A.Dup()`` fails. Open MPI 5's context-id allocator then
keeps every later creation from a communicator with a higher id than ``A``'s waiting for good, so their
repair of ``B`` (its ``Shrink``) never returned. Each survivor prints ``R<r> dup raised`` and then ``R<r>
rebuilt dead=<dead ranks> size=<processes left>``.
"""
import os
import signal
import sys

from mpi4py import MPI

from ftkit.failure import exit_without_finalize
from ftkit.failure.replace import rebuild

timeout = float(sys.argv[1])
MPI.COMM_WORLD.Set_errhandler(MPI.ERRORS_RETURN)
W = MPI.COMM_WORLD.Dup()
A, B = W.Dup(), W.Dup()
for comm in (W, A, B):
    comm.Set_errhandler(MPI.ERRORS_RETURN)
r = W.Get_rank()
MPI.COMM_WORLD.Barrier()
if r == 3:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    A.Dup()  # fails once the death is known: the survivors agree on nothing
    print(f"R{r} dup returned", flush=True)
except MPI.Exception:
    print(f"R{r} dup raised", flush=True)
out = rebuild(B, r, 4, timeout)
print(f"R{r} rebuilt dead={list(out.dead)} size={out.world.Get_size()}", flush=True)
exit_without_finalize(None, 0)
