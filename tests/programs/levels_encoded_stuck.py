"""L3 group operations with a member that is alive but stuck: every member must end in TimeoutFailure.

Usage: levels_encoded_stuck.py DIR TIMEOUT STUCK CASE[,CASE...]

Cases (each on its own duplicate of ``COMM_WORLD``, member ``m`` owns ``DIR/<case>/node<m>/{data,parity}``):

``rs-encode``, ``xor-encode``
    Member ``STUCK`` stops itself (a real ``SIGSTOP``) once it is inside :func:`encode_group` (its parity
    file's temporary file exists; the encoding has hundreds of chunk exchanges left then).
``assess``, ``rs-rebuild``, ``xor-rebuild``
    The group is encoded (and, for a rebuild, member 1's data file lost and the group assessed) with every
    member taking part; then member ``STUCK`` stops itself just before :func:`assess_group` /
    :func:`rebuild_group` while the others call it.

Every other member waits at most ``TIMEOUT`` seconds per step; once all of them have reported, rank 0
resumes the stuck member (``SIGCONT``), which goes on inside the call and must fail too. Each rank prints
``TIMEOUT <case> <rank> <seconds> <message>`` or ``OTHER <case> <rank> <what happened>``, and rank 0
``FILES <case> <names>`` (what the call left in the case's directories). Finally a plain encode and assess
with a generous deadline on a fresh duplicate prints ``SANE <rank> <intact>`` (the group still works).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ftkit.errors import TimeoutFailure
from ftkit.storage.groupcode.erasure import assess_group, encode_group, rebuild_group

root, timeout, stuck, cases = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
world = MPI.COMM_WORLD
n, rank = world.Get_size(), world.Get_rank()
MEMORY = 64 << 10  # small buffers: many chunk exchanges
GENEROUS = 120.0  # s, for the steps every member takes part in
Path(root, f"pid.{rank}").write_text(str(os.getpid()))
world.Barrier()


def paths(case: str, m: int) -> tuple[Path, Path]:
    d = root / case / f"node{m}"
    return d / "data", d / "parity"


def prepare(case: str) -> None:
    size = (4 << 20) + 12_345 * rank if case.endswith("encode") else 200_000 + 999 * rank
    data, _ = paths(case, rank)
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(np.random.default_rng(rank).integers(0, 256, size, dtype=np.uint8).tobytes())


def stop_when_inside(directory: Path) -> threading.Thread:
    """Stop this process once a temporary file appears in ``directory`` (the encoding has begun)."""
    def watch() -> None:
        while not any(p.name not in ("data", "parity") for p in directory.iterdir()):
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGSTOP)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def outcome_file(case: str, r: int) -> Path:
    return root / case / f"outcome.{r}"


def resume_stuck_member(case: str) -> None:
    """Rank 0: once every other member reported, SIGCONT the stuck one until it reported too (bounded).

    Sent again and again: the stuck member may stop itself only after the others gave up (if it came late).
    """
    deadline = time.monotonic() + 300
    while not all(outcome_file(case, r).exists() for r in range(n) if r != stuck):
        if time.monotonic() > deadline:
            raise SystemExit("the other members did not report within 300 s")
        time.sleep(0.01)
    pid = int(Path(root, f"pid.{stuck}").read_text())
    while not outcome_file(case, stuck).exists():
        if time.monotonic() > deadline:
            raise SystemExit("the stuck member did not report within 300 s")
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)


def run_case(case: str) -> None:
    comm = world.Dup()
    code = "xor" if case.startswith("xor") else "rs"
    prepare(case)
    data, parity = paths(case, rank)
    if not case.endswith("encode"):
        encode_group(comm, data, parity, code=code, memory=MEMORY, timeout=GENEROUS)
    plan = None
    if case.endswith("rebuild"):
        if rank == 1:
            data.unlink()
        plan = assess_group(comm, data, parity, code=code, timeout=GENEROUS)
    watcher = None
    if rank == stuck:
        if case.endswith("encode"):
            watcher = stop_when_inside(data.parent)
        else:
            os.kill(os.getpid(), signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        if case.endswith("encode"):
            encode_group(comm, data, parity, code=code, memory=MEMORY, timeout=timeout)
        elif case == "assess":
            assess_group(comm, data, parity, code=code, timeout=timeout)
        else:
            rebuild_group(comm, plan, data, parity, memory=MEMORY, timeout=timeout)  # type: ignore[arg-type]
        line = f"OTHER {case} {rank} returned normally"
    except TimeoutFailure as exc:
        line = f"TIMEOUT {case} {rank} {time.monotonic() - t0:.1f} {exc}"
    except Exception as exc:  # reported, not hidden: the test fails on it
        line = f"OTHER {case} {rank} {type(exc).__name__}: {exc}"
    if watcher is not None:
        watcher.join(timeout=1)
    print(line, flush=True)
    tmp = root / case / f"outcome.{rank}.tmp"
    tmp.write_text(line)
    tmp.rename(outcome_file(case, rank))  # complete when it appears
    if rank == 0:
        resume_stuck_member(case)
    world.Barrier()  # every member, the stuck one included, is done with this case
    if rank == 0:
        left = sorted(str(p.relative_to(root / case)) for p in (root / case).rglob("*")
                      if p.is_file() and not p.name.startswith("outcome."))  # fmt: skip
        print(f"FILES {case} {' '.join(left)}", flush=True)
    # the case's communicator is out of step (abandoned collectives): it is dropped, never used again


for case in cases:
    run_case(case)
fresh = world.Dup()
data, parity = paths("sane", rank)
data.parent.mkdir(parents=True, exist_ok=True)
data.write_bytes(bytes(range(256)) * (rank + 1))
encode_group(fresh, data, parity, code="rs", timeout=GENEROUS)
print(f"SANE {rank} {assess_group(fresh, data, parity, code='rs', timeout=GENEROUS).intact}", flush=True)
