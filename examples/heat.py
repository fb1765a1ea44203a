"""2-D heat diffusion (Jacobi iteration) by rows over MPI ranks, protected with ftkit: FTI's flagship example.

The global ``size`` x ``size`` plate has its top edge held at 1.0 and the other edges at 0.0. Each rank owns a
band of rows plus one halo row above and below; every step exchanges halos with the neighbours and replaces
each interior point by the mean of its four neighbours. The local band and the step counter are protected; the
config's intervals (``ckpt_l1..ckpt_l4``) decide when ``snapshot()`` checkpoints. The band is protected
with its place in the global plate, so a restart may use any number of ranks (``-n`` differs from the run
that checkpointed): the continued run ends bit-identical.

At the end rank 0 gathers the field and prints ``digest <xxh3-64 hex>`` of its bytes, so runs can be compared
bit for bit (``--save`` also writes it as ``.npy``). ``--kill-at STEP --kill-rank R`` SIGKILLs rank R when the
run reaches STEP (fresh runs only), to test recovery; ``--kill STEP:R,R`` (repeatable) plans several kills.

With ``spare_ranks`` in the config (or ``ftkit launch --spares S``), a killed rank is replaced online by a
spare and the run goes on without a relaunch; the final digest is the same. With ``--shrink``, when no spare
is left (or there are none) the survivors go on with fewer ranks: the plate is cut into bands for them and
refilled from the checkpoint (``ckpt.steps(n, on_shrink=...)``); the final digest is still the same.

With ``--fti-loop`` the loop is FTI's own (``while step < steps: ...; snapshot()``, no ``ckpt.steps()``):
a killed rank then ends the job, every rank within ``failure_timeout``, with no error handling here (ftkit's
exit hook does it, and ``ftkit launch`` exits non-zero naming the dead ranks and the checkpoint a relaunch
recovers); the relaunch goes on from that checkpoint.

Run: ``ftkit launch -n 4 --node-size 2 -- python examples/heat.py --steps 40 --size 64 --config ftkit.ini``
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import xxhash
from mpi4py import MPI

import ftkit
from ftkit.failure import exit_without_finalize
from ftkit.inject import delete_node_dir, kill_self


def row_band(n: int, nranks: int, rank: int) -> tuple[int, int]:
    """First and one-past-last global row owned by ``rank`` (balanced bands)."""
    base, extra = divmod(n, nranks)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def initial_band(n: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start..stop-1`` of the initial field, with one halo row on each side."""
    u = np.zeros((stop - start + 2, n), dtype=np.float64)
    if start == 0:
        u[1, :] = 1.0  # the hot top edge
    return u


def jacobi_rows(u: np.ndarray, first_global: int, n: int) -> None:
    """One Jacobi step on the band ``u`` (halos filled), in place; global edge rows and columns stay fixed."""
    rows = u.shape[0] - 2
    new = 0.25 * (u[0:rows, 1:-1] + u[2:rows + 2, 1:-1] + u[1:rows + 1, :-2] + u[1:rows + 1, 2:])
    lo = 1 if first_global == 0 else 0                         # the global top row is fixed
    hi = rows - 1 if first_global + rows == n else rows        # so is the global bottom row
    u[1 + lo:1 + hi, 1:-1] = new[lo:hi]


class Plate:
    """This rank's slab of the ``n`` x ``n`` plate: its band of rows ``start..stop-1`` with one halo row on
    each side (``u``), and where the band sits in the plate."""

    def __init__(self, n: int, nranks: int, rank: int) -> None:
        self.n = n
        self.place(nranks, rank)

    def place(self, nranks: int, rank: int) -> None:
        """Take rank ``rank``'s band of ``nranks`` (the initial field: a restore fills it afterwards)."""
        self.nranks = nranks
        self.start, self.stop = row_band(self.n, nranks, rank)
        self.u = initial_band(self.n, self.start, self.stop)

    def protect(self, ckpt: ftkit.Checkpointer) -> None:
        """Protect the band's rows (not its halos) as a box of the global plate."""
        ckpt.protect("u", self.u[1:-1], global_shape=(self.n, self.n), offset=(self.start, 0))

    def counts(self) -> list[int]:
        """Elements held by each rank (for gathering the field)."""
        return [(row_band(self.n, self.nranks, r)[1] - row_band(self.n, self.nranks, r)[0]) * self.n
                for r in range(self.nranks)]


def reference(n: int, steps: int) -> np.ndarray:
    """The same computation on one process (for bit-for-bit comparison)."""
    u = initial_band(n, 0, n)
    for _ in range(steps):
        jacobi_rows(u, 0, n)
    return u[1:-1].copy()


def digest(field: np.ndarray) -> str:
    """xxh3-64 (hex) of a field's bytes."""
    return xxhash.xxh3_64_hexdigest(np.ascontiguousarray(field).tobytes())


def exchange_halos(comm: MPI.Comm, u: np.ndarray) -> None:
    """Fill the halo rows of ``u`` from the neighbouring ranks (real neighbours only, no ``MPI_PROC_NULL``:
    Open MPI 5.0's ``MPI_Sendrecv`` with ``MPI_PROC_NULL`` on one side crashes when a failure reaches it)."""
    up = comm.rank - 1 if comm.rank > 0 else None
    down = comm.rank + 1 if comm.rank < comm.size - 1 else None
    shift(comm, u[1], up, u[-1], down, tag=1)    # first rows go up, the halo below fills
    shift(comm, u[-2], down, u[0], up, tag=2)    # last rows go down, the halo above fills


def shift(comm: MPI.Comm, row: np.ndarray, dest: int | None, halo: np.ndarray, source: int | None,
          tag: int) -> None:
    """Send ``row`` to ``dest`` and receive ``halo`` from ``source``; None: no neighbour on that side."""
    if dest is not None and source is not None:
        comm.Sendrecv(row, dest=dest, sendtag=tag, recvbuf=halo, source=source, recvtag=tag)
    elif dest is not None:
        comm.Send(row, dest=dest, tag=tag)
    elif source is not None:
        comm.Recv(halo, source=source, tag=tag)


def run(args: argparse.Namespace) -> int:
    ckpt = ftkit.Checkpointer(args.config or _default_config(), MPI.COMM_WORLD)
    comm = ckpt.comm
    n = args.size
    if n < comm.size + 2:
        raise SystemExit(f"--size {n} is too small for {comm.size} ranks")
    plate = Plate(n, comm.size, comm.rank)
    step = np.zeros(1, dtype=np.int64)

    def protect() -> None:
        # The band as a box of the global plate, the step counter replicated: a restart may use another
        # number of ranks (the bands are recomputed for it and refilled from the checkpoint).
        plate.protect(ckpt)
        ckpt.protect("step", step, global_shape=(1,), offset=(0,))

    def on_shrink(new: MPI.Comm) -> None:
        plate.place(new.size, new.rank)  # the survivors' bands; the loop refills them from the checkpoint
        protect()

    protect()
    if ckpt.restarted:
        info = ckpt.recover()
        if comm.rank == 0:
            print(f"heat: recovered checkpoint {info.checkpoint_id} from level {info.level} "
                  f"at step {step[0]}",
                  flush=True)
    t0 = time.perf_counter()
    # after an online recovery (spare_ranks, or fewer ranks with --shrink), resumes at the restored step;
    # --fti-loop: FTI's own loop shape (a failure then ends the job; a relaunch recovers)
    loop = (_fti_steps(ckpt, step, args.steps) if args.fti_loop else
            ckpt.steps(args.steps, on_shrink=on_shrink if args.shrink else None))
    for s in loop:
        comm = ckpt.comm  # the repaired communicator after an online recovery
        _maybe_kill(ckpt, s, args)
        if args.pause:
            time.sleep(args.pause)
        exchange_halos(comm, plate.u)
        jacobi_rows(plate.u, plate.start, n)
        step[0] = s + 1
        level = ckpt.snapshot()
        if level and comm.rank == 0 and args.verbose:
            print(f"heat: step {step[0]}: checkpoint at level {level}", flush=True)
    elapsed = time.perf_counter() - t0
    comm = ckpt.comm
    shrinks = {sh.number: sh for sh in ckpt.shrinks}
    for report in ckpt.recoveries:
        sh = shrinks.get(report.number)
        if comm.rank == 0:
            what = f"continued on {sh.new_size} of {sh.old_size} ranks" if sh else "replaced"
            print(f"heat: online recovery: ranks {list(report.dead)} {what}, checkpoint "
                  f"{report.checkpoint_id} restored from level {report.level}, "
                  + ", ".join(f"{k} {v:.3f} s" for k, v in report.phases().items()), flush=True)
    field = np.empty((n, n)) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(plate.u[1:-1]), [field, plate.counts()] if comm.rank == 0 else None,
                 root=0)
    status = ckpt.status()
    ckpt.finalize()
    if comm.rank == 0:
        assert field is not None
        if args.save:
            np.save(args.save, field)
        print(f"heat: {comm.size} ranks, size {n}, {args.steps} steps, "
              f"{len(status.checkpoints)} checkpoint(s) "
              f"kept at the end, {elapsed:.2f} s", flush=True)
        print(f"digest {digest(field)}", flush=True)
    if ckpt.recoveries:
        exit_without_finalize(comm, 0)  # after a failure, MPI_Finalize may wait for the dead (ompi#11404)
    return 0


def _fti_steps(ckpt: ftkit.Checkpointer, step: np.ndarray, steps: int):  # noqa: ANN202 - a generator
    """FTI's loop, ``while step < steps: ...; FTI_Snapshot()``, as a generator of the steps to run."""
    while step[0] < steps:
        yield int(step[0])


def _maybe_kill(ckpt: ftkit.Checkpointer, s: int, args: argparse.Namespace) -> None:
    """SIGKILL this rank if a planned kill says so (fresh runs only; the i-th after i online recoveries)."""
    plan = [(args.kill_at, [args.kill_rank])] if args.kill_at is not None else []
    plan += [(int(at), [int(r) for r in ranks.split(",")]) for at, ranks in (k.split(":") for k in args.kill)]
    done = ckpt.recoveries[-1].number if ckpt.recoveries else 0  # the job's, also on a replacement
    if ckpt.restarted or done >= len(plan) or plan[done][0] != s or ckpt.comm.rank not in plan[done][1]:
        return
    topo = ckpt.topology
    if set(topo.ranks_on_node) <= set(plan[done][1]) and topo.rank_in_node == 0:
        delete_node_dir(topo.local_dir)  # the whole node dies: its local storage goes with it
    print(f"heat: rank {ckpt.comm.rank} killing itself at step {s}", flush=True)
    kill_self()


def _default_config() -> ftkit.Config:
    return ftkit.Config(ckpt_dir="heat-run/local", glbl_dir="heat-run/global", meta_dir="heat-run/meta",
                        ckpt_l1=10, interval_unit="iterations")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="Jacobi steps")
    p.add_argument("--size", type=int, default=128, help="global grid is SIZE x SIZE")
    p.add_argument("--config", default=None, help="FTI-style INI file (default: L1 every 10 iterations)")
    p.add_argument("--kill-at", type=int, default=None, help="SIGKILL --kill-rank when reaching this step")
    p.add_argument("--kill-rank", type=int, default=0)
    p.add_argument("--kill", action="append", default=[], metavar="STEP:R[,R...]",
                   help="SIGKILL these ranks at STEP (repeatable: the i-th after i online recoveries); ranks "
                        "that make up a whole node delete its node-local directory first")
    p.add_argument("--shrink", action="store_true",
                   help="when no spare is left, continue on the survivors (steps(on_shrink=...))")
    p.add_argument("--fti-loop", action="store_true",
                   help="FTI's loop (while step < steps ... snapshot()) instead of ckpt.steps(): a failure "
                        "ends the job (ftkit ends every rank), a relaunch recovers")
    p.add_argument("--pause", type=float, default=0.0, help="sleep this long in every step (for kill tests)")
    p.add_argument("--save", default=None, help="rank 0 saves the final field to this .npy file")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    # No error handling here: when a peer dies (or a rank raises) and the run cannot go on, ftkit ends every
    # process of the job within failure_timeout, naming the dead ranks and the checkpoint a relaunch uses.
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
