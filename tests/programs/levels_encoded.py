"""Encoded (L3) groups over a group communicator: encode, damage files, assess, rebuild, compare bytes.

Usage: levels_encoded.py DIR CODE SCENARIO[,SCENARIO...]

Each member ``m`` owns ``DIR/<scenario>/node<m>/{data,parity}`` (data sizes differ per member, one is tiny).
The parity files are cross-checked against a plain whole-file computation on rank 0, then each scenario's
damage is applied, the group assessed and rebuilt, and every file compared with its original bytes.
Scenarios: ``none``, ``node<i>[<j>...]`` (lose data+parity of members i, j...), ``data<i>``/``parity<i>``
(corrupt one byte), ``alldata`` (no data file left), ``allparity`` (every parity file lost), ``twice``
(lose node 1, rebuild, then lose node 3, rebuild). Prints ``OK <scenario> <rank> lost=...`` or
``RECOVERYERROR <scenario> <rank> <message>``. A ``~off`` suffix (``node1~off``) makes rank 0 repair all
files in one process with :mod:`ftkit.storage.groupcode.offline` instead of the collective rebuild;
``~mem`` encodes each member's data from memory (``data_bytes``, as an inline L3 checkpoint does),
``~mixed`` only on even ranks (the members then all exchange through the file path's allgather).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.errors import RecoveryError
from ftkit.inject import corrupt_file
from ftkit.storage.groupcode.erasure import assess_group, encode_group, rebuild_group
from ftkit.storage.groupcode.parity import read_parity_header
from ftkit.storage.pending import MemorySource

root, code, scenarios = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
comm = MPI.COMM_WORLD
n, r = comm.Get_size(), comm.Get_rank()
MEMORY = 64 << 10  # forces many chunks
SIZES = [50_000 + 23_456 * m if m != 2 else 777 for m in range(n)]
NAMES = [f"rank {m} on node {m}" for m in range(n)]


def content(m: int) -> bytes:
    return np.random.default_rng(500 + m).integers(0, 256, SIZES[m], dtype=np.uint8).tobytes()


def reference_parity(m: int) -> bytes:
    """Parity payload of member m computed whole, independently of the streaming code path."""
    big = max(SIZES)
    if code == "rs":
        from ftkit.codec import RSCode

        data = [np.frombuffer(content(j).ljust(big, b"\0"), np.uint8) for j in range(n)]
        return bytes(RSCode(n, n).encode(data)[m].tobytes())
    per = -(-big // (n - 1))
    seg = -(-per // 8) * 8
    acc = np.zeros(seg, np.uint8)
    for j in range(n):
        if j != m:
            s = m if m < j else m - 1
            padded = np.frombuffer(content(j).ljust(seg * (n - 1), b"\0"), np.uint8)
            acc ^= padded[s * seg:(s + 1) * seg]
    return acc.tobytes()


def files(base: Path, m: int) -> tuple[Path, Path]:
    return base / f"node{m}" / "data.bin", base / f"node{m}" / "parity.bin"


def damage(base: Path, what: str) -> None:
    if what.startswith("node"):
        for m in what[4:]:
            for p in files(base, int(m)):
                p.unlink()
    elif what.startswith("data"):
        corrupt_file(files(base, int(what[4:]))[0], offset=SIZES[int(what[4:])] // 2)
    elif what.startswith("parity"):
        corrupt_file(files(base, int(what[6:]))[1], offset=-3)
    elif what.startswith("forged"):  # a header that is valid JSON of the wrong type, same file length
        p = files(base, int(what[6:]))[1]
        blob = bytearray(p.read_bytes())
        (hlen,) = struct.unpack("<I", blob[8:12])
        blob[12:12 + hlen] = b"[]".ljust(hlen)
        p.write_bytes(bytes(blob))
    elif what == "alldata":
        for m in range(n):
            files(base, m)[0].unlink()
    elif what == "allparity":
        for m in range(n):
            files(base, m)[1].unlink()


def recover(base: Path, data: Path, parity: Path, offline: bool) -> tuple[int, ...]:
    if offline:  # rank 0 repairs every member's files in one process (ftkit rebuild's path)
        lost: tuple[int, ...] | str = ()
        if r == 0:
            from ftkit.storage.groupcode.offline import assess_group_files, rebuild_group_files

            ds, ps = zip(*(files(base, m) for m in range(n)), strict=True)
            plan = assess_group_files(ds, ps, code=code, tag="t1")
            try:
                rebuild_group_files(plan, ds, ps, names=NAMES, memory=MEMORY, tag="t1")
                lost = plan.lost_data + tuple(n + m for m in plan.lost_parity)
            except RecoveryError as exc:
                lost = str(exc)
        lost = comm.bcast(lost, root=0)
        if isinstance(lost, str):
            raise RecoveryError(lost)
        return lost
    plan = assess_group(comm, data, parity, code=code, tag="t1")
    rebuild_group(comm, plan, data, parity, names=NAMES, memory=MEMORY, tag="t1")
    return plan.lost_data + tuple(n + m for m in plan.lost_parity)


def in_memory(m: int) -> MemorySource:
    """Member m's data as two pieces of memory (a read-only and a writable one), the cut inside a chunk:
    chunks inside a piece are sent and encoded where they lie, the one across the cut is copied."""
    blob, cut = content(m), min(10_000, SIZES[m])
    return MemorySource("memory", [(0, memoryview(blob[:cut])), (cut, memoryview(bytearray(blob[cut:])))])


for scen in scenarios:
    name, *mods = scen.split("~")   # ~off: offline repair; ~mem: encoded from memory (~mixed: even ranks)
    offline = "off" in mods
    base = root / scen
    data, parity = files(base, r)
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(content(r))
    comm.Barrier()
    mem = in_memory(r) if "mem" in mods or ("mixed" in mods and r % 2 == 0) else None
    stats: dict[str, float] = {}
    h = encode_group(comm, data, parity, code=code, tag="t1", memory=MEMORY, data_bytes=mem, stats=stats)
    viewed = comm.allgather(stats.get("viewed", 0.0))
    if "mem" in mods:   # every chunk inside one piece of memory, none of the others
        z = int(stats["chunk_bytes"])
        ends = [(st, min(st + z, max(SIZES))) for st in range(0, max(SIZES), z)]
        inside = sum(1 for st, end in ends if end <= SIZES[r] and not st < 10_000 < end)
        assert viewed[r] == inside and sum(viewed) > 0, f"rank {r}: {viewed[r]} chunks viewed, not {inside}"
    else:
        assert viewed == [0.0] * n, f"chunks viewed with memory on some members only: {viewed}"
    original = parity.read_bytes()
    assert original[h.payload_offset:] == reference_parity(r), "streamed parity differs from whole-file one"
    assert read_parity_header(parity).sizes == tuple(SIZES)
    comm.Barrier()
    try:
        steps = [("node1", "node3")] if name == "twice" else [(name,)]
        lost: list[tuple[int, ...]] = []
        for step in steps[0]:
            if r == 0:
                damage(base, step)
            comm.Barrier()
            lost.append(recover(base, data, parity, offline))
            comm.Barrier()
    except RecoveryError as exc:
        print(f"RECOVERYERROR {scen} {r} {exc}", flush=True)
        continue
    assert data.read_bytes() == content(r), f"{scen}: rebuilt data differs on rank {r}"
    assert parity.read_bytes() == original, f"{scen}: re-created parity differs on rank {r}"
    assert not [p for p in data.parent.iterdir() if p.name.startswith(".")], "temporary file left"
    print(f"OK {scen} {r} lost={lost}", flush=True)
