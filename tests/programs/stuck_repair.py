"""Regression program: a repair whose ``Shrink`` never completes ends its processes instead of hanging.

Ranks 0 and 1 call :func:`ftkit.failure.replace.rebuild` on a duplicate of the world with a 3 s timeout;
rank 2 stays alive without taking part (it waits for a message of rank 0 on ``COMM_WORLD``), so their
``Shrink`` cannot complete: each must print why and end itself at its deadline. Rank 2 then sees rank 0
gone, prints ``R2 saw rank 0 gone``, and leaves once rank 1 is gone too: leaving earlier would let the
``Shrink`` of a rank whose deadline had not yet come complete among the processes then alive (seen in CI:
``R1 returned``), which is right for ``rebuild`` but not the case this program makes. A rank that returns
from ``rebuild`` prints ``R<r> returned`` (it must not).
"""
from mpi4py import MPI

from ftkit.failure import exit_without_finalize
from ftkit.failure.replace import rebuild

world = MPI.COMM_WORLD.Dup()
world.Set_errhandler(MPI.ERRORS_RETURN)
MPI.COMM_WORLD.Set_errhandler(MPI.ERRORS_RETURN)
r = world.Get_rank()
MPI.COMM_WORLD.Barrier()  # every Dup complete before the revoke (Open MPI crashes a rank still in it)
print(f"R{r} up", flush=True)
if r < 2:
    rebuild(world, r, 2, 3.0)
    print(f"R{r} returned", flush=True)
else:
    for peer in (0, 1):
        try:
            MPI.COMM_WORLD.recv(source=peer)  # never sent: ends when that rank is gone
        except MPI.Exception:
            if peer == 0:
                print("R2 saw rank 0 gone", flush=True)
exit_without_finalize(None, 0)
