"""Asynchronous post-processing in the checkpointer: which executor runs each level, the head service, dCP L4.

The :class:`~ftkit.checkpoint.checkpointer.Checkpointer` hands every checkpoint's post-processing to one
:class:`PostManager`:

- ``inline_lN = 1`` (or no ``MPI_THREAD_MULTIPLE``): the checkpoint call runs the level's pipeline step
  itself.
- ``inline_lN = 0, head = 0``: a background thread per rank runs the same steps on duplicated communicators.
- ``inline_lN = 0, head = 1``: the rank sends its file paths to its node's head; a background thread waits for
  the answer. The heads (:func:`serve_as_head`) do the node's partner copies and group encodings with the
  heads of the other nodes of the node set (head ``j`` acting as member ``j``), and the L4 flushes.

Ordering and completeness: a checkpoint is committed to the manifest as soon as its primary (L1) files are
durable, with its post-processed level marked incomplete; :meth:`PostManager.start` starts the post-processing
only after that commit, and the level is marked complete (``pipeline.commit_levels``) only when it succeeded
on every rank. Every checkpoint call first waits for the previous post-processing (one in flight at most), so
entries are never pruned while their files are still being read.

Warm-up: the Reed-Solomon codec's kernels are compiled numba code, loaded at their first use (about 0.4 s
of CPU per process, far more than encoding a few MiB). When a job will take L3 checkpoints (``ckpt_l3``
set, or ``inline_l3 = 0``) with ``l3_code = rs``, the process that encodes -- the application rank, or the
head -- loads them when it starts (:func:`warm_up_codec`), so the first L3 checkpoint does not pay it (nor,
with one post-processing in flight at most, the checkpoint after it).

Differential L4 (``enable_dcp = 1``): the L4 step writes only the blocks that changed since the rank's
previous L4 checkpoint (:mod:`ftkit.checkpoint.dcp`) into ``glbl_dir/<exec_id>/l4dcp``; :class:`DcpStep`
rebuilds the file on recovery and makes that map the base of the rank's next differential write. A head
(a new process after a restart) starts a new block store with a full write.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from ..config import Config
from ..errors import CheckpointError, FtkitError, ProcessFailure
from ..storage._fsutil import make_dirs
from ..storage.format import copy_file
from ..topology import Topology
from . import pipeline
from .dcp import DcpWriter, restore_dcp
from .post import (
    Executor,
    HeadClient,
    HeadLinks,
    HeadServer,
    InlineExecutor,
    PostComms,
    PostJob,
    make_thread_executor,
    setup_heads,
)
from .recovery import Located, RecoveryStep

__all__ = ["PostManager", "serve_as_head", "enter_head_mode", "DcpStep", "flush_l4", "dcp_dir",
           "install_recovery_steps", "warm_up_codec", "will_encode"]

DCP_DIR = "l4dcp"
_WRITERS: dict[tuple[str, int], DcpWriter] = {}
_WRITERS_LOCK = threading.Lock()


# ------------------------------------------------------------------------------------------- dCP for L4

def dcp_dir(config: Config, exec_id: str) -> Path:
    """Directory of the differential L4 block stores and maps of run ``exec_id``."""
    return Path(config.glbl_dir) / exec_id / DCP_DIR


def _writer(directory: Path, rank: int, block_size: int) -> DcpWriter:
    with _WRITERS_LOCK:
        key = (str(directory), rank)
        w = _WRITERS.get(key)
        if w is None or w.block_size != block_size:
            w = _WRITERS[key] = DcpWriter(directory, rank, block_size)
        return w


def _l4_keep_ids(ctx: pipeline.PipelineContext) -> tuple[int, ...]:
    with ctx.store.lock:
        return tuple(e.id for e in ctx.store.manifest.checkpoints if e.complete(4))


def flush_dcp(ctx: pipeline.PipelineContext, job: pipeline.CheckpointJob) -> None:
    """L4 post-processing with ``enable_dcp``: write the blocks of this rank's file changed since last L4."""
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    w = _writer(dcp_dir(ctx.config, ctx.exec_id), ctx.rank, ctx.config.dcp_block_size)
    w.write(src, job.ckpt_id, keep_ids=_l4_keep_ids(ctx))


def flush_l4(ctx: pipeline.PipelineContext, job: pipeline.CheckpointJob) -> None:
    """L4 post-processing: a differential write with ``enable_dcp = 1``, else a full copy of the L1 file."""
    if ctx.config.enable_dcp:
        flush_dcp(ctx, job)
    else:
        pipeline.flush_to_pfs(ctx, job)


pipeline.POST_STEPS[4] = flush_l4


class DcpStep(RecoveryStep):
    """L4 with dCP: rebuild the rank's file from its block store into the L4 directory, then verify it."""

    level = 4

    def applies(self, entry: Any) -> bool:
        return entry.complete(4) and bool(entry.extra.get("dcp"))

    def locate(self, ctx: pipeline.PipelineContext, entry: Any, need: bool) -> Located:
        if not need:
            return Located()
        storage = ctx.level(4, entry.nodes)
        try:
            dst = storage.path(entry.id, ctx.rank)
            make_dirs(dst.parent)
            directory = dcp_dir(ctx.config, ctx.exec_id)
            restore_dcp(directory, ctx.rank, entry.id, dst)
            header = storage.verify(entry.id, ctx.rank, entry.files[ctx.rank].digest)
        except ProcessFailure:
            raise
        except (FtkitError, OSError) as exc:
            return Located(reason=f"differential L4: {exc}", level=4)
        # The next differential write of this process continues from this map instead of a full write.
        _writer(directory, ctx.rank, ctx.config.dcp_block_size).load_base(entry.id)
        return Located(storage, header, level=4)


def install_recovery_steps(steps: list[RecoveryStep]) -> None:
    """Insert :class:`DcpStep` before the plain L4 step of a recovery chain (in place, idempotent)."""
    if any(isinstance(s, DcpStep) for s in steps):
        return
    at = next((i for i, s in enumerate(steps) if s.level == 4), len(steps))
    steps.insert(at, DcpStep())


# --------------------------------------------------------------------------------------------- warm-up

def will_encode(config: Config, topology: Topology) -> bool:
    """Whether this job is set up to take Reed-Solomon L3 checkpoints (so its encoders should warm up).

    True when the job has L3 groups, ``l3_code = rs``, and L3 is scheduled (``ckpt_l3``) or asynchronous
    (``inline_l3 = 0``): a job that only ever calls ``checkpoint(3)`` inline loads the codec at that call.
    """
    return (bool(topology.groups) and config.l3_code == "rs"
            and (bool(config.ckpt_l3) or not config.inline(3)))


def warm_up_codec(group_size: int) -> float:
    """Load the Reed-Solomon kernels and prepare the code of ``group_size`` members; return the seconds.

    Encodes one tiny block, so the first real encoding runs at full speed. Local (not collective).
    """
    from ..codec import RSCode

    t0 = time.perf_counter()
    k = max(2, int(group_size))
    data = [np.zeros(64, np.uint8) for _ in range(k)]
    RSCode(k, k).encode_into(data, [np.empty(64, np.uint8)], parity_indices=[0])
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------------------------- heads

def _head_request(ctx: pipeline.PipelineContext, job: pipeline.CheckpointJob) -> dict[str, Any]:
    """What the head needs to do this rank's share of ``job``: file paths, sizes, code, dCP settings."""
    level = job.post_levels[0]
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    req: dict[str, Any] = {"id": job.ckpt_id, "level": level, "rank": ctx.rank, "src": str(src),
                           "size": job.files[ctx.rank].size if job.files else -1,
                           "chunk": min(ctx.config.io_chunk_bytes, 16 << 20)}
    if level == 4:
        req["dst"] = str(ctx.level(4, job.nodes).path(job.ckpt_id, ctx.rank))
        if ctx.config.enable_dcp:
            req["dcp_dir"] = str(dcp_dir(ctx.config, ctx.exec_id))
            req["dcp_block"] = ctx.config.dcp_block_size
            req["keep"] = list(_l4_keep_ids(ctx))
    else:
        from .redundancy import group_names, l3_tag

        req["dst"] = str(ctx.level(level, job.nodes).path(job.ckpt_id, ctx.rank))
        req["code"] = ctx.config.l3_code
        req["tag"] = l3_tag(ctx.exec_id, job.ckpt_id)
        req["names"] = group_names(ctx.topology, ctx.topology.group_of()) if ctx.topology.groups else []
    return req


def handle_node(requests: list[dict[str, Any]], links: HeadLinks) -> None:
    """A head's work for one checkpoint: its node's ranks' requests, in rank order (collective over heads).

    Raises
    ------
    CheckpointError
        If the level needs groups but the job has none.
    StorageError
        If a file is missing or cannot be written.
    """
    level = int(requests[0]["level"])
    if level == 4:
        for req in requests:
            if "dcp_dir" in req:
                w = _writer(Path(req["dcp_dir"]), int(req["rank"]), int(req["dcp_block"]))
                w.write(req["src"], int(req["id"]), keep_ids=tuple(int(k) for k in req.get("keep", ())))
            else:
                dst = Path(req["dst"])
                make_dirs(dst.parent)
                copy_file(req["src"], dst, chunk_bytes=int(req["chunk"]))
        return
    if links.head_sets == MPI.COMM_NULL:
        raise CheckpointError(f"L{level} in head mode needs at least group_size nodes")
    from ..storage.encoded import encode_group
    from ..storage.partner import partner_copy

    # Position p of every node of the node set forms one group: this head is member j of each (its node's
    # index in the set), so the heads run the groups one after the other, in the same order.
    for req in requests:
        if level == 2:
            partner_copy(links.head_sets, req["src"], req["dst"], chunk_size=int(req["chunk"]))
        elif level == 3:
            encode_group(links.head_sets, req["src"], req["dst"], code=req["code"], tag=req["tag"],
                         names=req.get("names") or None)
        else:
            raise CheckpointError(f"heads cannot post-process level {level}")


def serve_as_head(links: HeadLinks, topology: Topology, config: Config) -> int:
    """Run this head's service until its node's ranks finalize and return 0.

    If an application rank of the node dies, the head reports it on stderr and exits the process at once
    with status 1 (there is nobody left to serve).
    """
    members = [topology.app_world_ranks[r] for r in topology.node_ranks(topology.node_id)]
    try:
        server = HeadServer(links, members, handle_node, timeout=config.failure_timeout)
        if will_encode(config, topology) and links.head_sets != MPI.COMM_NULL:
            warm_up_codec(topology.group_size)
        server.serve()
    except ProcessFailure as exc:
        print(f"ftkit head (world rank {links.link.Get_rank()}, node {topology.node_id}): {exc}",
              file=sys.stderr, flush=True)
        # Its ranks are dead: freeing communicators or finalizing MPI with failed peers can block, and
        # nobody is left to serve, so the head leaves at once.
        sys.stdout.flush()
        os._exit(1)
    links.free()
    return 0


def enter_head_mode(world: Any, topology: Topology, config: Config) -> HeadLinks:
    """Build head mode's communicators (collective over ``world``); heads serve and exit, never returning.

    A head leaves through ``sys.exit`` after its node's ranks finalized (as FTI's heads do); MPI is finalized
    at interpreter exit.
    """
    links = setup_heads(world, topology)
    if links.is_head:
        sys.exit(serve_as_head(links, topology, config))
    return links


# ------------------------------------------------------------------------------------- the post manager

class PostManager:
    """Runs the checkpointer's post-processing with the executor its configuration asks for.

    Parameters
    ----------
    ctx
        The checkpointer's pipeline context (application ranks).
    links
        Head-mode communicators (:func:`enter_head_mode`), or None when ``head = 0``.

    Collective over ``ctx.comm`` (the thread executor duplicates communicators).
    """

    def __init__(self, ctx: pipeline.PipelineContext, links: HeadLinks | None = None) -> None:
        self.ctx = ctx
        cfg = ctx.config
        timeout = cfg.failure_timeout
        self.client = HeadClient(links, timeout) if links is not None else None
        self.background: Executor | None = None
        if any(not cfg.inline(lv) for lv in (2, 3, 4)):
            self.background = make_thread_executor(PostComms(ctx.comm), timeout)
        if links is None and will_encode(cfg, ctx.topology):
            warm_up_codec(ctx.topology.group_size)  # heads warm up themselves (serve_as_head)
        self.inline = InlineExecutor(PostComms(ctx.comm), timeout)
        self._staged: pipeline.CheckpointJob | None = None
        #: Seconds checkpoint calls spent waiting for the previous post-processing, and how many waited
        #: (instrumentation: a queue that never drains means the interval is shorter than the work).
        self.queue_wait_s = 0.0
        self.queue_waits = 0
        if self.client is not None:
            atexit.register(self.client.finish)  # heads must learn that this rank is gone, whatever happens

    @property
    def asynchronous(self) -> bool:
        """Whether some level's post-processing runs in the background."""
        return self.background is not None and self.background.asynchronous

    def run_post(self, job: pipeline.CheckpointJob) -> dict[int, bool]:
        """Replace ``pipeline.post_process`` for ``job``: run inline now, or stage it for :meth:`start`.

        Always waits for the previous checkpoint's post-processing first (and raises its failure).
        Returns the levels completed now.
        """
        busy, t0 = self.busy, time.perf_counter()
        try:
            self.wait()
        finally:
            if busy:
                self.queue_wait_s += time.perf_counter() - t0
                self.queue_waits += 1
        cfg = self.ctx.config
        if 4 in job.post_levels and cfg.enable_dcp:
            job.extra["dcp"] = True
        if any(lv in (2, 3) for lv in job.post_levels):
            # The entry is committed before background work runs: record what recovery needs now.
            job.extra.setdefault("group_size", self.ctx.topology.group_size)
            if 3 in job.post_levels:
                job.extra.setdefault("l3_code", cfg.l3_code)
        if not job.post_levels:
            return {}
        background = [lv for lv in job.post_levels if not cfg.inline(lv)]
        if not background:
            return pipeline.post_process(self.ctx, job)
        if not self.asynchronous:
            if self.client is None:
                return pipeline.post_process(self.ctx, job)
            # Head mode without MPI_THREAD_MULTIPLE: the head still does the work; this rank waits for it.
            self.inline.submit(self._job(job, commit=False))
            return {lv: True for lv in job.post_levels}
        self._staged = job
        return {}

    def _job(self, job: pipeline.CheckpointJob, commit: bool = True) -> PostJob:
        client = self.client

        def run(comms: PostComms) -> None:
            if client is not None:
                client.request(_head_request(self.ctx, job))
                return
            tctx = dataclasses.replace(self.ctx, comm=comms.app)
            for lv in job.post_levels:
                pipeline.POST_STEPS[lv](tctx, job)

        def finish(comms: PostComms) -> None:
            tctx = dataclasses.replace(self.ctx, comm=comms.app)
            pruned = pipeline.commit_levels(tctx, job.ckpt_id, {lv: True for lv in job.post_levels})
            pipeline.remove_checkpoints(tctx, pruned)

        return PostJob(job.ckpt_id, max(job.post_levels), run=run, commit=finish if commit else None)

    def start(self, job: pipeline.CheckpointJob) -> None:
        """Start the staged background post-processing of ``job`` (after its manifest entry is committed)."""
        staged, self._staged = self._staged, None
        if staged is None or staged.ckpt_id != job.ckpt_id:
            return
        assert self.background is not None
        self.background.submit(self._job(staged))

    def discard(self) -> None:
        """Forget a staged job whose checkpoint failed before its commit."""
        self._staged = None

    @property
    def busy(self) -> bool:
        """Whether post-processing is in flight."""
        return self.background is not None and self.background.busy

    def failure_flag(self) -> float:
        """1.0 when finished background work failed on this rank, else 0.0 (for the snapshot agreement)."""
        return 1.0 if self.background is not None and self.background.failed else 0.0

    def wait(self, timeout: float | None = None) -> None:
        """Block until no post-processing is in flight; raise its failure (the same on every rank)."""
        if self.background is not None:
            self.background.wait(timeout)

    def close(self) -> None:
        """Release the executors and tell the head this rank is done. Never raises."""
        if self.background is not None:
            try:
                self.background.close()
            except Exception:  # noqa: BLE001 - already reported by wait(); closing must go on
                pass
        if self.client is not None:
            self.client.finish()
