"""A virtual cluster in one Linux machine (network namespaces, a bridge, per-host disks) and host faults."""

from ._sys import SKIP, ClusterError, ClusterUnavailable
from .cluster import Cluster, down, up

__all__ = ["SKIP", "Cluster", "ClusterError", "ClusterUnavailable", "down", "up"]
