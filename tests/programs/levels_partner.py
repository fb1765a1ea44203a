"""Partner copies over a group communicator: copy, lose files, assess, rebuild, compare bytes.

Usage: levels_partner.py DIR SCENARIO, SCENARIO one of
  node1      member 1 loses its data file and the copy it holds (one node lost)
  corrupt2   member 2's data file is damaged (validate rejects it)
  ring12     members 1 and 2 lose everything (neighbours on the ring: unrecoverable)
Prints ``OK <rank>`` on success, ``RECOVERYERROR <rank> <message>`` when recovery is refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.errors import RecoveryError
from ftkit.inject import corrupt_file
from ftkit.storage.groupcode.partner_copy import assess_partner, partner_copy, rebuild_partner

root, scenario = Path(sys.argv[1]), sys.argv[2]
offline = scenario.endswith("~off")  # rank 0 repairs all files in one process (ftkit rebuild's path)
scenario = scenario.removesuffix("~off")
comm = MPI.COMM_WORLD
n, r = comm.Get_size(), comm.Get_rank()


def content(member: int) -> bytes:
    rng = np.random.default_rng(1000 + member)
    return rng.integers(0, 256, 3000 + 1777 * member, dtype=np.uint8).tobytes()


def paths(member: int) -> tuple[Path, Path]:
    d = root / f"node{member}"
    return d / f"data{member}.bin", d / f"copy{member}.bin"


data, copy = paths(r)
data.parent.mkdir(parents=True, exist_ok=True)
data.write_bytes(content(r))
comm.Barrier()
got = partner_copy(comm, data, copy, chunk_size=1000)
assert copy.read_bytes() == content((r - 1) % n), "partner copy differs from the source file"
assert got == len(content((r - 1) % n))
comm.Barrier()
if r == 0:
    if scenario == "node1":
        for p in paths(1):
            p.unlink()
    elif scenario == "corrupt2":
        corrupt_file(paths(2)[0], offset=100)
    elif scenario == "ring12":
        for m in (1, 2):
            for p in paths(m):
                p.unlink()
comm.Barrier()


def validate(p: Path) -> bool:
    # Stand-in for a format checksum: the test knows the true contents of every file.
    if not p.exists():
        return False
    m = int(p.stem[4:])
    want = content(m) if p.stem.startswith("data") else content((m - 1) % n)
    return p.read_bytes() == want


plan = assess_partner(comm, data, copy, validate)
names = [f"rank {m} on node {m}" for m in range(n)]
try:
    if offline:
        from ftkit.storage.groupcode.offline import assess_partner_files, rebuild_partner_files

        err = None
        if r == 0:
            ds, cs = zip(*(paths(m) for m in range(n)), strict=True)
            oplan = assess_partner_files(ds, cs, validate)
            assert oplan == plan
            try:
                rebuild_partner_files(oplan, ds, cs, names=names)
            except RecoveryError as exc:
                err = str(exc)
        err = comm.bcast(err, root=0)
        if err:
            raise RecoveryError(err)
    else:
        rebuild_partner(comm, plan, data, copy, names=names, chunk_size=1000)
except RecoveryError as exc:
    assert data.exists() or r in (1, 2)
    print(f"RECOVERYERROR {r} {exc}", flush=True)
    sys.exit(0)
assert data.read_bytes() == content(r), "rebuilt data file differs"
assert copy.read_bytes() == content((r - 1) % n), "re-created copy differs"
assert not [p for p in data.parent.iterdir() if p.name.startswith(".")], "temporary file left behind"
print(f"OK {r} lost={list(plan.lost_members)}", flush=True)
