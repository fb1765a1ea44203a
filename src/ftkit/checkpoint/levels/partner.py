"""L2, partner copy: each rank's L1 file is copied to the node of the next member of its group.

Post-processing (:func:`post_partner`, collective over the group): after the L1 files of a checkpoint are
written, each rank sends its file to its partner, which stores it as its L2 copy. Recovery
(:class:`PartnerStep`): in every group where some member needs its file, the members assess which files
survive; a group that can repair itself rebuilds the lost L1 files from the partner copies and re-creates
the lost copies, so the next failure is covered too.
"""

from __future__ import annotations

from typing import Any

from ...storage.groupcode.partner_copy import partner_copy
from ...storage.manifest import CheckpointEntry
from ...storage.repair.rebuild import GroupFiles, assess, rebuild
from ...topology import Topology
from ..contract import CheckpointJob, Level, PipelineContext
from ._groups import (
    GroupStep,
    describe_group,
    group_comm,
    level_paths,
    record_group_size,
    require_groups,
)

__all__ = ["LEVEL", "post_partner", "PartnerStep", "partner_request", "partner_work"]


def _chunk(ctx: PipelineContext) -> int:
    return min(ctx.config.io_chunk_bytes, 16 << 20)


def post_partner(ctx: PipelineContext, job: CheckpointJob, group: Any = None) -> None:
    """L2 post-processing: copy this rank's L1 file of ``job`` to its partner's node (collective).

    Parameters
    ----------
    group
        This rank's group communicator (members in group order); split off ``ctx.comm`` if None.

    Raises
    ------
    TopologyError
        If the job has fewer nodes than ``group_size`` (no partner on another node).
    StorageError
        If a file is missing or a copy cannot be written (on the ranks concerned).
    TimeoutFailure
        If the partner does not take part within ``failure_timeout`` seconds.
    """
    require_groups(ctx.topology)
    job.extra["group_size"] = ctx.topology.group_size
    data, copy = level_paths(ctx, job.nodes, job.ckpt_id, 2)
    if group is None:
        group = group_comm(ctx.comm, ctx.topology, ctx.timeout)
    # Inline (job.pending): the L1 file's bytes come from the protected arrays while the file is synced.
    partner_copy(group, data, copy, chunk_size=_chunk(ctx), timeout=ctx.timeout,
                 data_bytes=job.pending.source() if job.pending is not None else None,
                 syncs=job.syncs)


class PartnerStep(GroupStep):
    """L2: rebuild a lost or damaged L1 file from the copy on the partner's node."""

    level = 2

    def repair(self, ctx: PipelineContext, entry: CheckpointEntry, topo: Topology, gi: int, comm: Any) -> str:
        data, copy = level_paths(ctx, entry.nodes, entry.id, 2)
        files = GroupFiles(2, ctx.exec_id, entry, topo.groups[gi], (data,), (copy,), comm, _chunk(ctx),
                           ctx.timeout)
        plan = assess(files)
        if not plan.recoverable:
            return f"L2 {describe_group(topo, gi)}: {plan.describe(files.names)}"
        rebuild(files, plan)
        return ""


def partner_request(ctx: PipelineContext, job: CheckpointJob) -> dict[str, Any]:
    """Head mode: where the head writes this rank's partner copy."""
    return {"dst": str(ctx.level(2, job.nodes).path(job.ckpt_id, ctx.rank)), "timeout": ctx.timeout}


def partner_work(req: dict[str, Any], head_set: Any) -> None:
    """Head mode: the head's share of one rank's partner copy (collective over the node set's heads)."""
    partner_copy(head_set, req["src"], req["dst"], chunk_size=int(req["chunk"]),
                 timeout=float(req["timeout"]))


#: Level 2 in the level table.
LEVEL = Level(2, "partner", post=post_partner, recovery=(PartnerStep,), prepare=record_group_size,
              head_request=partner_request, head_work=partner_work, needs_groups=True, from_buffers=True,
              background_fsync=True)
