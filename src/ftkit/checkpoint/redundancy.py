"""L2 and L3 in the checkpoint pipeline: post-processing steps and recovery-chain steps.

Post-processing (registered in :data:`ftkit.checkpoint.pipeline.POST_STEPS`): after the L1 files of a
checkpoint are written, :func:`post_partner` copies each rank's file to its partner's node (L2) and
:func:`post_encode` makes every group member store one parity file of its group's code (L3: ``rs`` or
``xor``, from ``l3_code``). Both are collective over the group communicator; when the caller gives none they
split one off the pipeline's communicator (all ranks call the step).

Recovery (inserted in :func:`ftkit.checkpoint.recovery.default_steps` between L1 and L4): for a checkpoint
complete at L2 (L3), :class:`PartnerStep` (:class:`EncodedStep`) assesses, in every group where some member
needs its file, which files survive; a group that can repair itself rebuilds the lost L1 files (from the
partner copies, or by decoding) and re-creates the lost copies or parity files, so the next failure is
covered too. A group that cannot gives each of its ranks a reason naming the group, its nodes and what was
lost; the recovery chain then tries L4 or an older checkpoint, and raises ``RecoveryError`` with those
reasons when nothing is left.

Group layout at recovery: from the checkpoint's node map (``entry.nodes``) and ``group_size`` recorded in
``entry.extra`` at checkpoint time (the configuration's when absent), so a restart finds the same groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpi4py import MPI

from ..errors import FtkitError, ProcessFailure
from ..failure.detect import is_failure_error
from ..storage.encoded import assess_group, encode_group, rebuild_group
from ..storage.encoded import encoding_tag as l3_tag
from ..storage.format import verify_file
from ..storage.partner import assess_partner, partner_copy, rebuild_partner
from ..topology import Topology, plan_node_sets, plan_topology
from . import _mpi
from .pipeline import CheckpointJob, PipelineContext
from .recovery import Located, RecoveryStep

__all__ = ["post_partner", "post_encode", "PartnerStep", "EncodedStep", "group_comm", "l3_tag", "register",
           "group_names"]

# Group communicators split off a pipeline communicator, by id of that communicator (split once per job).
_GROUP_COMMS: dict[int, tuple[Any, tuple[tuple[int, ...], ...], Any]] = {}


def group_names(topology: Topology, group: tuple[int, ...]) -> list[str]:
    """Names of a group's members for messages: ``rank r (node n)``."""
    return [f"rank {r} (node {topology.node_of[r]})" for r in group]


def _describe_group(topology: Topology, gi: int) -> str:
    g = topology.groups[gi]
    return f"group {gi} (ranks {list(g)} on nodes {[topology.node_of[r] for r in g]})"


def _require_groups(topology: Topology, level: int) -> None:
    if not topology.groups:
        # plan_node_sets raises the TopologyError that names the numbers (fewer nodes than group_size).
        plan_node_sets(topology.node_count, topology.group_size)


def group_comm(comm: Any, topology: Topology) -> Any:
    """Return the communicator of this rank's group (members in group order), split once per ``comm``.

    Collective over ``comm`` the first time it is called for ``comm``.
    """
    key = id(comm)
    cached = _GROUP_COMMS.get(key)
    if cached is not None and cached[0] is comm and cached[1] == topology.groups:
        return cached[2]
    gi = topology.group_index()
    sub = comm.Split(gi, topology.group_of().index(topology.rank))
    _GROUP_COMMS[key] = (comm, topology.groups, sub)
    return sub


def _paths(ctx: PipelineContext, nodes: list[int], ckpt_id: int, level: int) -> tuple[Path, Path]:
    return ctx.level(1, nodes).path(ckpt_id, ctx.rank), ctx.level(level, nodes).path(ckpt_id, ctx.rank)


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
    """
    _require_groups(ctx.topology, 2)
    job.extra["group_size"] = ctx.topology.group_size
    data, copy = _paths(ctx, job.nodes, job.ckpt_id, 2)
    partner_copy(group if group is not None else group_comm(ctx.comm, ctx.topology), data, copy,
                 chunk_size=min(ctx.config.io_chunk_bytes, 16 << 20))


def post_encode(ctx: PipelineContext, job: CheckpointJob, group: Any = None) -> None:
    """L3 post-processing: this rank stores its parity file of its group's code (collective).

    The code is the configuration's ``l3_code`` (``rs``: FTI's Reed-Solomon, k data -> k parity files;
    ``xor``). Memory stays within :data:`ftkit.storage.encoded.DEFAULT_MEMORY` whatever the file sizes.

    Raises
    ------
    TopologyError
        If the job has fewer nodes than ``group_size``.
    StorageError
        On every member of a group where a file is missing or cannot be written.
    """
    _require_groups(ctx.topology, 3)
    job.extra["group_size"] = ctx.topology.group_size
    job.extra["l3_code"] = ctx.config.l3_code
    data, parity = _paths(ctx, job.nodes, job.ckpt_id, 3)
    encode_group(group if group is not None else group_comm(ctx.comm, ctx.topology), data, parity,
                 code=ctx.config.l3_code, tag=l3_tag(ctx.exec_id, job.ckpt_id),
                 names=group_names(ctx.topology, ctx.topology.group_of()))


def register() -> None:
    """Register the L2/L3 post-processing steps (idempotent)."""
    from .pipeline import POST_STEPS

    POST_STEPS.setdefault(2, post_partner)
    POST_STEPS.setdefault(3, post_encode)


class _GroupStep(RecoveryStep):
    """Common frame of the L2/L3 steps: group layout of the entry, group communicator, outcome."""

    def locate(self, ctx: PipelineContext, entry: Any, need: bool) -> Located:
        try:
            k = int(entry.extra.get("group_size", ctx.config.group_size))
            topo = plan_topology(entry.nodes, ctx.rank, group_size=k, ckpt_dir=ctx.config.ckpt_dir)
            gi = topo.group_index()
        except FtkitError as exc:
            # The same on every rank (it depends on the entry only): nobody enters a collective below.
            return Located(reason=f"L{self.level}: {exc}", level=self.level)
        comm = ctx.comm.Split(gi, topo.group_of().index(ctx.rank))
        reason = ""
        try:
            if any(comm.allgather(need)):
                reason = self._repair(ctx, entry, topo, gi, comm)
        except MPI.Exception as exc:
            if is_failure_error(exc):
                raise _mpi.as_failure(exc, ctx.comm, f"L{self.level} recovery") from exc
            raise
        except ProcessFailure:
            raise
        except (FtkitError, OSError) as exc:
            reason = f"{_describe_group(topo, gi)}: {exc}"
        finally:
            comm.Free()
        if not need:
            return Located()
        if reason:
            return Located(reason=reason, level=self.level)
        storage = ctx.level(1, entry.nodes)
        try:
            header = storage.verify(entry.id, ctx.rank, entry.files[ctx.rank].digest)
        except (FtkitError, OSError) as exc:
            return Located(reason=f"rebuilt file does not verify: {exc}", level=self.level)
        return Located(storage, header, level=self.level)

    def _repair(self, ctx: PipelineContext, entry: Any, topo: Topology, gi: int, comm: Any) -> str:
        raise NotImplementedError


class PartnerStep(_GroupStep):
    """L2: rebuild a lost or damaged L1 file from the copy on the partner's node."""

    level = 2

    def _repair(self, ctx: PipelineContext, entry: Any, topo: Topology, gi: int, comm: Any) -> str:
        group = topo.groups[gi]
        me = group.index(ctx.rank)
        source = group[(me - 1) % len(group)]
        data, copy = _paths(ctx, entry.nodes, entry.id, 2)
        chunk = min(ctx.config.io_chunk_bytes, 16 << 20)

        def validate(p: Path) -> bool:
            owner = ctx.rank if p == data else source
            try:
                verify_file(p, expect_digest=entry.files[owner].digest, chunk_bytes=chunk)
                return True
            except (FtkitError, OSError):
                return False

        plan = assess_partner(comm, data, copy, validate)
        if not plan.recoverable:
            return f"L2 {_describe_group(topo, gi)}: {plan.describe(group_names(topo, group))}"
        rebuild_partner(comm, plan, data, copy, names=group_names(topo, group), chunk_size=chunk)
        return ""


class EncodedStep(_GroupStep):
    """L3: rebuild lost or damaged L1 files by decoding within the group."""

    level = 3

    def _repair(self, ctx: PipelineContext, entry: Any, topo: Topology, gi: int, comm: Any) -> str:
        group = topo.groups[gi]
        data, parity = _paths(ctx, entry.nodes, entry.id, 3)
        tag = l3_tag(ctx.exec_id, entry.id)
        code = str(entry.extra.get("l3_code", ctx.config.l3_code))
        plan = assess_group(comm, data, parity, code=code, tag=tag)
        if not plan.recoverable:
            return f"L3 {_describe_group(topo, gi)}: {plan.describe(group_names(topo, group))}"
        rebuild_group(comm, plan, data, parity, tag=tag, names=group_names(topo, group))
        return ""
