"""ft_pdgemm API under mpirun: argument errors (same on every rank, no hang), ABFTPolicy periodic checking,
rounding alarms on structured data, beta/alpha corner cases. Prints ``OK <name>`` per check on rank 0."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ftkit.errors import ABFTError, PBLASArgumentError
from ftkit.inject import BitFlip, InjectionPlan
from ftkit.linalg import DistributedMatrix, ProcessGrid, pdgemm
from ftkit.linalg.abft import ABFTPolicy, ft_pdgemm

comm = MPI.COMM_WORLD
grid = ProcessGrid.square(comm)
rng = np.random.default_rng(3)
n = 24


def ok(name: str) -> None:
    comm.Barrier()
    if comm.rank == 0:
        print(f"OK {name}", flush=True)


def d(x: np.ndarray) -> DistributedMatrix:
    return DistributedMatrix.from_global(grid, x, mb=8, nb=8)


a, b, c0 = rng.standard_normal((n, n)), rng.standard_normal((n, n)), rng.standard_normal((n, n))
A, B = d(a), d(b)

# illegal arguments: every rank raises the same PBLASArgumentError with the position
for kwargs, pos in (
    ({"bs": 0}, 20),
    ({"tol": "loose"}, 21),
    ({"tol": -1.0}, 21),
    ({"mode": "fix"}, 22),
    ({"inject": "C"}, 23),
):
    try:
        ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, d(c0), 0, 0, **kwargs)
    except PBLASArgumentError as err:
        assert err.position == pos and err.routine == "FT_PDGEMM", (kwargs, err)
    else:
        raise AssertionError(f"{kwargs} accepted")
try:
    ft_pdgemm("X", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, d(c0), 0, 0)
except PBLASArgumentError as err:
    assert err.position == 1
ok("argument errors")

# ABFTPolicy: calls 10, 20, 30 are checked, the others are plain pdgemm; results identical either way
pol = ABFTPolicy(check_every=10)
Cref = d(c0)
pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.5, Cref, 0, 0)
for call in range(1, 31):
    C = d(c0)
    rep = pol.pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.5, C, 0, 0)
    assert (rep is not None) == (call % 10 == 0), call
    assert np.array_equal(C.local, Cref.local)
assert [c for c, _ in pol.reports] == [10, 20, 30] and pol.calls == 30
assert pol.last_report is not None and pol.last_report.blocks_checked == 9
# a flip on a checked call is corrected; a flip passed to an unchecked call is not even attempted
C = d(c0)
for _ in range(9):
    pol.pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.5, C, 0, 0)
C = d(c0)
rep = pol.pdgemm(
    "N",
    "N",
    n,
    n,
    n,
    1.0,
    A,
    0,
    0,
    B,
    0,
    0,
    0.5,
    C,
    0,
    0,
    inject=InjectionPlan([BitFlip("C", rank=0, step=-1, bit=55)], seed=1),
)
assert rep is not None and rep.detected == 1 and rep.corrected == 1, rep
assert np.allclose(C.local, Cref.local, rtol=1e-12, atol=1e-12)
ok("policy")

# detect-mode policy leaves C as computed
pold = ABFTPolicy(check_every=1, mode="detect")
C = d(c0)
rep = pold.pdgemm(
    "N",
    "N",
    n,
    n,
    n,
    1.0,
    A,
    0,
    0,
    B,
    0,
    0,
    0.5,
    C,
    0,
    0,
    inject=InjectionPlan([BitFlip("C", rank=0, step=-1, index=(1, 2), bit=60)], seed=1),
)
assert rep is not None and rep.detected == 1 and rep.corrected == 0 and rep.events[0].action == "detected"
diff = comm.allreduce(int(np.sum(C.local != Cref.local)), op=MPI.SUM)
assert diff == 1
ok("detect mode")

# rounding alarms: a statistical threshold that is too tight (as structured data, whose rounding errors do not
# cancel, can make it) flags correct blocks; they are recomputed and accepted under the rigorous bound
from ftkit.linalg import checksums  # noqa: E402

Cp = d(c0)
pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.5, Cp, 0, 0)
saved = checksums.STAT_LAMBDA
checksums.STAT_LAMBDA = 1e-4
try:
    C = d(c0)
    rep = ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.5, C, 0, 0, bs=8, tol="statistical")
finally:
    checksums.STAT_LAMBDA = saved
assert rep.detected == 0 and rep.uncorrected == 0, rep
assert rep.rounding_alarms == len(rep.events) == 9, rep
assert np.allclose(C.local, Cp.local, rtol=1e-13, atol=1e-13)
# the same tight threshold as a number is the user's explicit demand: nothing is waved through
C = d(c0)
try:
    ft_pdgemm("N", "N", n, n, n, 1.0, A, 0, 0, B, 0, 0, 0.5, C, 0, 0, bs=8, tol=1e-300)
except ABFTError as err:
    assert err.report.uncorrected == 9  # type: ignore[attr-defined]
else:
    raise AssertionError("tol=1e-300 accepted rounding residuals")
# constant matrices with the real statistical threshold: no error reported, whatever the alarms
k = 3000
CA, CB = d(np.full((n, k), 0.7)), d(np.full((k, n), 0.9))
Cp = DistributedMatrix.zeros(grid, n, n, mb=8, nb=8)
pdgemm("N", "N", n, n, k, 1.0, CA, 0, 0, CB, 0, 0, 0.0, Cp, 0, 0)
C = DistributedMatrix.zeros(grid, n, n, mb=8, nb=8)
rep = ft_pdgemm("N", "N", n, n, k, 1.0, CA, 0, 0, CB, 0, 0, 0.0, C, 0, 0, bs=8, tol="statistical")
assert rep.detected == 0 and rep.uncorrected == 0 and np.allclose(C.local, Cp.local, rtol=1e-12), rep
ok("structured data")

# alpha = 0 and k = 0: only beta * C is checked; m = 0: nothing to check
C = d(c0)
rep = ft_pdgemm("N", "N", n, n, n, 0.0, A, 0, 0, B, 0, 0, 2.0, C, 0, 0)
assert rep.detected == 0 and rep.blocks_checked == 9 and np.array_equal(C.local, 2.0 * d(c0).local)
rep = ft_pdgemm("N", "N", n, n, 0, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0)
assert rep.detected == 0 and not np.any(C.local)
rep = ft_pdgemm("N", "N", 0, n, n, 1.0, A, 0, 0, B, 0, 0, 0.0, C, 0, 0)
assert rep.blocks_checked == 0
ok("corner cases")
sys.exit(0)
