"""Peak memory of a group encode and rebuild on files larger than the memory bound.

Usage: levels_memory.py DIR MIB CODE. Each member writes a MIB-MiB data file (in 4 MiB pieces), warms up
the codec, then encodes and, after losing member 1's files, rebuilds; prints
``PEAK <rank> <growth of the peak RSS in MiB>`` (growth of ru_maxrss over the warmed-up baseline).
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.storage.groupcode.erasure import assess_group, encode_group, rebuild_group

root, mib, code = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
comm = MPI.COMM_WORLD
r = comm.Get_rank()
d = root / f"node{r}"
d.mkdir(parents=True, exist_ok=True)
piece = np.random.default_rng(r).integers(0, 256, 4 << 20, dtype=np.uint8)
with open(d / "data", "wb") as f:
    for i in range(mib // 4):
        piece[0] = i  # pieces differ
        f.write(piece.data)
# Warm up (codec kernels, MPI buffers) on a small group encode.
(d / "small").write_bytes(piece[: 1 << 16].tobytes())
encode_group(comm, d / "small", d / "small.parity", code=code)
del piece
comm.Barrier()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
encode_group(comm, d / "data", d / "parity", code=code)
comm.Barrier()
if r == 1:
    (d / "data").unlink()
    (d / "parity").unlink()
comm.Barrier()
plan = assess_group(comm, d / "data", d / "parity", code=code)
rebuild_group(comm, plan, d / "data", d / "parity")
assert plan.lost_data == (1,)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"PEAK {r} {peak - base:.1f}", flush=True)
