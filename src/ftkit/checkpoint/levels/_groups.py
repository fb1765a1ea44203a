"""What L2 and L3 share: group communicators, member names for messages, and the frame of a group recovery.

Group layout at recovery: from the checkpoint's node map (``entry.nodes``) and ``group_size`` recorded in
``entry.extra`` at checkpoint time (the configuration's when absent), so a restart finds the same groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpi4py import MPI

from ...errors import ProcessFailure
from ...storage.manifest import CheckpointEntry
from ...topology import Topology, plan_node_sets, plan_topology
from .. import _mpi
from ..contract import DAMAGED, CheckpointJob, Located, PipelineContext, RecoveryStep

__all__ = ["group_comm", "cached_group_comm", "group_names", "describe_group", "require_groups",
           "level_paths", "GroupStep", "record_group_size"]

# Group communicators split off a pipeline communicator, by id of that communicator (split once per job).
_GROUP_COMMS: dict[int, tuple[Any, tuple[tuple[int, ...], ...], Any]] = {}


def group_names(topology: Topology, group: tuple[int, ...]) -> list[str]:
    """Names of a group's members for messages: ``rank r (node n)``."""
    return [f"rank {r} (node {topology.node_of[r]})" for r in group]


def describe_group(topology: Topology, gi: int) -> str:
    """One group for messages: its index, ranks and nodes."""
    g = topology.groups[gi]
    return f"group {gi} (ranks {list(g)} on nodes {[topology.node_of[r] for r in g]})"


def require_groups(topology: Topology) -> None:
    """Raise the TopologyError naming the numbers if the job has fewer nodes than ``group_size``."""
    if not topology.groups:
        plan_node_sets(topology.node_count, topology.group_size)


def group_comm(comm: Any, topology: Topology, timeout: float) -> Any:
    """Return the communicator of this rank's group (members in group order), split once per ``comm``.

    Collective over ``comm`` the first time it is called for ``comm``.

    Raises
    ------
    TimeoutFailure
        If a rank of ``comm`` does not arrive within ``timeout`` seconds (a stuck rank).
    ProcessFailure
        If a rank of ``comm`` failed.
    """
    key = id(comm)
    cached = cached_group_comm(comm, topology)
    if cached is not None:
        return cached
    gi = topology.group_index()
    try:
        # Split has no deadline: first make sure, within one, that every rank is here to split.
        _mpi.barrier(comm, timeout, "L2/L3 group set-up")
        sub = comm.Split(gi, topology.group_of().index(topology.rank))
    except MPI.Exception as exc:
        raise _mpi.as_failure(exc, comm, "L2/L3 group set-up") from exc
    _GROUP_COMMS[key] = (comm, topology.groups, sub)
    return sub


def cached_group_comm(comm: Any, topology: Topology) -> Any:
    """The group communicator :func:`group_comm` split for ``comm`` and ``topology``'s groups, or None if it
    split none for them (local: nothing is created)."""
    cached = _GROUP_COMMS.get(id(comm))
    if cached is not None and cached[0] is comm and cached[1] == topology.groups:
        return cached[2]
    return None


def level_paths(ctx: PipelineContext, nodes: list[int], ckpt_id: int, level: int) -> tuple[Path, Path]:
    """This rank's L1 file of ``ckpt_id`` and its file at ``level`` (copy or parity)."""
    return ctx.level(1, nodes).path(ckpt_id, ctx.rank), ctx.level(level, nodes).path(ckpt_id, ctx.rank)


def record_group_size(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Record the group layout recovery needs (the entry may be committed before the work is done)."""
    job.extra.setdefault("group_size", ctx.topology.group_size)


class GroupStep(RecoveryStep):
    """Common frame of the L2/L3 recovery steps: group layout of the entry, group communicator, outcome."""

    def locate(self, ctx: PipelineContext, entry: CheckpointEntry, need: bool) -> Located:
        try:
            k = int(entry.extra.get("group_size", ctx.config.group_size))
            topo = plan_topology(entry.nodes, ctx.rank, group_size=k, ckpt_dir=ctx.config.ckpt_dir)
            gi = topo.group_index()
        except DAMAGED as exc:
            # The same on every rank (it depends on the entry only): nobody enters a collective below.
            return Located(reason=f"L{self.level}: {exc}", level=self.level)
        # The groups of the session's topology: its communicator, split at start-up (a split costs ~0.3 s
        # across hosts); another layout (the checkpoint's nodes or group size differ): split now.
        comm = cached_group_comm(ctx.comm, topo)
        own = comm is None
        try:
            if own:
                # Split has no deadline: first make sure, within one, that every rank is here to split.
                _mpi.barrier(ctx.comm, ctx.timeout, f"L{self.level} recovery")
                comm = ctx.comm.Split(gi, topo.group_of().index(ctx.rank))
        except MPI.Exception as exc:
            raise _mpi.as_failure(exc, ctx.comm, f"L{self.level} recovery") from exc
        reason = ""
        try:
            if any(_mpi.allgather(comm, need, f"L{self.level} recovery")):
                reason = self.repair(ctx, entry, topo, gi, comm)
        except MPI.Exception as exc:
            raise _mpi.as_failure(exc, ctx.comm, f"L{self.level} recovery") from exc
        except ProcessFailure:
            raise
        except DAMAGED as exc:
            reason = f"{describe_group(topo, gi)}: {exc}"
        finally:
            if own:
                _free(comm)
        if not need:
            return Located()
        if reason:
            return Located(reason=reason, level=self.level)
        storage = ctx.level(1, entry.nodes)
        try:
            header = storage.verify(entry.id, ctx.rank, entry.files[ctx.rank].digest)
        except ProcessFailure:
            raise
        except DAMAGED as exc:
            return Located(reason=f"rebuilt file does not verify: {exc}", level=self.level)
        return Located(storage, header, level=self.level)

    def repair(self, ctx: PipelineContext, entry: CheckpointEntry, topo: Topology, gi: int, comm: Any) -> str:
        """Rebuild the group's lost files (collective over ``comm``); return why it cannot, or ``""``."""
        raise NotImplementedError


def _free(comm: Any) -> None:
    try:
        comm.Free()
    except MPI.Exception:
        pass  # a communicator with a dead member may refuse to be freed; the failure is raised already


