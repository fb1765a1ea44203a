"""The floor of each checkpoint level: the least work that level's guarantee needs, on the same bytes.

    ftkit launch -n P --node-size 1 -- python floors.py DIR MIB LEVEL GROUP_SIZE [WRITEBACK [COMMIT [DIRECT]]]

Per application rank, MIB MiB from memory (the same array as the benchmark programs), slowest rank, from a
barrier (MPI.Wtime), with the MPI of ftkit's launch:

* L1: write + fsync of the bytes to a file in ``DIR/local``;
* L2: L1 + one MPI transfer of the bytes to the partner (next member of the group) + its write + fsync;
* L3: L1 + the group exchange (k - 1 sends and receives of 1/k of the bytes: member i gathers slice i of
  every member's bytes) + encoding RS(k, k) at the codec's measured speed (the slice of every parity row,
  timed here with ``ftkit.codec``) + a second exchange of 1/k pieces (member r keeps parity row r of every
  slice) + write + fsync of the rank's parity bytes (as many as its data). The second exchange is what the
  guarantee needs: if member i kept the k parity rows of its own slice i, losing its node would lose data
  slice i of member i with every parity fragment of that slice (k - 1 of the 2k fragments left, k needed).
  This layout moves 2 (k - 1) / k of the bytes per member; ftkit's and FTI's (member i computes parity row i
  over all the data) move k - 1 times the bytes;
* L4: write + fsync of the bytes to a file in ``DIR/global``.

``WRITEBACK`` = 1: each write hands every 16 MiB piece to the device at once (``sync_file_range``, as ftkit's
writer does since issue 37) before the fsync; 0 (default): plain write + fsync.

``DIRECT`` = 1 (7th argument): the L4 file is written with direct I/O (``O_DIRECT``), each 4 MiB copied into
one of two aligned staging buffers while a thread writes the other (copy included), then fsynced: the path
ftkit's L4 writer takes for files of 64 MiB or more since issue 37 (:mod:`ftkit.storage._direct`);
``WRITEBACK`` then applies to the other levels' files only. ``run_order.py --floor-direct`` measures this
floor as a system of its own (``floor-direct``) beside the buffered one, and the ratios take the better.

``COMMIT`` = 1: what durability needs beyond the bytes, which the default floor omits and ftkit (and any
checkpoint a restart can trust) must do: each file is written under a temporary name and renamed after its
fsync, and its directory fsynced (the name is durable: without it a power loss may leave the file nameless);
then the ranks exchange their file sizes (one allgather) and rank 0 writes a small manifest naming every
file durably (write, fsync, rename, directory fsync), the outcome broadcast (one round). ftkit does all that,
plus a digest of the bytes (integrity, read at recovery) and a fault-tolerant agreement before the manifest
(the commit gate). 0 (default): the bare floor. Prints
``FLOORRESULT level=L mib=M floor_s=... cpu_s=... pcpu_s=... runq_s=... blk_s=... wmib=... parts=...`` (the
CPU split and bytes to storage as :mod:`ckpt_ftkit` reports them, slowest rank). Files are removed afterwards.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.codec import RSCode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ckpt_ftkit import usage_now  # noqa: E402  (the same CPU / run-queue / bytes-to-storage split)
from devstat import device_now, device_text  # noqa: E402  (the device's counters over the call)
from write_paths import write_direct  # noqa: E402  (O_DIRECT through two aligned staging buffers)

try:
    from ftkit.storage._writeback import start_writeback
except ImportError:   # an ftkit from before issue 37 (--baseline-src): plain writes
    def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
        return False


WRITEBACK = [False]   # argv[5]: early writeback of each piece (see the module doc)
COMMIT = [False]      # argv[6]: durable names and a manifest (see the module doc)
DIRECT = [False]      # argv[7]: the L4 file with direct I/O (see the module doc)
PIECE = 16 << 20


def fsync_dir(path: Path) -> None:
    """fsync directory ``path`` (a creation or rename inside it is then durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fsync(path: Path, data: np.ndarray | bytes, direct: bool = False) -> None:
    """Write ``data`` to a new file and fsync it (``direct``: with ``O_DIRECT``); with COMMIT under a
    temporary name, then rename it and fsync its directory (else no rename: a floor)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target = path.with_name(path.name + ".tmp") if COMMIT[0] else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o600)
    try:
        view, done = memoryview(data).cast("B"), 0
        if direct:
            write_direct(fd, view, 2)
            done = len(view)
        while done < len(view):
            n = os.write(fd, view[done:done + PIECE] if WRITEBACK[0] else view[done:])
            if WRITEBACK[0]:
                start_writeback(fd, done, n)
            done += n
        os.fsync(fd)
    finally:
        os.close(fd)
    if COMMIT[0]:
        os.replace(target, path)
        fsync_dir(path.parent)


def commit_manifest(comm: MPI.Intracomm, work: Path, nbytes: int) -> None:
    """COMMIT: every rank's file size to every rank, then rank 0 names them in a durable manifest and tells
    the others it did (the least a restartable checkpoint's commit needs)."""
    sizes = comm.allgather(nbytes)
    ok = True
    if comm.Get_rank() == 0:
        write_fsync(work / "meta" / "floor_manifest.json", repr(sizes).encode())
    comm.bcast(ok, root=0)


def main() -> int:
    work, mib, level, k = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    WRITEBACK[0] = len(sys.argv) > 5 and sys.argv[5] == "1"
    COMMIT[0] = len(sys.argv) > 6 and sys.argv[6] == "1"
    DIRECT[0] = len(sys.argv) > 7 and sys.argv[7] == "1"
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    n = (mib << 20) // 8
    data = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(rank)
    raw = data.view(np.uint8)
    group = comm.Split(rank // k, rank)
    me = group.Get_rank()
    parts: dict[str, float] = {}
    code = RSCode(k, k) if level == 3 else None
    if code is not None:  # load the codec's kernels outside the timing (ftkit warms up at start-up too)
        code.encode_into([np.zeros(4096, np.uint8)] * k, [np.empty(4096, np.uint8) for _ in range(k)])
    comm.Barrier()
    d0 = device_now(str(work)) if rank == 0 else None
    u0 = usage_now()
    t0 = MPI.Wtime()

    def lap(name: str, since: float) -> float:
        now = MPI.Wtime()
        parts[name] = now - since
        return now

    t = t0
    if level == 4:
        write_fsync(work / "global" / f"r{rank}.bin", raw, direct=DIRECT[0])
        t = lap("write_fsync", t)
    else:
        write_fsync(work / "local" / f"r{rank}.bin", raw)
        t = lap("write_fsync", t)
    if level == 2:
        got = np.empty_like(raw)
        group.Sendrecv(raw, (me + 1) % k, 11, got, (me - 1) % k, 11)
        t = lap("transfer", t)
        write_fsync(work / "local" / f"r{rank}.partner", got)
        t = lap("partner_write_fsync", t)
    elif level == 3:
        s = -(-raw.nbytes // k)
        padded = np.zeros(s * k, np.uint8)
        padded[:raw.nbytes] = raw
        gathered = np.empty(s * k, np.uint8)
        group.Alltoall(padded, gathered)          # member i receives slice i of every member's bytes
        t = lap("exchange", t)
        parity = np.empty(s * k, np.uint8)
        code.encode_into(list(gathered.reshape(k, s)), list(parity.reshape(k, s)))
        t = lap("encode", t)
        stored = np.empty(s * k, np.uint8)
        group.Alltoall(parity, stored)            # member r keeps parity row r of every slice
        t = lap("parity_exchange", t)
        write_fsync(work / "local" / f"r{rank}.parity", stored)
        t = lap("parity_write_fsync", t)
    if COMMIT[0]:
        commit_manifest(comm, work, raw.nbytes)
        t = lap("commit", t)
    elapsed = MPI.Wtime() - t0
    used = [b - a for a, b in zip(u0, usage_now(), strict=True)]
    dev = device_text(d0, device_now(str(work))) if d0 is not None else ""
    floor = comm.allreduce(elapsed, op=MPI.MAX)
    cpu_s, runq_s, pcpu_s = (comm.allreduce(x, op=MPI.MAX) for x in used[:3])
    blk_s = comm.allreduce(elapsed - used[0] - used[1], op=MPI.MAX)
    wmib = comm.allreduce(used[3], op=MPI.SUM) / 1048576
    parts = {name: comm.allreduce(v, op=MPI.MAX) for name, v in parts.items()}
    for f in list((work / "local").glob(f"r{rank}.*")) + list((work / "global").glob(f"r{rank}.*")):
        f.unlink()
    if rank == 0:
        (work / "meta" / "floor_manifest.json").unlink(missing_ok=True)
    if rank == 0:
        text = ",".join(f"{name}:{v:.4f}" for name, v in parts.items())
        print(f"FLOORRESULT level={level} mib={mib} ranks={comm.Get_size()} commit={int(COMMIT[0])} "
              f"direct={int(DIRECT[0])} "
              f"floor_s={floor:.4f} "
              f"cpu_s={cpu_s:.4f} pcpu_s={pcpu_s:.4f} runq_s={runq_s:.4f} blk_s={blk_s:.4f} wmib={wmib:.1f} "
              f"{dev} parts={text}",
              flush=True)
    group.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
