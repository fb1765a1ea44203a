"""Where a loop body takes its checkpoint (issue 30, J8), read from the loop's code, and what a fenced call
returns (J7): the same neutral value on every rank, which a convergence test ``err < tol`` does not pass."""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from ftkit.checkpoint import loop_shape
from ftkit.checkpoint.online import fence


class _Loop:
    """A stand-in for the steps() generator: remembers the loop site as ``loop()`` does."""

    site: loop_shape.LoopSite | None = None

    def steps(self, n: int):
        for i in range(n):
            self.site = loop_shape.here()
            yield i

    def snapshot(self) -> bool:
        return loop_shape.taken_at_top(self.site)


def test_top_of_the_body_is_before_any_work():
    ckpt, seen = _Loop(), []
    for _ in ckpt.steps(1):
        seen.append(ckpt.snapshot())                 # FTI's place
    for step in ckpt.steps(1):
        comm = ckpt.site                             # name bindings and tests do not count as work
        if step % 5 == 0 and comm is not None:
            seen.append(ckpt.snapshot())
    assert seen == [True, True]


def test_after_a_call_a_store_or_an_in_place_update_is_the_end():
    ckpt, seen, u = _Loop(), [], np.zeros(3)
    for _ in ckpt.steps(1):
        u += 1.0
        seen.append(ckpt.snapshot())
    for _ in ckpt.steps(1):
        u[0] = 2.0
        seen.append(ckpt.snapshot())
    for _ in ckpt.steps(1):
        np.negative(u, out=u)
        seen.append(ckpt.snapshot())
    assert seen == [False, False, False]


def test_a_checkpoint_not_called_from_the_loop_counts_as_the_end():
    ckpt = _Loop()

    def advance(gen) -> None:  # the generator is iterated from this frame, which is gone afterwards
        next(gen)

    gen = ckpt.steps(1)
    advance(gen)
    assert ckpt.site is not None and ckpt.snapshot() is False
    assert loop_shape.taken_at_top(None) is False
    gen.close()


def test_fenced_results_are_neutral_and_fail_a_convergence_test():
    comm = MPI.COMM_SELF
    err = fence.fenced_result(comm, "allreduce", (1e-9,), {"op": MPI.MAX})
    assert math.isnan(err) and not err < 1e-3
    assert fence.fenced_result(comm, "allreduce", (True,), {}) is False
    assert math.isnan(fence.fenced_result(comm, "allreduce", (0,), {}))
    assert fence.fenced_result(comm, "allgather", (0.5,), {})[0] != 0.5
    recv = np.zeros(2)
    fence.fenced_result(comm, "Allreduce", (np.ones(2), recv), {"op": MPI.MAX})
    assert np.isnan(recv).all()
    mine = np.ones(2)  # the root's own Bcast data is never touched
    fence.fenced_result(comm, "Bcast", (mine,), {"root": 0})
    assert (mine == 1).all()
