"""Regression program: a repair whose ``Shrink`` never completes ends its processes instead of hanging.

Ranks 0 and 1 call :func:`ftkit.failure.replace.rebuild` on a duplicate of the world with a 3 s timeout;
rank 2 stays alive without taking part (it waits for a message of rank 0 on ``COMM_WORLD``), so their
``Shrink`` cannot complete: each must print why and end itself at its deadline. Rank 2 then sees rank 0
gone, prints ``R2 saw rank 0 gone`` and leaves. A rank that returns from ``rebuild`` prints ``R<r>
returned`` (it must not).
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
    try:
        MPI.COMM_WORLD.recv(source=0)  # never sent: ends when rank 0 is gone
    except MPI.Exception:
        print("R2 saw rank 0 gone", flush=True)
exit_without_finalize(None, 0)
