"""How long a job's first collectives take: timestamps per phase on every rank (the wire-up probe).

    mpirun ... python tools/cluster/wireup_probe.py [--repeat-ops]

Every rank stamps ``time.time()`` (one kernel clock for every host of the virtual cluster, so stamps of
different hosts compare) at: its start (before ``import mpi4py``), after the import, after ``MPI_Init``,
then after each first collective: a Barrier, an Allgather, a ``Split_type(SHARED)``, a ``Split``, a
``Dup``, an Alltoall (every pair of ranks talks), and the same five again (a second time: connections
already made). Rank 0 prints one line per phase: the seconds from ``$PROBE_T0`` (the launcher's start, when
set) at which the slowest rank finished it, and the slowest rank's time in it (the phase's cost with start
skew between ranks removed from the later phases). The first line names each rank's host.
"""

from __future__ import annotations

import os
import socket
import time

STAMPS: list[tuple[str, float]] = [("start", time.time())]

import mpi4py  # noqa: E402

mpi4py.rc.initialize = False
from mpi4py import MPI  # noqa: E402

STAMPS.append(("import", time.time()))
MPI.Init()
STAMPS.append(("init", time.time()))


def main() -> None:
    """Run the phases, gather the stamps on rank 0 and print them."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if os.environ.get("PROBE_PAIRS"):
        pairs(world)
    for round_ in ("1", "2"):
        world.Barrier()
        STAMPS.append((f"barrier{round_}", time.time()))
        world.allgather(rank)
        STAMPS.append((f"allgather{round_}", time.time()))
        shared = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        STAMPS.append((f"split_shared{round_}", time.time()))
        part = world.Split(rank % 2, rank)
        STAMPS.append((f"split{round_}", time.time()))
        dup = world.Dup()
        STAMPS.append((f"dup{round_}", time.time()))
        dup.alltoall([rank] * world.Get_size())
        STAMPS.append((f"alltoall{round_}", time.time()))
        for c in (shared, part, dup):
            c.Free()
    everyone = world.gather((socket.gethostname(), STAMPS), root=0)
    if rank == 0:
        assert everyone is not None
        t0 = float(os.environ.get("PROBE_T0", min(s[0][1] for _, s in everyone)))
        print("hosts: " + " ".join(f"{r}:{h}" for r, (h, _) in enumerate(everyone)))
        names = [n for n, _ in everyone[0][1]]
        for i, name in enumerate(names):
            ends = [s[i][1] for _, s in everyone]
            cost = [s[i][1] - s[i - 1][1] for _, s in everyone] if i else [0.0]
            print(f"{name:14} done at {max(ends) - t0:7.3f} s (first rank {min(ends) - t0:7.3f}); "
                  f"slowest rank in it {max(cost):6.3f} s", flush=True)
    MPI.Finalize()


def pairs(world) -> None:  # type: ignore[no-untyped-def]
    """Rank 0 pings every other rank in turn, twice: the first ping's time is that pair's connection."""
    rank, size = world.Get_rank(), world.Get_size()
    buf = bytearray(8)
    for rnd in (1, 2):
        for peer in range(1, size):
            t = time.time()
            if rank == 0:
                world.Send(buf, dest=peer, tag=rnd)
                world.Recv(buf, source=peer, tag=rnd)
                print(f"ping {rnd} rank 0 -> {peer}: {1e3 * (time.time() - t):7.1f} ms", flush=True)
            elif rank == peer:
                world.Recv(buf, source=0, tag=rnd)
                world.Send(buf, dest=0, tag=rnd)


if __name__ == "__main__":
    main()
