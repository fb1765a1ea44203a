"""Where each rank lives: nodes, heads, node-local directories, L2 partners and L3 groups.

The plan is computed by a pure function, :func:`plan_topology`, from the node id of every world rank, so
it can be tested without MPI; :func:`detect_node_ids` finds those ids on a running job (shared-memory split,
or emulated nodes of ``node_size`` consecutive ranks when every rank shares one host).

Groups follow FTI's topology-aware layout (reference 002, Figure 1): nodes are split into *node sets* of
``group_size`` consecutive nodes (leftover nodes join the last sets, so a set has between ``group_size`` and
``2*group_size - 1`` nodes); within a node set, the application ranks at the same position in their nodes form
one group. Every member of a group therefore sits on a different node, and the loss of one node costs any
group at most one member. The L2 partner of a rank is the member of its group on the next node of the node set
(a ring), so a partner copy never shares a node with its original.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TopologyError

__all__ = ["Topology", "plan_topology", "detect_node_ids", "node_leader", "node_ids_from_leaders",
           "node_ids_from_hosts", "plan_node_sets",
           "node_dir_name", "partner_index", "partner_source_index", "partner_in", "partner_source_in"]


def node_dir_name(node_id: int) -> str:
    """Return the name of node ``node_id``'s subdirectory under ``ckpt_dir`` (``node<id>``)."""
    return f"node{node_id}"


def plan_node_sets(node_count: int, group_size: int) -> list[list[int]]:
    """Split nodes ``0..node_count-1`` into sets of consecutive nodes, each of size in [k, 2k-1].

    Raises
    ------
    TopologyError
        If ``group_size < 2`` or there are fewer nodes than ``group_size``.
    """
    if group_size < 2:
        raise TopologyError(
            f"group_size = {group_size}: a group needs at least 2 nodes (set group_size >= 2)")
    if node_count < group_size:
        raise TopologyError(
            f"group_size = {group_size} needs at least {group_size} nodes, but the job has {node_count} "
            f"node(s): lower group_size or run on more nodes")
    nsets = node_count // group_size
    extra = node_count - nsets * group_size
    # Leftover nodes (fewer than k) are dealt to the last sets: every set stays contiguous, within [k, 2k-1].
    sizes = [group_size + extra // nsets + (1 if i >= nsets - extra % nsets else 0) for i in range(nsets)]
    sets, start = [], 0
    for n in sizes:
        sets.append(list(range(start, start + n)))
        start += n
    return sets


@dataclass(frozen=True)
class Topology:
    """The node layout of a job, as seen from one rank.

    Ranks in ``groups``, ``partner`` etc. are *application* ranks (ranks of ``Checkpointer.comm``); heads,
    when ``head`` is on, are the first world rank of each node and appear only in ``head_world_ranks``.
    """

    rank: int                              # this rank's application rank (-1 on a head)
    world_rank: int
    node_of: tuple[int, ...]               # node id of every application rank
    app_world_ranks: tuple[int, ...]       # world rank of every application rank
    head_world_ranks: tuple[int, ...]      # world rank of each node's head (empty if head = 0)
    group_size: int
    ckpt_dir: Path
    groups: tuple[tuple[int, ...], ...] = field(default=())

    @property
    def size(self) -> int:
        """Number of application ranks."""
        return len(self.node_of)

    @property
    def node_count(self) -> int:
        """Number of nodes."""
        return max(self.node_of) + 1 if self.node_of else 0

    @property
    def node_id(self) -> int:
        """Node of this rank (of this head, on a head)."""
        if self.rank >= 0:
            return self.node_of[self.rank]
        return self.head_world_ranks.index(self.world_rank)

    @property
    def ranks_on_node(self) -> tuple[int, ...]:
        """Application ranks on this rank's node, in order."""
        return self.node_ranks(self.node_id)

    def node_ranks(self, node: int) -> tuple[int, ...]:
        """Application ranks on ``node``, in order."""
        return tuple(r for r, n in enumerate(self.node_of) if n == node)

    @property
    def rank_in_node(self) -> int:
        """Position of this rank among its node's application ranks (-1 on a head)."""
        return self.ranks_on_node.index(self.rank) if self.rank >= 0 else -1

    @property
    def ranks_per_node(self) -> int:
        """Application ranks per node (the same on every node)."""
        return len(self.node_ranks(0))

    def local_dir_of(self, node: int) -> Path:
        """Node-local checkpoint directory of ``node``: ``ckpt_dir/node<id>``."""
        return self.ckpt_dir / node_dir_name(node)

    @property
    def local_dir(self) -> Path:
        """This rank's node-local checkpoint directory."""
        return self.local_dir_of(self.node_id)

    def group_index(self, rank: int | None = None) -> int:
        """Index in ``groups`` of the group of ``rank`` (default: this rank)."""
        r = self.rank if rank is None else rank
        for i, g in enumerate(self.groups):
            if r in g:
                return i
        raise TopologyError(f"rank {r} is in no group")

    def group_of(self, rank: int | None = None) -> tuple[int, ...]:
        """Members of the group of ``rank`` (default: this rank), one per node, in node order."""
        return self.groups[self.group_index(rank)]

    def partner(self, rank: int | None = None) -> int:
        """L2 partner of ``rank``: the member of its group on the next node of its node set (ring)."""
        r = self.rank if rank is None else rank
        return partner_in(self.group_of(r), r)

    def partner_source(self, rank: int | None = None) -> int:
        """The rank whose partner copy ``rank`` (default: this rank) stores (inverse of :meth:`partner`)."""
        r = self.rank if rank is None else rank
        return partner_source_in(self.group_of(r), r)


def partner_index(member: int, size: int) -> int:
    """The partner rule, by position: member ``member`` of a group of ``size`` keeps its L2 copy on member
    ``(member + 1) % size`` (the next node of its node set, a ring). Every L2 code uses this rule."""
    return (member + 1) % size


def partner_source_index(member: int, size: int) -> int:
    """Inverse of :func:`partner_index`: whose copy member ``member`` of a group of ``size`` keeps."""
    return (member - 1) % size


def partner_in(group: Sequence[int], rank: int) -> int:
    """The rank keeping the L2 copy of ``rank``, a member of ``group`` (see :func:`partner_index`)."""
    return group[partner_index(list(group).index(rank), len(group))]


def partner_source_in(group: Sequence[int], rank: int) -> int:
    """The rank whose L2 copy ``rank`` keeps, ``rank`` being a member of ``group``."""
    return group[partner_source_index(list(group).index(rank), len(group))]


def plan_topology(
    world_node_ids: Sequence[int],
    world_rank: int,
    *,
    head: int = 0,
    group_size: int = 4,
    ckpt_dir: str | os.PathLike[str] = ".",
    need_groups: bool = True,
) -> Topology:
    """Plan nodes, heads, groups and partners from the node id of every world rank.

    Parameters
    ----------
    world_node_ids
        Node id of each world rank; ids must be 0..N-1 and every node must hold the same number of ranks.
    world_rank
        The calling rank's world rank.
    head
        1 to make the first world rank of each node a dedicated head (FTI's ``head``), else 0.
    group_size
        FTI's ``group_size``: nodes per L3 group (>= 2).
    ckpt_dir
        FTI's ``ckpt_dir``: root of the node-local directories.
    need_groups
        When False (no L2/L3 in use), a job with fewer nodes than ``group_size`` is allowed and has no groups.

    Raises
    ------
    TopologyError
        Uneven nodes, a node with only a head, or too few nodes for ``group_size``.
    """
    ids = list(world_node_ids)
    nodes = sorted(set(ids))
    if nodes != list(range(len(nodes))):
        raise TopologyError(f"node ids must be 0..N-1, got {nodes}")
    counts = [ids.count(n) for n in nodes]
    if len(set(counts)) != 1:
        raise TopologyError(f"nodes hold different numbers of ranks ({counts}); ftkit needs the same number "
                            "of ranks on every node: change -n or node_size")
    if head not in (0, 1):
        raise TopologyError(f"head = {head}: allowed values are 0 and 1")
    if head and counts[0] < 2:
        raise TopologyError("head = 1 needs at least 2 ranks per node (one head plus application ranks)")
    heads: list[int] = []
    if head:
        heads = [ids.index(n) for n in nodes]
    app_world = [w for w in range(len(ids)) if w not in set(heads)]
    node_of = tuple(ids[w] for w in app_world)
    rank = app_world.index(world_rank) if world_rank in app_world else -1
    groups: list[tuple[int, ...]] = []
    if need_groups or 2 <= group_size <= len(nodes):
        per_node = counts[0] - head
        node_ranks = [[r for r, n in enumerate(node_of) if n == node] for node in nodes]
        for node_set in plan_node_sets(len(nodes), group_size):
            for pos in range(per_node):
                groups.append(tuple(node_ranks[n][pos] for n in node_set))
    return Topology(rank=rank, world_rank=world_rank, node_of=node_of, app_world_ranks=tuple(app_world),
                    head_world_ranks=tuple(heads), group_size=group_size, ckpt_dir=Path(ckpt_dir),
                    groups=tuple(groups))


def detect_node_ids(comm, node_size: int | None = None) -> list[int]:  # type: ignore[no-untyped-def]
    """Return the node id of every rank of ``comm`` (collective).

    Real nodes come from a shared-memory split. When every rank shares one host and ``node_size`` is
    given (or ``FTKIT_NODE_SIZE`` is set by ``ftkit launch --node-size``), nodes are emulated: ``node_size``
    consecutive ranks per node.

    Raises
    ------
    TopologyError
        If ``node_size`` does not divide the number of ranks, or disagrees with the real node layout.
    """
    return node_ids_from_leaders(comm.allgather(node_leader(comm)), node_size)


def node_leader(comm) -> int:  # type: ignore[no-untyped-def]
    """Return the rank in ``comm`` of this rank's node leader, its lowest rank on the node (collective: a
    shared-memory split, no message).

    With one exchange of every rank's leader, :func:`node_ids_from_leaders` gives the node ids (what
    :func:`detect_node_ids` does; ``Checkpointer()`` sends other start-up values in the same exchange).
    """
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        # A node's leader is its lowest rank (local rank 0: the split's key is the rank), found from the
        # groups without a message (each collective is ~0.1 s of start-up on a loaded machine).
        groups = local.Get_group(), comm.Get_group()
        my_leader = int(MPI.Group.Translate_ranks(groups[0], [0], groups[1])[0])
        for g in groups:
            g.Free()
    finally:
        local.Free()
    return my_leader


def node_ids_from_hosts(hosts: list[str], node_size: int | None = None) -> list[int]:
    """The node id of every rank from every rank's host name (local; FTI's way: ranks with the same host
    name share a node, its leader is the lowest of them), checked as :func:`node_ids_from_leaders` checks.

    ``Checkpointer()`` sends the host names in an exchange it makes anyway: no shared-memory split, a
    communicator creation that costs ~0.2 s across hosts.

    Raises
    ------
    TopologyError
        If ``node_size`` does not divide the number of ranks, or disagrees with the real node layout.
    """
    first: dict[str, int] = {}
    return node_ids_from_leaders([first.setdefault(h, r) for r, h in enumerate(hosts)], node_size)


def node_ids_from_leaders(every: list[int], node_size: int | None = None) -> list[int]:
    """The node id of every rank from every rank's :func:`node_leader` (local; see :func:`detect_node_ids`).

    Raises
    ------
    TopologyError
        If ``node_size`` does not divide the number of ranks, or disagrees with the real node layout.
    """
    if node_size is None and os.environ.get("FTKIT_NODE_SIZE"):
        node_size = int(os.environ["FTKIT_NODE_SIZE"])
    size = len(every)
    leaders = sorted(set(every))
    real_ids = [leaders.index(x) for x in every]
    if node_size is None:
        return real_ids
    if node_size < 1 or size % node_size != 0:
        raise TopologyError(f"node_size = {node_size} must divide the number of ranks ({size}): "
                            "change node_size or -n")
    if len(leaders) == 1:
        return [r // node_size for r in range(size)]
    per_node = [real_ids.count(n) for n in range(len(leaders))]
    if any(c != node_size for c in per_node):
        raise TopologyError(f"node_size = {node_size} but the job's nodes hold {per_node} ranks: "
                            "set node_size to the real ranks per node")
    return real_ids
