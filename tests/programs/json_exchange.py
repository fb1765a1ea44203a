"""Test program: ftkit's JSON exchanges (checkpoint._mpi.allgather / bcast, the group codes'
allgather_json) with values that fit the first round's slot, values just over it, and long ones, mixed
across ranks; and exchanges that complete with a peer's part unwritten (as a peer dying inside the
collective can leave them with ULFM: made here by zeroing that part once the collective has completed), which
must raise ProcessFailure, never hand back a parsed value. Prints "R<rank> ok" or the first mismatches."""
import json

from mpi4py import MPI

from ftkit import ProcessFailure
from ftkit.checkpoint import _mpi
from ftkit.storage._jsonslots import SLOT, allgather_values, bcast_value
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


def unwritten(part: int, round_: int, tail: slice = slice(None)):  # type: ignore[no-untyped-def]
    """A wait that completes the collective, then clears what rank ``part`` sent in round ``round_`` (in the
    second round, the bytes ``tail`` of the texts received)."""
    rounds = [0]

    def wait(req, keep):  # type: ignore[no-untyped-def]
        req.Wait()
        if rounds[0] == round_ and rank != part:
            got = keep[-1]
            if got.ndim == 2:
                got[part] = 0          # the first round's slots, one row per rank
            else:
                got[tail] = 0          # a broadcast's slot, or the second round's texts
        rounds[0] += 1
    return wait


def tail_of(part: int, case: str) -> slice:
    """Where rank ``part``'s text beyond the first round's slot lies in the second round's buffer."""
    over = [len(json.dumps(expected(r, case), separators=(",", ":")).encode()) - room for r in range(n)]
    return slice(sum(over[:part]), sum(over[:part + 1]))


# Only the last round is cleared: a rank that raises after the first round of a two-round exchange would
# leave the others alone in the second (no deadline in this program's waits).
for case, round_ in (("small", 0), ("long", 1)):
    part = (1 + round_) % n
    for what in ("allgather", "bcast"):
        try:
            if what == "allgather":
                allgather_values(comm, expected(rank, case), unwritten(part, round_, tail_of(part, case)))
            else:
                mine = expected(part, case) if rank == part else None
                bcast_value(comm, mine, part, unwritten(part, round_))
            if rank != part:
                bad.append(f"{what} {case} round {round_}: no error for rank {part}'s unwritten part")
        except ProcessFailure as exc:
            if rank == part or f"rank {part}'s part" not in str(exc):
                bad.append(f"{what} {case} round {round_}: {exc}")
    comm.Barrier()

print(f"R{rank} " + ("ok" if not bad else "BAD " + " | ".join(bad[:3])), flush=True)
comm.Free()
