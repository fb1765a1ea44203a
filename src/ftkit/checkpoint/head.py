"""Head mode (``head = 1``): the first process of each node serves its node's post-processing.

The application ranks hand each checkpoint's request to their node's head (:class:`HeadClient`, run by a
post-processing executor of :mod:`.post`); the head (:class:`HeadServer`, :func:`serve_as_head`) gathers its
node's requests and does the work of the level named in them -- read from the level table
:data:`ftkit.checkpoint.levels.LEVELS` (``head_request`` on the application side, ``head_work`` on the head)
-- with the heads of the other nodes of its node set (head ``j`` acting as group member ``j``), then the
heads agree on the outcome and answer. Only application ranks write the manifest.

A head that dies, or a peer that dies during the heads' work, is reported to the application ranks as
:class:`~ftkit.errors.ProcessFailure`; any other failure of the work as
:class:`~ftkit.errors.CheckpointError`.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import jobstatus, uncaught
from .._wait import deadline_after, poll_until
from ..config import Config
from ..errors import CheckpointError, ProcessFailure
from ..failure.detect import ft_dup, is_failure_error
from ..topology import Topology, plan_node_sets
from .affinity import pin_head
from .contract import CheckpointJob, PipelineContext
from .levels import LEVELS
from .post import DEFAULT_TIMEOUT, agree_outcome, lower_priority, post_nice
from .warmup import warm_up_codec, will_encode

__all__ = ["HeadLinks", "setup_heads", "HeadClient", "HeadServer", "HeadHandler", "head_request",
           "handle_node", "serve_as_head", "enter_head_mode"]

_TAG_REQUEST = 7401
_TAG_DONE = 7402
_TAG_FINISH = 7403
_MAX_SLEEP = 5e-3  # s; poll back-off cap: idle waiters leave the (shared) cores to the computation


def _send_json(comm: MPI.Comm, obj: dict[str, Any], dest: int, tag: int) -> None:
    # JSON, not pickle: a head only ever parses plain data from its peers.
    comm.Send([np.frombuffer(json.dumps(obj).encode(), np.uint8), MPI.BYTE], dest=dest, tag=tag)


def _recv_json(comm: MPI.Comm, status: MPI.Status) -> dict[str, Any]:
    buf = np.empty(status.Get_count(MPI.BYTE), np.uint8)
    comm.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=status.Get_tag())
    return json.loads(buf.tobytes().decode()) if buf.size else {}


@dataclass
class HeadLinks:
    """Communicators of a job with heads (built collectively by every world rank with :func:`setup_heads`).

    Attributes
    ----------
    link
        Duplicate of the world communicator: application ranks and heads exchange requests on it.
    app
        The application ranks (``Checkpointer.comm``); ``COMM_NULL`` on heads.
    heads
        All heads, in node order; ``COMM_NULL`` on application ranks.
    head_sets
        On heads: for each node set (L2/L3 groups span one node set), the heads of its nodes in node order,
        so head ``j`` acts as member ``j`` of every group of the set; ``COMM_NULL`` on application ranks or
        when the job has no groups.
    is_head
        Whether this process is a head.
    my_head
        World rank of this rank's head (itself on a head).
    """

    link: MPI.Comm
    app: MPI.Comm
    heads: MPI.Comm
    head_sets: MPI.Comm
    is_head: bool
    my_head: int

    def free(self) -> None:
        """Free every communicator this object holds (local)."""
        for c in (self.head_sets, self.heads, self.app, self.link):
            if c is not None and c != MPI.COMM_NULL:
                try:
                    c.Free()
                except MPI.Exception:
                    pass


def setup_heads(world: MPI.Intracomm, topology: Any) -> HeadLinks:
    """Build the communicators of head mode (collective over ``world``, heads included).

    ``topology`` is the :class:`ftkit.topology.Topology` of this rank (``head_world_ranks`` not empty).
    Application ranks keep their relative order in ``app``; heads are ordered by node.
    """
    w = world.Get_rank()
    heads = list(topology.head_world_ranks)
    is_head = w in heads
    node = topology.node_id
    link = ft_dup(world)
    app = world.Split(MPI.UNDEFINED if is_head else 0, w)
    head_comm = world.Split(0 if is_head else MPI.UNDEFINED, node)
    # Node sets: every L2/L3 group lies within one node set (see ftkit.topology), one member per node.
    set_of_node: dict[int, int] = {}
    if topology.node_count >= max(2, topology.group_size):
        for si, nodes in enumerate(plan_node_sets(topology.node_count, topology.group_size)):
            for n in nodes:
                set_of_node[n] = si
    color = set_of_node.get(node, MPI.UNDEFINED) if is_head else MPI.UNDEFINED
    head_sets = world.Split(color, node)
    for c in (head_comm, head_sets):  # ``app`` keeps the application's error handler
        if c != MPI.COMM_NULL:
            c.Set_errhandler(MPI.ERRORS_RETURN)
    return HeadLinks(link, app, head_comm, head_sets, is_head, heads[node] if heads else w)


class HeadClient:
    """Application side of head mode: hand a checkpoint's request to the node's head and wait for its answer.

    Used as the work of a job (``PostJob.run``) run by a :class:`ThreadExecutor` (asynchronous: the thread
    waits for the head while the application computes) or an :class:`InlineExecutor`.

    Parameters
    ----------
    links
        From :func:`setup_heads` (on an application rank).
    timeout
        Deadline (s) for the head's answer.
    """

    def __init__(self, links: HeadLinks, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.links = links
        self.timeout = float(timeout)
        self.finished = False

    def request(self, request: dict[str, Any]) -> None:
        """Send ``request`` (JSON-serializable, with ``id`` and ``level``) to the head; wait for the answer.

        Raises
        ------
        CheckpointError
            If the heads report a failure.
        ProcessFailure
            If the head died, or the heads report that a process failed during the work.
        TimeoutFailure
            If the head did not answer in time.
        """
        head, link = self.links.my_head, self.links.link
        what = (f"waiting for the node's head (world rank {head}) to post-process checkpoint "
                f"{request.get('id')}")
        status = MPI.Status()
        try:
            _send_json(link, request, head, _TAG_REQUEST)
            poll_until(lambda: bool(link.Iprobe(source=head, tag=_TAG_DONE, status=status)),
                       deadline_after(self.timeout), what, max_sleep=_MAX_SLEEP, growth=2.0)
            answer = _recv_json(link, status)
        except MPI.Exception as exc:
            raise ProcessFailure(f"{what}: the head failed ({exc})", [head]) from exc
        if answer.get("id") != request.get("id"):
            raise CheckpointError(f"head answered for checkpoint {answer.get('id')}, expected "
                                  f"{request.get('id')}: protocol error")
        if answer.get("process_failure"):
            raise ProcessFailure(f"{what}: a head or a peer failed: {answer.get('error', 'unknown error')}")
        if not answer.get("ok"):
            raise CheckpointError(f"the heads failed: {answer.get('error', 'unknown error')}")

    def finish(self) -> None:
        """Tell the head this rank is done (idempotent; the head exits when all its ranks are)."""
        if self.finished:
            return
        self.finished = True
        try:
            _send_json(self.links.link, {"rank": self.links.app.Get_rank()}, self.links.my_head, _TAG_FINISH)
        except MPI.Exception:
            pass


#: A head's work for one checkpoint: the requests of its node's ranks (in rank order) and the links.
HeadHandler = Callable[[list[dict[str, Any]], HeadLinks], None]


class HeadServer:
    """A head's service loop: gather its node's requests, do the work with the other heads, answer.

    Parameters
    ----------
    links
        From :func:`setup_heads` (on a head).
    node_world_ranks
        World ranks of the application ranks of this head's node.
    handler
        Does the node's post-processing for one checkpoint (collective over the heads that take part).
    timeout
        Deadline (s) for the heads' agreement on each checkpoint.
    nice
        Nice increment :meth:`serve` applies to the head (default :func:`post_nice`; 0 keeps its priority).

    The heads agree on the outcome (so a failure on one node is reported on every node) and answer their
    ranks; the application ranks then agree among themselves and commit the manifest, which only they write.
    """

    def __init__(self, links: HeadLinks, node_world_ranks: list[int], handler: HeadHandler,
                 timeout: float = DEFAULT_TIMEOUT, nice: int | None = None) -> None:
        self.links = links
        self.members = list(node_world_ranks)
        self.handler = handler
        self.timeout = float(timeout)
        self.nice = post_nice() if nice is None else int(nice)
        self.served = 0

    def _node_failed(self) -> list[int]:
        try:
            self.links.link.Ack_failed()
            group = self.links.link.Get_failed()
        except MPI.Exception:
            return []
        try:
            n = group.Get_size()
            if not n:
                return []
            world_failed = MPI.Group.Translate_ranks(group, list(range(n)), self.links.link.Get_group())
        finally:
            group.Free()
        return [r for r in world_failed if r in self.members]

    def _wait_message(self, status: MPI.Status) -> None:
        """Wait without deadline for the next message, checking every second that the node's ranks live."""
        last_check = [time.monotonic()]

        def arrived() -> bool:
            try:
                if self.links.link.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
                    return True
            except MPI.Exception as exc:
                if not is_failure_error(exc):
                    raise
            if time.monotonic() - last_check[0] > 1.0:
                last_check[0] = time.monotonic()
                dead = self._node_failed()
                if dead:
                    raise ProcessFailure(f"application rank(s) at world rank {dead} of this head's node "
                                         "failed; the head stops", dead)
            return False

        poll_until(arrived, None, "head waiting for requests", max_sleep=_MAX_SLEEP, growth=2.0)

    def serve(self) -> int:
        """Serve until every application rank of the node has finished; return the number of checkpoints.

        The wait for the next request has no deadline (the application computes as long as it needs between
        checkpoints), but the head checks every second that its node's ranks are alive; the work on a request
        and the heads' agreement have the executor's deadline.

        Raises
        ------
        ProcessFailure
            If an application rank of the node dies (the head then has nobody left to serve).
        """
        lower_priority(self.nice)  # the head's work uses the slack of its node, after the application
        link = self.links.link
        pending: dict[int, dict[int, dict[str, Any]]] = {}
        finished: set[int] = set()
        status = MPI.Status()
        while len(finished) < len(self.members):
            self._wait_message(status)
            src, tag = status.Get_source(), status.Get_tag()
            msg = _recv_json(link, status)
            if tag == _TAG_FINISH:
                finished.add(src)
            elif tag == _TAG_REQUEST:
                batch = pending.setdefault(int(msg["id"]), {})
                batch[src] = msg
                if len(batch) == len(self.members):
                    self._process([batch[w] for w in self.members])
                    del pending[int(msg["id"])]
        return self.served

    def _process(self, requests: list[dict[str, Any]]) -> None:
        ckpt_id, level = int(requests[0]["id"]), int(requests[0]["level"])
        what = f"head post-processing of checkpoint {ckpt_id} (level {level})"
        error, failed = "", False
        try:
            self.handler(requests, self.links)
        except Exception as exc:  # reported to the node's ranks and the other heads
            error = f"{type(exc).__name__}: {exc}"
            failed = isinstance(exc, ProcessFailure) or (isinstance(exc, MPI.Exception)
                                                         and is_failure_error(exc))
        try:
            flags = agree_outcome(self.links.heads, not error, self.timeout, what)
            if not error and not all(flags):
                error = f"failed on the head(s) of node(s) {[n for n, f in enumerate(flags) if not f]}"
        except ProcessFailure as exc:
            error, failed = error or str(exc), True
        self.served += 1
        # ``process_failure``: the ranks raise ProcessFailure (a process died), not CheckpointError.
        answer = {"id": ckpt_id, "level": level, "ok": not error, "error": error, "process_failure": failed}
        for w in self.members:
            try:
                _send_json(self.links.link, answer, w, _TAG_DONE)
            except MPI.Exception:
                pass


def head_request(ctx: PipelineContext, job: CheckpointJob) -> dict[str, Any]:
    """What the head needs to do this rank's share of ``job``: file paths, sizes, and the level's fields."""
    level = job.post_levels[0]
    src = ctx.level(job.primary, job.nodes).path(job.ckpt_id, ctx.rank)
    req: dict[str, Any] = {"id": job.ckpt_id, "level": level, "rank": ctx.rank, "src": str(src),
                           "size": job.files[ctx.rank].size if job.files else -1,
                           "chunk": min(ctx.config.io_chunk_bytes, 16 << 20)}
    spec = LEVELS[level]
    if spec.head_request is not None:
        req.update(spec.head_request(ctx, job))
    return req


def handle_node(requests: list[dict[str, Any]], links: HeadLinks) -> None:
    """A head's work for one checkpoint: its node's ranks' requests, in rank order (collective over heads).

    Raises
    ------
    CheckpointError
        If the heads cannot do the level, or it needs groups but the job has none.
    StorageError
        If a file is missing or cannot be written.
    """
    level = int(requests[0]["level"])
    spec = LEVELS.get(level)
    if spec is None or spec.head_work is None:
        raise CheckpointError(f"heads cannot post-process level {level}")
    if spec.needs_groups and links.head_sets == MPI.COMM_NULL:
        raise CheckpointError(f"L{level} in head mode needs at least group_size nodes")
    # Position p of every node of the node set forms one group: this head is member j of each (its node's
    # index in the set), so the heads run the groups one after the other, in the same order.
    for req in requests:
        spec.head_work(req, links.head_sets)


def serve_as_head(links: HeadLinks, topology: Topology, config: Config) -> int:
    """Run this head's service until its node's ranks finalize and return 0.

    If an application rank of the node dies (or the head's MPI calls fail), the head reports it on stderr
    and ends at once by a SIGKILL of itself, a process failure (there is nobody left to serve). Not
    ``os._exit(1)``: PRRTE 3.0.14 answered a process that exits with code 1 without ``MPI_Finalize``
    by SIGKILLing another process of the job (2 runs of 2; not with code 0), which then vanished without a
    word. After a normal end, ``MPI_Finalize`` is bounded by ``failure_timeout`` (``SIGALRM``), as on the
    application ranks: a head must not wait forever for a hung peer.
    """
    members = [topology.app_world_ranks[r] for r in topology.node_ranks(topology.node_id)]
    try:
        server = HeadServer(links, members, lambda reqs, lk: handle_node(reqs, lk),
                            timeout=config.failure_timeout)
        pin_head(config)  # [ftkit] reserve_core: the heads run on the reserved core
        if will_encode(config, topology) and links.head_sets != MPI.COMM_NULL:
            warm_up_codec(topology.group_size)
        server.serve()
    except (ProcessFailure, MPI.Exception) as exc:
        print(f"ftkit head (world rank {links.link.Get_rank()}, node {topology.node_id}): {exc}",
              file=sys.stderr, flush=True)
        # Its ranks are dead: freeing communicators or finalizing MPI with failed peers can block, and
        # nobody is left to serve, so the head leaves at once.
        jobstatus.note("hook", f"head of node {topology.node_id} ends: {exc}")
        uncaught.end_process()
    links.free()
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(max(1, math.ceil(config.failure_timeout)))
    return 0


def enter_head_mode(world: Any, topology: Topology, config: Config) -> HeadLinks:
    """Build head mode's communicators (collective over ``world``); heads serve and exit, never returning.

    A head leaves through ``sys.exit`` after its node's ranks finalized (as FTI's heads do); MPI is finalized
    at interpreter exit.
    """
    links = setup_heads(world, topology)
    if links.is_head:
        jobstatus.watch_faults()  # a crash is named to ftkit launch (the head has no exit hook)
        sys.exit(serve_as_head(links, topology, config))
    return links
