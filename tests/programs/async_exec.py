"""Drive the post-processing executors directly: ordering, asynchrony, failure reporting, head mode.

Each rank writes a file per checkpoint; the post-processing "flushes" it into ``<dir>/l4`` (slowly, with a
sleep) and the commit records the complete checkpoint in ``<dir>/manifest.json``. Prints one JSON line per
application rank with what it observed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from mpi4py import MPI

from ftkit.checkpoint.head import HeadClient, HeadServer, setup_heads
from ftkit.checkpoint.post import InlineExecutor, PostComms, PostJob, make_thread_executor
from ftkit.errors import CheckpointError
from ftkit.topology import detect_node_ids, plan_topology

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["inline", "thread", "head"], required=True)
p.add_argument("--dir", required=True)
p.add_argument("--work-seconds", type=float, default=0.5)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--fail-id", type=int, default=-1)
p.add_argument("--count", type=int, default=3)
args = p.parse_args()
root = Path(args.dir)
world = MPI.COMM_WORLD
head = 1 if args.mode == "head" else 0
topo = plan_topology(detect_node_ids(world), world.Get_rank(), head=head, ckpt_dir=root, need_groups=False)


def flush(rank: int, ckpt_id: int, src: str) -> None:
    # An asynchronous flush waits until its rank has looked at the manifest after submit() returned: this
    # shows deterministically that the submit returns before the work is done (with the first flush alone
    # gated, a main thread descheduled for work_seconds on a busy machine could see checkpoint 3 complete).
    go = root / f"go-c{ckpt_id}-r{rank}"
    deadline = time.monotonic() + 60
    while args.mode != "inline" and not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(args.work_seconds)
    if rank == args.fail_rank and ckpt_id == args.fail_id:
        raise OSError(f"injected flush failure on rank {rank}")
    dst = root / "l4" / f"c{ckpt_id}-r{rank}"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def commit(comms, ckpt_id: int) -> None:
    if comms.app.Get_rank() == 0:
        tmp = root / "manifest.json.tmp"
        tmp.write_text(json.dumps({"complete": ckpt_id}))
        os.replace(tmp, root / "manifest.json")
    comms.app.Barrier()


def complete() -> int:
    try:
        return json.loads((root / "manifest.json").read_text())["complete"]
    except FileNotFoundError:
        return 0


if head:
    links = setup_heads(world, topo)
    if links.is_head:
        members = [topo.app_world_ranks[r] for r in topo.node_ranks(topo.node_id)]

        def handler(requests, _links):
            for req in requests:
                flush(req["rank"], req["id"], req["path"])

        served = HeadServer(links, members, handler, timeout=60).serve()
        print(json.dumps({"head": world.Get_rank(), "served": served}), flush=True)
        links.free()
        sys.exit(0)
    comm = links.app
    client = HeadClient(links, timeout=60)
    ex = make_thread_executor(PostComms(comm), timeout=60)
else:
    comm = world.Dup()
    comms = PostComms(comm)
    if args.mode == "thread":
        ex = make_thread_executor(comms, timeout=60)
    else:
        ex = InlineExecutor(comms, timeout=60)

rank = comm.Get_rank()
report = {"rank": rank, "size": comm.Get_size(), "world": world.Get_rank(), "executor": ex.name,
          "asynchronous": ex.asynchronous,
          "submit_s": [], "complete_after_submit": [], "errors": []}
for cid in range(1, args.count + 1):
    src = root / f"l1-c{cid}-r{rank}"
    src.write_bytes(bytes([cid, rank]) * 1000)
    def run(comms, c=cid, s=str(src)):
        if head:
            client.request({"id": c, "level": 4, "rank": rank, "path": s})
        else:
            flush(comms.app.Get_rank(), c, s)

    job = PostJob(cid, 4, run=run, commit=lambda comms, c=cid: commit(comms, c))
    t0 = time.monotonic()
    try:
        ex.submit(job)
    except CheckpointError as exc:
        report["errors"].append([cid, "submit", str(exc)])
        if ex.asynchronous:          # the error was the previous checkpoint's: this one is still to start
            ex.submit(job)
    report["submit_s"].append(round(time.monotonic() - t0, 3))
    report["complete_after_submit"].append(complete())
    (root / f"go-c{cid}-r{rank}").touch()
    comm.Barrier()
try:
    ex.wait()
except CheckpointError as exc:
    report["errors"].append([args.count, "wait", str(exc)])
report["complete_at_end"] = complete()
ex.close()
if head:
    client.finish()
report["l4_files"] = sorted(os.listdir(root / "l4")) if rank == 0 else []
print(json.dumps(report), flush=True)
