"""Prints the node id detect_node_ids gives each rank (emulated nodes from FTKIT_NODE_SIZE)."""
from mpi4py import MPI

from ftkit.topology import detect_node_ids

ids = detect_node_ids(MPI.COMM_WORLD)
print(f"rank {MPI.COMM_WORLD.rank} node {ids[MPI.COMM_WORLD.rank]}", flush=True)
