"""Fixtures for the virtual-cluster tests (root and network namespaces needed; skipped elsewhere)."""

from __future__ import annotations

import pytest

from ._vc import cluster_or_skip


@pytest.fixture
def cluster2():
    """Two hosts, 64 MiB local disk each."""
    yield from cluster_or_skip(2)


@pytest.fixture
def cluster4():
    """Four hosts and one spare host, 64 MiB local disk each."""
    yield from cluster_or_skip(4, spares=1)


@pytest.fixture
def slurm4(cluster4):
    """``cluster4`` with SLURM up: munged + slurmctld on the login node, a slurmd on every host."""
    from tools.cluster.vcluster import ClusterUnavailable, slurm

    try:
        slurm.start(cluster4)
    except ClusterUnavailable as exc:
        pytest.skip(f"no SLURM on this machine: {exc}")
    try:
        yield cluster4
    finally:
        slurm.stop(cluster4)


@pytest.fixture
def mpich4(cluster4):
    """``cluster4`` where Debian's MPICH runs the venv's mpi4py (skipped if MPICH is not installed)."""
    from tools.cluster.vcluster import ClusterUnavailable, mpich

    try:
        mpich.mpiexec()
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    return cluster4

