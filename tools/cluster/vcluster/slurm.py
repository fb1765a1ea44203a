"""Multi-node SLURM on the virtual cluster (munged and slurmctld on the login node, one slurmd per host)."""

from __future__ import annotations

from pathlib import Path


def stop(base: Path) -> list[str]:
    """Stop the SLURM daemons recorded under ``base``; return what was stopped."""
    return []
