"""A partner copy onto a full disk: member 1's copy directory is a small tmpfs that fills up mid-transfer.

Usage: partner_enospc.py ROOT SMALL_DISK SIZE [missing]   ("missing": member 2 has no data file at all)
Prints ``OK <rank>`` or ``STORAGEERROR <rank> <message>`` per rank, ``DONE <rank>`` at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.errors import StorageError
from ftkit.storage.groupcode.partner_copy import partner_copy

root, small, size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
comm = MPI.COMM_WORLD
r = comm.Get_rank()
data = root / f"node{r}" / "data.bin"
data.parent.mkdir(parents=True, exist_ok=True)
data.write_bytes(np.random.default_rng(r).integers(0, 256, size, dtype=np.uint8).tobytes())
copy = small / "copy1.bin" if r == 1 else root / f"node{r}" / "copy.bin"
if sys.argv[4:] == ["missing"] and r == 2:
    data.unlink()
comm.Barrier()
try:
    partner_copy(comm, data, copy, chunk_size=64 << 10, timeout=60,
                 names=[f"rank {m} on node {m}" for m in range(comm.Get_size())])
    print(f"OK {r}", flush=True)
except StorageError as exc:
    print(f"STORAGEERROR {r} {exc}", flush=True)
comm.Barrier()
print(f"DONE {r}", flush=True)
