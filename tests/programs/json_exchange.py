"""Test program: ftkit's JSON exchanges (checkpoint._mpi.allgather / bcast, the group codes'
allgather_json) with values that fit the first round's slot, values just over it, and long ones, mixed
across ranks. Prints "R<rank> ok" or the first mismatches."""
import json

from mpi4py import MPI

from ftkit.checkpoint import _mpi
from ftkit.storage._jsonslots import SLOT
from ftkit.storage.groupcode._collective import allgather_json

comm = _mpi.internal_comm(MPI.COMM_WORLD)
rank, n = comm.Get_rank(), comm.Get_size()
room = SLOT - 8  # bytes of JSON text the first round carries


def expected(r: int, case: str) -> object:
    """Rank ``r``'s value of ``case``, whose JSON text is exactly the case's length in bytes."""
    sizes = {"small": 60, "edge": room, "over": room + 1,
             "mixed": 60 if r % 2 else 3 * room, "long": 5000 + 17 * r}
    value: list[object] = [r, case, "", None, True, 1.5, "é"]
    value[2] = "x" * (sizes[case] - len(json.dumps(value, separators=(",", ":")).encode()))
    assert len(json.dumps(value, separators=(",", ":")).encode()) == sizes[case]
    return value


bad = []
for case in ("small", "edge", "over", "mixed", "long"):
    got = _mpi.allgather(comm, expected(rank, case), f"allgather {case}", 60)
    want = [expected(r, case) for r in range(n)]
    if got != want:
        bad.append(f"allgather {case}: {str(got)[:200]}")
    got = allgather_json(comm, expected(rank, case), 60, f"group allgather {case}")  # the group codes' wait
    if got != want:
        bad.append(f"group allgather {case}: {str(got)[:200]}")
    for root in range(n):
        got = _mpi.bcast(comm, expected(root, case) if rank == root else None, root, f"bcast {case}", 60)
        if got != expected(root, case):
            bad.append(f"bcast {case} from {root}: {str(got)[:200]}")
print(f"R{rank} " + ("ok" if not bad else "BAD " + " | ".join(bad[:3])), flush=True)
comm.Free()
