"""Topology planning: nodes, heads, groups on distinct nodes, partners."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftkit.errors import TopologyError
from ftkit.topology import plan_node_sets, plan_topology

from .conftest import run_python

PROGRAMS = Path(__file__).parent / "programs"


@given(st.integers(2, 8), st.integers(0, 40))
def test_node_sets_are_contiguous_and_within_bounds(k, extra_nodes):
    n = k + extra_nodes
    sets = plan_node_sets(n, k)
    assert [node for s in sets for node in s] == list(range(n))
    assert all(k <= len(s) <= 2 * k - 1 for s in sets)


@given(st.integers(1, 4), st.integers(2, 12), st.integers(2, 5), st.sampled_from([0, 1]))
def test_groups_have_one_member_per_node_and_partners_form_rings(per_node, nodes, k, head):
    if nodes < k:
        return
    size = (per_node + head) * nodes
    ids = [w // (per_node + head) for w in range(size)]
    t = plan_topology(ids, 0, head=head, group_size=k, ckpt_dir="/x")
    assert t.size == per_node * nodes and t.node_count == nodes
    members = sorted(r for g in t.groups for r in g)
    assert members == list(range(t.size))  # every app rank in exactly one group
    for g in t.groups:
        assert len({t.node_of[r] for r in g}) == len(g)  # distinct nodes
        assert k <= len(g) <= 2 * k - 1
        for r in g:
            p = t.partner(r)
            assert t.node_of[p] != t.node_of[r]
            assert t.partner_source(p) == r


def test_heads_are_first_rank_of_each_node():
    t = plan_topology([w // 3 for w in range(12)], 3, head=1, group_size=2, ckpt_dir="/c")
    assert t.head_world_ranks == (0, 3, 6, 9)
    assert t.rank == -1 and t.node_id == 1
    t = plan_topology([w // 3 for w in range(12)], 4, head=1, group_size=2, ckpt_dir="/c")
    assert t.rank == 2 and t.node_id == 1 and t.rank_in_node == 0
    assert t.local_dir == Path("/c/node1")


def test_figure1_layout_spreads_a_node_over_groups():
    # 8 nodes, 4 ranks per node, groups of 4: each node's 4 ranks land in 4 different groups.
    t = plan_topology([w // 4 for w in range(32)], 0, group_size=4)
    assert len(t.groups) == 8
    assert len({t.group_index(r) for r in t.node_ranks(5)}) == 4


@pytest.mark.parametrize("ids,k,head,what", [
    ([0, 0, 1], 2, 0, "different numbers"),
    ([0, 1, 2, 3], 5, 0, "at least 5 nodes"),
    ([0, 1, 2, 3], 1, 0, "at least 2"),
    ([0, 1], 2, 1, "head = 1 needs"),
])
def test_impossible_layouts_raise_topology_error(ids, k, head, what):
    with pytest.raises(TopologyError, match=what):
        plan_topology(ids, 0, head=head, group_size=k)


def test_detect_emulated_nodes_under_mpirun():
    r = run_python(6, PROGRAMS / "topology_nodes.py", node_size=2, timeout=120).check()
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank"))
    assert lines == [f"rank {w} node {w // 2}" for w in range(6)]


@pytest.mark.parametrize("hosts, node_size, ids", [
    (["b", "b", "a", "a"], None, [0, 0, 1, 1]),            # a node's id: the order of its lowest rank
    (["a", "b", "a", "b"], None, [0, 1, 0, 1]),            # round-robin placement
    (["h"] * 6, 2, [0, 0, 1, 1, 2, 2]),                    # one host: node_size emulates the nodes
    (["a", "a", "b", "b"], 2, [0, 0, 1, 1]),               # real nodes that agree with node_size
])
def test_node_ids_from_host_names(hosts, node_size, ids):
    """Checkpointer() takes the node map from the host names of its start-up exchange (FTI's way)."""
    from ftkit.topology import node_ids_from_hosts

    assert node_ids_from_hosts(hosts, node_size) == ids


@pytest.mark.parametrize("hosts, node_size, what", [
    (["a", "a", "b"], 2, "must divide"),
    (["a", "a", "a", "b"], 2, "hold \\[3, 1\\] ranks"),
])
def test_node_ids_from_host_names_check_node_size(hosts, node_size, what):
    from ftkit.topology import node_ids_from_hosts

    with pytest.raises(TopologyError, match=what):
        node_ids_from_hosts(hosts, node_size)
