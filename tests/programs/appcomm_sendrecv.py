"""Regression program: ``AppComm.Sendrecv`` from a rank to a peer with ``source = PROC_NULL`` (the edge of a
halo exchange) on a communicator another rank has revoked must raise, not kill the process. Open MPI 5.0's
MPI_Sendrecv segfaults there once the send fails (a rendezvous-size message).

Rank 0 prints ``sendrecv raised <error class>`` (or ``sendrecv returned``); every rank then prints ``R<r>
alive`` and leaves without MPI_Finalize.
"""
import numpy as np
from mpi4py import MPI

from ftkit.checkpoint.online.appcomm import AppComm
from ftkit.failure import exit_without_finalize

app = AppComm.wrap(MPI.COMM_WORLD.Dup())
app.Barrier()
if app.rank == 1:
    app.Revoke()
try:
    app.Barrier()  # returns in error on both once the revoke is seen
except MPI.Exception:
    pass
if app.rank == 0:
    big = np.zeros(1 << 17)  # 1 MiB: sent by rendezvous, so the send itself fails on the revoked comm
    status = MPI.Status()
    try:
        app.Sendrecv(big, dest=1, sendtag=1, recvbuf=np.zeros(1), source=MPI.PROC_NULL, recvtag=1,
                     status=status)
        print(f"sendrecv returned source={status.source}", flush=True)
    except MPI.Exception as exc:
        print(f"sendrecv raised {exc.Get_error_class()}", flush=True)
print(f"R{app.rank} alive", flush=True)
exit_without_finalize(None, 0)
