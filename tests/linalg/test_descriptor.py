"""Block-cyclic index arithmetic (pure, in-process) checked against a brute-force deal of the blocks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.errors import DescriptorError
from ftkit.linalg import BlockCyclic1D, Descriptor, indxg2l, indxg2p, indxl2g, numroc


def deal(n: int, nb: int, src: int, nprocs: int) -> list[list[int]]:
    """Brute force: the global indices each process owns, in local order."""
    owned: list[list[int]] = [[] for _ in range(nprocs)]
    for g in range(n):
        owned[(src + g // nb) % nprocs].append(g)
    return owned


dims = st.tuples(st.integers(0, 60), st.integers(1, 9), st.integers(1, 5)).flatmap(
    lambda t: st.tuples(st.just(t[0]), st.just(t[1]), st.integers(0, t[2] - 1), st.just(t[2])))


@settings(deadline=None)  # the shared machine is loaded: no per-example time limit
@given(dims)
def test_numroc_and_index_maps_match_brute_force(d):
    n, nb, src, nprocs = d
    owned = deal(n, nb, src, nprocs)
    for p in range(nprocs):
        assert numroc(n, nb, p, src, nprocs) == len(owned[p])
        for local, g in enumerate(owned[p]):
            assert indxg2p(g, nb, src, nprocs) == p
            assert indxg2l(g, nb, nprocs) == local
            assert indxl2g(local, nb, p, src, nprocs) == g
    assert sum(numroc(n, nb, p, src, nprocs) for p in range(nprocs)) == n


@settings(deadline=None)
@given(dims, st.integers(0, 20), st.integers(0, 30))
def test_submatrix_map_is_contiguous_per_process(d, offset, length):
    n, nb, src, nprocs = d
    total = offset + length
    owned = deal(total, nb, src, nprocs)
    m = BlockCyclic1D(length, nb, offset, src, nprocs)
    for p in range(nprocs):
        local_sub = [i for i, g in enumerate(owned[p]) if g >= offset]
        rng = m.local_range(p)
        assert list(range(rng.start, rng.stop)) == local_sub
        assert list(m.indices_on(p)) == [g - offset for g in owned[p] if g >= offset]
        assert m.count(p) == len(local_sub)
        # range_on: p's indices within [lo, hi) relative to local_range
        lo, hi = length // 3, length - length // 4
        sl = m.range_on(p, lo, hi)
        idx = m.indices_on(p)
        assert list(idx[sl]) == [i for i in idx if lo <= i < hi]
    assert np.array_equal(m.owners, [indxg2p(offset + i, nb, src, nprocs) for i in range(length)])


def test_aligned_with():
    a = BlockCyclic1D(20, 4, 5, 1, 3)
    assert a.aligned_with(BlockCyclic1D(20, 4, 5, 1, 3))
    assert a.aligned_with(BlockCyclic1D(20, 4, 17, 1, 3))     # offset one full cycle (12) later
    assert not a.aligned_with(BlockCyclic1D(20, 4, 6, 1, 3))  # different phase in the block
    assert not a.aligned_with(BlockCyclic1D(20, 2, 5, 1, 3))  # different block size
    assert not a.aligned_with(BlockCyclic1D(20, 4, 5, 2, 3))  # different source
    assert BlockCyclic1D(7, 3, 2, 0, 1).aligned_with(BlockCyclic1D(7, 5, 0, 0, 1))  # one process


def test_descriptor_to_scalapack_and_validation():
    d = Descriptor(100, 50, 8, 4, 1, 0, 52, 7)
    assert d.to_scalapack() == (1, 7, 100, 50, 8, 4, 1, 0, 52)
    assert d.local_shape(1, 0, 2, 3) == (numroc(100, 8, 1, 1, 2), numroc(50, 4, 0, 0, 3))
    with pytest.raises(DescriptorError, match="block sizes"):
        Descriptor(10, 10, 0, 4)
    with pytest.raises(DescriptorError, match="non-negative"):
        Descriptor(-1, 10, 2, 2)
    with pytest.raises(DescriptorError, match="rsrc"):
        Descriptor(10, 10, 2, 2, rsrc=-1)
    with pytest.raises(DescriptorError, match="integer"):
        Descriptor(10, 10.5, 2, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # DescriptorError is a ValueError
        Descriptor(10, 10, 2, 2, lld=0)


def test_maps_are_shared_per_layout_and_read_only():
    from ftkit.linalg.descriptor import block_cyclic

    m = block_cyclic(100, 8, 3, 1, 3)
    assert block_cyclic(100, 8, 3, 1, 3) is m and block_cyclic(100, 8, 3, 0, 3) is not m
    fresh = BlockCyclic1D(100, 8, 3, 1, 3)
    assert np.array_equal(m.owners, fresh.owners) and np.array_equal(m.local, fresh.local)
    assert [m.count(p) for p in range(3)] == [fresh.count(p) for p in range(3)]
    for table in (m.owners, m.local):
        with pytest.raises(ValueError):
            table[0] = 7  # a shared map cannot be changed by one caller under another
    assert m.aligned_with(fresh) and not m.aligned_with(BlockCyclic1D(100, 8, 3, 2, 3))
