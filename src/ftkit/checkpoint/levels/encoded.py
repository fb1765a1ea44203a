"""L3, group encoding: every member of a group stores one parity file of its group's code.

Post-processing (:func:`post_encode`, collective over the group): the code is the configuration's
``l3_code`` (``rs``: FTI's Reed-Solomon, k data -> k parity files; ``xor``); memory stays within
:data:`ftkit.storage.groupcode.erasure.DEFAULT_MEMORY` whatever the file sizes. Recovery
(:class:`EncodedStep`): in every group where some member needs its file, the members assess which data and
parity files survive; a group that can repair itself decodes the lost L1 files and re-creates the lost parity
files.
"""

from __future__ import annotations

from typing import Any

from ...storage.groupcode.erasure import encode_group
from ...storage.groupcode.erasure import encoding_tag as l3_tag
from ...storage.groupcode.plan import prefetch_rs_code
from ...storage.manifest import CheckpointEntry
from ...storage.repair.rebuild import GroupFiles, assess, rebuild
from ...topology import Topology
from ..contract import CheckpointJob, Level, PipelineContext
from ._groups import (
    GroupStep,
    describe_group,
    group_comm,
    group_names,
    level_paths,
    record_group_size,
    require_groups,
)

__all__ = ["LEVEL", "post_encode", "EncodedStep", "l3_tag", "encoded_request", "encoded_work"]


def post_encode(ctx: PipelineContext, job: CheckpointJob, group: Any = None) -> None:
    """L3 post-processing: this rank stores its parity file of its group's code (collective).

    Parameters
    ----------
    group
        This rank's group communicator (members in group order); split off ``ctx.comm`` if None.

    Raises
    ------
    TopologyError
        If the job has fewer nodes than ``group_size``.
    StorageError
        On every member of a group where a file is missing or cannot be written.
    TimeoutFailure
        If a member of the group does not take part in a step within ``failure_timeout`` seconds.
    """
    require_groups(ctx.topology)
    job.extra["group_size"] = ctx.topology.group_size
    job.extra["l3_code"] = ctx.config.l3_code
    data, parity = level_paths(ctx, job.nodes, job.ckpt_id, 3)
    if group is None:
        group = group_comm(ctx.comm, ctx.topology, ctx.timeout)
    # Inline (job.pending): RS reads the L1 file's bytes from the protected arrays while the file is synced;
    # XOR reads the file, so it is committed first.
    code = ctx.config.l3_code
    if job.pending is not None and code != "rs":
        job.pending.finish()
    encode_group(group, data, parity, code=code, tag=l3_tag(ctx.exec_id, job.ckpt_id),
                 names=group_names(ctx.topology, ctx.topology.group_of()), timeout=ctx.timeout,
                 data_bytes=job.pending.source() if job.pending is not None else None,
                 syncs=job.syncs)


def prepare_encode(ctx: PipelineContext, job: CheckpointJob) -> None:
    """Record the group layout and the code recovery needs (before the entry is committed)."""
    record_group_size(ctx, job)
    job.extra.setdefault("l3_code", ctx.config.l3_code)


class EncodedStep(GroupStep):
    """L3: rebuild lost or damaged L1 files by decoding within the group."""

    level = 3

    def repair(self, ctx: PipelineContext, entry: CheckpointEntry, topo: Topology, gi: int, comm: Any) -> str:
        data, parity = level_paths(ctx, entry.nodes, entry.id, 3)
        files = GroupFiles(3, ctx.exec_id, entry, topo.groups[gi], (data,), (parity,), comm,
                           timeout=ctx.timeout, default_code=ctx.config.l3_code)
        plan = assess(files)
        if not plan.recoverable:
            return f"L3 {describe_group(topo, gi)}: {plan.describe(files.names)}"
        rebuild(files, plan)
        return ""


def encoded_request(ctx: PipelineContext, job: CheckpointJob) -> dict[str, Any]:
    """Head mode: where the head writes this rank's parity file, and the code to use."""
    return {"dst": str(ctx.level(3, job.nodes).path(job.ckpt_id, ctx.rank)), "code": ctx.config.l3_code,
            "tag": l3_tag(ctx.exec_id, job.ckpt_id), "timeout": ctx.timeout,
            "names": group_names(ctx.topology, ctx.topology.group_of()) if ctx.topology.groups else []}


def encoded_work(req: dict[str, Any], head_set: Any) -> None:
    """Head mode: the head's share of one group encoding (collective over the node set's heads)."""
    encode_group(head_set, req["src"], req["dst"], code=req["code"], tag=req["tag"],
                 names=req.get("names") or None, timeout=req["timeout"])


def warm_encode(ctx: PipelineContext) -> None:
    """Build the Reed-Solomon code's matrices of the group size (while the L1 file is written)."""
    if ctx.config.l3_code == "rs":
        prefetch_rs_code(ctx.topology.group_size)


#: Level 3 in the level table.
LEVEL = Level(3, "encoded", post=post_encode, recovery=(EncodedStep,), prepare=prepare_encode,
              head_request=encoded_request, head_work=encoded_work, needs_groups=True, from_buffers=True,
              background_fsync=True, warm=warm_encode)
