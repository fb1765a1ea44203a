"""MPI ping-pong between ranks 0 and 1, for fitting the network terms ``a`` and ``b`` of eq. (1).

Run with two ranks (``ftkit.launch.run_mpi(2, [python, "-m", "ftkit.models._pingpong", ...])``). Rank 0 prints
one JSON line ``{"pingpong": [[bytes, seconds_one_way], ...]}``: for each message size, the minimum over
``--rounds`` rounds of (round-trip time of ``--repeats`` exchanges) / (2 · repeats).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from mpi4py import MPI


def main(argv: list[str] | None = None) -> int:
    """Run the ping-pong; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m ftkit.models._pingpong")
    parser.add_argument("--sizes", default="8,65536,1048576,4194304",
                        help="message sizes (bytes), comma-separated")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        if comm.Get_rank() == 0:
            print("ping-pong needs exactly 2 ranks", file=sys.stderr)
        return 2
    rank = comm.Get_rank()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        buf = np.zeros(max(size, 1), dtype=np.uint8)
        times = []
        for round_ in range(args.rounds + 1):
            comm.Barrier()
            start = MPI.Wtime()
            for _ in range(args.repeats):
                if rank == 0:
                    comm.Send([buf, size, MPI.BYTE], dest=1, tag=7)
                    comm.Recv([buf, size, MPI.BYTE], source=1, tag=7)
                else:
                    comm.Recv([buf, size, MPI.BYTE], source=0, tag=7)
                    comm.Send([buf, size, MPI.BYTE], dest=0, tag=7)
            if round_ > 0:  # round 0 warms up connections and buffers
                times.append((MPI.Wtime() - start) / (2 * args.repeats))
        results.append([size, min(times)])
    if rank == 0:
        print(json.dumps({"pingpong": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
