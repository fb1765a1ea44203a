"""Regression program: the object reductions of ``AppComm`` (lowercase ``allreduce``, ``reduce``, ``scan``,
``exscan``) give mpi4py's results in rank order, and a rank waiting in ``allreduce`` raises once another rank
revokes the communicator. mpi4py's own reductions run on a hidden duplicate that the revoke does not reach:
rank 0 waited there forever (an online repair then waited for it in the shrink).

Each rank prints ``R<r> allreduce=.. reduce=.. scan=.. exscan=..`` (lists concatenated by ``MPI.SUM``:
the order shows), rank 0 ``allreduce raised <error class>`` (or ``allreduce returned``); every rank then
prints ``R<r> alive`` and leaves without MPI_Finalize.
"""
from mpi4py import MPI

from ftkit.checkpoint.online.appcomm import AppComm
from ftkit.failure import exit_without_finalize

app = AppComm.wrap(MPI.COMM_WORLD.Dup())
r = app.rank
mine = [r]
print(f"R{r} allreduce={app.allreduce(mine)} reduce={app.reduce(mine, root=1)} scan={app.scan(mine)} "
      f"exscan={app.exscan(mine)} max={app.allreduce(r, op=MPI.MAX)}", flush=True)
if r == 0:
    try:
        app.allreduce(1.0, op=MPI.MAX)   # rank 1 revokes instead of taking part; rank 2 does not come
        print("allreduce returned", flush=True)
    except MPI.Exception as exc:
        print(f"allreduce raised {exc.Get_error_class()}", flush=True)
    for peer in (1, 2):
        MPI.COMM_WORLD.send("done", dest=peer)
else:
    if r == 1:
        app.Revoke()
    try:
        app.Barrier()  # returns in error once the revoke is seen
    except MPI.Exception:
        pass
    MPI.COMM_WORLD.recv(source=0)  # alive until rank 0 is out (its exit would end that wait)
print(f"R{r} alive", flush=True)
exit_without_finalize(None, 0)
