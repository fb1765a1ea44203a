"""ProcessGrid and DistributedMatrix under mpirun (layouts, gather, element access, seeds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprow,npcol,order", [(2, 3, "R"), (3, 2, "C"), (1, 1, "R")])
def test_grid_and_matrix(nprow, npcol, order):
    r = run_python(nprow * npcol, PROGRAMS / "linalg_matrix.py", str(nprow), str(npcol), order,
                   timeout=180).check()
    lines = [line for line in r.stdout.splitlines() if line.startswith("CHECK")]
    assert len(lines) >= 30, r.stdout
    bad = [line for line in lines if not line.endswith(": ok")]
    assert not bad, "\n".join(bad)
