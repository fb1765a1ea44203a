"""Ranks that leave the moment a resilient_ call returns: nobody still inside the call may take them for dead.

Every rank runs ``--calls`` calls of ``resilient_pdgemm`` (operands protected once, which also sets the
failure detector up), prints ``DONE rank=.. call=..`` after each, and right after the last one leaves at once
without ``MPI_Finalize`` (``os._exit``: to MPI a peer that left looks exactly like one that died). A rank
still finishing the call's last agreement when its peers leave must return the product all the same: it
prints ``PROCESSFAILURE rank=..`` instead if it raised. Every rank checks its piece of the last
call's product against numpy (``WRONG`` if it differs). ``--kill-rank R``: rank ``R`` SIGKILLs itself at the
first step of the last call, so that the survivors end it through the settle phase and its final agreement.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

from ftkit.errors import ProcessFailure
from ftkit.linalg import DistributedMatrix, ProcessGrid
from ftkit.linalg.resilient import protect_operands, resilient_pdgemm

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=48)
p.add_argument("--calls", type=int, default=3)
p.add_argument("--kill-rank", type=int, default=-1,
               help="this rank SIGKILLs itself at the first step of the last call (survivors settle up)")
p.add_argument("--dir", required=True, help="the input store's directory")
a = p.parse_args()
world = MPI.COMM_WORLD
rank = world.Get_rank()
grid = ProcessGrid(world, 2, world.Get_size() // 2)
n, nb = a.n, 8
rng = np.random.default_rng(3)
ga, gb = rng.standard_normal((n, n)), rng.standard_normal((n, n))
A = DistributedMatrix.from_global(grid, ga, mb=nb, nb=nb)
B = DistributedMatrix.from_global(grid, gb, mb=nb, nb=nb)
store = a.dir
C0 = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
ops = protect_operands("N", "N", n, n, n, A, 0, 0, B, 0, 0, C0, 0, 0, store=store)
for call in range(a.calls):
    C = DistributedMatrix.zeros(grid, n, n, mb=nb, nb=nb)
    try:
        die = call == a.calls - 1 and rank == a.kill_rank
        res = resilient_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0, store=ops,
                               on_step=(lambda s: os.kill(os.getpid(), signal.SIGKILL)) if die else None)
    except ProcessFailure as exc:
        print(f"PROCESSFAILURE rank={rank} call={call} failed_ranks={exc.failed_ranks}", flush=True)
        os._exit(3)
    if call == a.calls - 1:
        want = (ga @ gb)[np.ix_(res.C.global_rows(), res.C.global_cols())]
        if not np.allclose(res.C.local, want, rtol=1e-12, atol=1e-12 * n):
            print(f"WRONG rank={rank}", flush=True)
    print(f"DONE rank={rank} call={call}", flush=True)
sys.stdout.flush()
os._exit(0)
