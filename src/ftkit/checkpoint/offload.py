"""Asynchronous post-processing in the checkpointer: which executor runs each level's post-processing.

The :class:`~ftkit.checkpoint.checkpointer.Checkpointer` hands every checkpoint's post-processing to one
:class:`PostManager`:

- ``inline_lN = 1`` (or no ``MPI_THREAD_MULTIPLE``): the checkpoint call runs the level's pipeline step
  itself.
- ``inline_lN = 0, head = 0``: a background thread per rank runs the same steps (read from the level table
  :data:`ftkit.checkpoint.levels.LEVELS`) on duplicated communicators (:mod:`.post`).
- ``inline_lN = 0, head = 1``: the rank sends its file paths to its node's head; a background thread waits for
  the answer (:mod:`.head`).

Ordering and completeness: a checkpoint is committed to the manifest as soon as its primary (L1) files are
durable, with its post-processed level marked incomplete; :meth:`PostManager.start` starts the post-processing
only after that commit, and the level is marked complete (``pipeline.commit_levels``) only when it succeeded
on every rank. Every checkpoint call first waits for the previous post-processing (one in flight at most), so
entries are never pruned while their files are still being read.

Removal of pruned checkpoints: a checkpoint pruned by a commit is no longer in the committed manifest, so its
files are garbage from that moment; :meth:`PostManager.remove_later` hands them to a removal thread kept for
the run (the unlinks and directory removals cost tens of milliseconds on the critical path, and starting a
thread per call 4-13 ms on a loaded machine: issue 37) and returns at once. Removals run one at a time, in
order; :meth:`PostManager.wait` and :meth:`PostManager.close` (``wait()``, ``finalize()``) wait for them, and
a process leaving normally finishes them first (the thread pool of :mod:`concurrent.futures` drains its
queue at interpreter exit). A crash during the removal leaves some of the pruned checkpoint's files behind:
never read (no manifest lists them), removed with the run's directories by ``finalize()``.

Durability of inline redundancy (``redundancy_sync = background``, the default, when no level runs in the
background): the L2 partner copies and L3 parity files made in the checkpoint call are committed under their
final names before their fsync, which a :class:`~ftkit.storage._fsutil.BackgroundSyncs` thread runs after the
call; the entry lists those levels as ``unsynced``, so the previous checkpoint complete at them is not pruned.
The next checkpoint call settles them in its own commit: once its primary file is written, every rank waits
for its batches (:meth:`PostManager.sync_flags`: by then they ran beside the call's write, so the wait is
short or none) and says whether its files are durable, with its file's size and digest
(:func:`~ftkit.checkpoint.pipeline.agree_written`); the manifest write that commits the new checkpoint clears
those levels (or, if a rank cannot vouch for them, marks them incomplete) and prunes the checkpoint kept
meanwhile. The commit of the new checkpoint needs nothing of the old one's fsyncs; it only prunes what they
allowed. (Until issue 37 the call started by waiting for them and writing the manifest once more for them,
130-170 ms of an L2/L3 call repeated at once.) A crash before that commit leaves the previous manifest: the
older checkpoint is still kept.
"""

from __future__ import annotations

import atexit
import dataclasses
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from ..errors import FtkitError
from ..storage import levels as table
from ..storage._fsutil import BackgroundSyncs
from ..storage.manifest import CheckpointEntry
from . import events, pipeline
from .affinity import pin_application
from .contract import CheckpointJob, PipelineContext
from .head import HeadClient, HeadLinks, head_request
from .levels import LEVELS
from .post import Executor, InlineExecutor, PostComms, PostJob, make_thread_executor
from .warmup import warm_up_codec, will_encode

__all__ = ["PostManager"]


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

    def __init__(self, ctx: PipelineContext, links: HeadLinks | None = None) -> None:
        self.ctx = ctx
        cfg = ctx.config
        timeout = cfg.failure_timeout
        pin_application(cfg)  # [ftkit] reserve_core: off the core kept for the FT thread or the heads
        self.client = HeadClient(links, timeout) if links is not None else None
        self.background: Executor | None = None
        if any(not table.inline(cfg, lv) for lv in table.numbers()):
            self.background = make_thread_executor(PostComms(ctx.comm), timeout)
        if links is None and will_encode(cfg, ctx.topology):
            warm_up_codec(ctx.topology.group_size)  # heads warm up themselves (serve_as_head)
        self.inline = InlineExecutor(PostComms(ctx.comm), timeout)
        self._staged: CheckpointJob | None = None
        #: Background fsync batches of this rank's L2/L3 files, by checkpoint id (see :meth:`sync_flags`).
        self._syncs: dict[int, BackgroundSyncs] = {}
        #: Seconds checkpoint calls spent waiting for the previous post-processing, and how many waited
        #: (instrumentation: a queue that never drains means the interval is shorter than the work).
        self.queue_wait_s = 0.0
        self.queue_waits = 0
        #: The removal thread of pruned checkpoints' files, started by the first removal and kept (see
        #: :meth:`remove_later`), and the removals queued to it and not yet known to be over.
        self._remover: ThreadPoolExecutor | None = None
        self._removals: deque[Future[None]] = deque()
        if self.client is not None:
            atexit.register(self.client.finish)  # heads must learn that this rank is gone, whatever happens

    @property
    def asynchronous(self) -> bool:
        """Whether some level's post-processing runs in the background."""
        return self.background is not None and self.background.asynchronous

    def run_post(self, job: CheckpointJob) -> dict[int, bool]:
        """Replace ``pipeline.post_process`` for ``job``: run inline now, or stage it for :meth:`start`.

        Always waits for the previous checkpoint's post-processing first (and raises its failure).
        Returns the levels completed now.
        """
        busy, t0 = self.busy, time.perf_counter()
        try:
            self._wait_post()  # not for the removal of pruned files: it overlaps this call
        finally:
            if busy:
                self.queue_wait_s += time.perf_counter() - t0
                self.queue_waits += 1
        cfg = self.ctx.config
        # The entry may be committed before background work runs: record what recovery needs now.
        pipeline.prepare_job(self.ctx, job)
        if not job.post_levels:
            return {}
        background = [lv for lv in job.post_levels if not table.inline(cfg, lv)]
        if not background or not self.asynchronous and self.client is None:
            return self._post_now(job)
        if not self.asynchronous:
            # Head mode without MPI_THREAD_MULTIPLE: the head still does the work; this rank waits for it.
            self.inline.submit(self._job(job, commit=False))
            return {lv: True for lv in job.post_levels}
        self._staged = job
        return {}

    def _post_now(self, job: CheckpointJob) -> dict[int, bool]:
        """Run ``job``'s post-processing in this call. With ``redundancy_sync = background`` and no background
        executor (whose commits the settling of ``unsynced`` levels must not cross), the fsyncs of the levels
        with ``background_fsync`` go to a background batch and those levels are committed as ``unsynced``."""
        deferred = [lv for lv in job.post_levels if LEVELS[lv].background_fsync]
        if not deferred or self.background is not None or self.ctx.config.redundancy_sync != "background":
            return pipeline.post_process(self.ctx, job)
        job.syncs = BackgroundSyncs()
        try:
            done = pipeline.post_process(self.ctx, job)
        except BaseException:
            job.syncs.seal()
            raise
        job.extra["unsynced"] = [lv for lv in deferred if done.get(lv)]
        self._syncs[job.ckpt_id] = job.syncs
        return done

    def sync_flags(self) -> dict[int, bool]:
        """Whether this rank's files of each checkpoint of the manifest with ``unsynced`` levels are durable
        (id → flag), for the current call's commit to settle them (see the module doc). Not collective.

        Waits for this rank's fsync batches of those checkpoints (its own fsyncs, no peer: no deadline). A
        rank without the batch of an entry (a restarted or replacement process) cannot vouch for its files:
        False. Batches of checkpoints no longer listed (pruned, settled) are forgotten.
        """
        ids = sorted(e.id for e in self.ctx.store.manifest.checkpoints if e.unsynced_levels)
        self._syncs = {i: b for i, b in self._syncs.items() if i in ids}  # the others are sealed: they end
        return {i: (b := self._syncs.get(i)) is not None and b.wait() is None for i in ids}

    def remove_later(self, entries: Sequence[CheckpointEntry]) -> None:
        """Delete this rank's files of ``entries`` in the background, after the previous removals (not
        collective); returns at once unless two removals are already queued (then waits for the older).

        Only for entries pruned from the committed manifest (their files are garbage). The fault-injection
        stage ``"before_remove"`` runs in the removal thread before anything is deleted.
        """
        while self._removals and self._removals[0].done():
            self._removals.popleft()
        if not entries:
            return
        if len(self._removals) >= 2:  # removals slower than checkpoints: do not let them pile up
            self._removals.popleft().exception()  # waits; a removal never fails a checkpoint (best effort)
        if self._remover is None:
            self._remover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ftkit-prune")
        ctx, pruned = self.ctx, list(entries)

        def run() -> None:
            ctx.hook("before_remove")
            pipeline.remove_checkpoints(ctx, pruned)

        try:
            self._removals.append(self._remover.submit(run))
        except RuntimeError:  # the interpreter is shutting down (no new threads): remove them now, here
            run()

    def wait_removal(self) -> None:
        """Block until every queued removal of pruned checkpoints is over.

        The wait is on this process's own unlinks (no peer): it has no deadline.
        """
        while self._removals:
            self._removals.popleft().exception()  # waits; a removal is best effort: nothing to raise

    def _job(self, job: CheckpointJob, commit: bool = True) -> PostJob:
        client = self.client

        def run(comms: PostComms) -> None:
            if client is not None:
                client.request(head_request(self.ctx, job))
                return
            tctx = dataclasses.replace(self.ctx, comm=comms.app)
            for lv in job.post_levels:
                step = LEVELS[lv].post
                assert step is not None, f"level {lv} has no post-processing"
                step(tctx, job)

        def done(error: BaseException | None) -> None:
            if error is not None:
                # The level stays incomplete (on every rank): none of its files may be left behind.
                self._remove_post_files(job)

        def finish(comms: PostComms) -> None:
            tctx = dataclasses.replace(self.ctx, comm=comms.app)
            pruned = pipeline.commit_levels(tctx, job.ckpt_id, {lv: True for lv in job.post_levels})
            pipeline.remove_checkpoints(tctx, pruned)
            events.level_completed(tctx, job.ckpt_id, job.post_levels)

        return PostJob(job.ckpt_id, max(job.post_levels), run=run, commit=finish if commit else None,
                       on_done=done)

    def _remove_post_files(self, job: CheckpointJob) -> None:
        for lv in job.post_levels:
            try:
                self.ctx.level(lv, job.nodes).remove(job.ckpt_id, self.ctx.rank)
            except (FtkitError, OSError):
                pass  # best effort: the manifest never lists this level as complete anyway

    def start(self, job: CheckpointJob) -> None:
        """Start the staged background post-processing of ``job`` (after its manifest entry is committed)."""
        if job.syncs is not None:
            job.syncs.seal()  # the call's own work is over: the L2/L3 fsyncs may start
        staged, self._staged = self._staged, None
        if staged is None or staged.ckpt_id != job.ckpt_id:
            return
        assert self.background is not None
        self.background.submit(self._job(staged))

    def discard(self) -> None:
        """Forget a staged job whose checkpoint failed before its commit."""
        self._staged = None
        for batch in self._syncs.values():
            batch.seal()

    @property
    def busy(self) -> bool:
        """Whether post-processing is in flight."""
        return self.background is not None and self.background.busy

    def failure_flag(self) -> float:
        """1.0 when finished background work failed on this rank, else 0.0 (for the snapshot agreement)."""
        return 1.0 if self.background is not None and self.background.failed else 0.0

    def wait(self, timeout: float | None = None) -> None:
        """Block until no post-processing (and no removal of pruned checkpoints) is in flight; raise the
        post-processing's failure (the same on every rank)."""
        self.wait_removal()
        self._wait_post(timeout)

    def _wait_post(self, timeout: float | None = None) -> None:
        if self.background is not None:
            self.background.wait(timeout)

    def close(self) -> None:
        """Finish the removal of pruned checkpoints, release the executors and tell the head this rank is
        done. Never raises."""
        self.wait_removal()
        if self._remover is not None:
            self._remover.shutdown(wait=True)
            self._remover = None
        if self.background is not None:
            try:
                self.background.close()
            except Exception:  # noqa: BLE001 - already reported by wait(); closing must go on
                pass
        if self.client is not None:
            self.client.finish()
