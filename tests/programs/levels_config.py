"""A Checkpointer with an L3 interval on too few nodes: prints ``CONFIGERROR <rank> <message>``."""

from __future__ import annotations

import sys
from pathlib import Path

from mpi4py import MPI

import ftkit
from ftkit.errors import ConfigError

root = Path(sys.argv[1])
config = ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global", meta_dir=root / "meta",
                      group_size=4, ckpt_l3=5, interval_unit="iterations")
try:
    ftkit.Checkpointer(config, comm=MPI.COMM_WORLD)
except ConfigError as exc:
    print(f"CONFIGERROR {MPI.COMM_WORLD.rank} {type(exc).__name__}: {exc}", flush=True)
