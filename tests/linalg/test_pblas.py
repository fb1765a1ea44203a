"""PDGEMM / PDSYMM / Cannon conformance against numpy, and argument errors, run under mpirun.

One MPI job per grid shape runs many seeded random cases (see ``tests/programs/linalg_conformance.py``),
which keeps the suite fast: the job start costs more than a small case.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"

pytestmark = pytest.mark.mpi

# (nprow, npcol, gemm cases, symm cases, cannon cases, seed)
GRIDS = [
    (1, 1, 300, 100, 60, 11),
    (2, 2, 300, 100, 60, 12),
    (1, 4, 200, 60, 0, 13),
    (4, 1, 200, 60, 0, 14),
    (2, 3, 300, 100, 0, 15),
]


@pytest.mark.parametrize("nprow,npcol,gemm,symm,cannon,seed", GRIDS,
                         ids=[f"{g[0]}x{g[1]}" for g in GRIDS])
def test_conformance_against_numpy(nprow, npcol, gemm, symm, cannon, seed):
    r = run_python(nprow * npcol, PROGRAMS / "linalg_conformance.py", str(nprow), str(npcol),
                   "--cases", str(gemm), "--symm", str(symm), "--cannon", str(cannon), "--seed", str(seed),
                   timeout=240).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    assert f"DONE gemm={gemm} symm={symm} cannon={cannon} failures=0" in r.stdout


EXPECTED = {
    "transa": ("PBLASArgumentError", "1"),
    "transb": ("PBLASArgumentError", "2"),
    "m<0": ("PBLASArgumentError", "3"),
    "n<0": ("PBLASArgumentError", "4"),
    "k float": ("PBLASArgumentError", "5"),
    "alpha str": ("PBLASArgumentError", "6"),
    "A not matrix": ("PBLASArgumentError", "7"),
    "ia out of range": ("PBLASArgumentError", "8"),
    "ja<0": ("PBLASArgumentError", "9"),
    "k too big for A": ("PBLASArgumentError", "9"),
    "transposed A too small": ("PBLASArgumentError", "9"),
    "A on other grid": ("PBLASArgumentError", "10"),
    "jb out of range": ("PBLASArgumentError", "13"),
    "beta None": ("PBLASArgumentError", "15"),
    "ic out of range": ("PBLASArgumentError", "17"),
    "jc<0": ("PBLASArgumentError", "18"),
    "bad algorithm": ("PBLASArgumentError", "19"),
    "symm side": ("PBLASArgumentError", "1"),
    "symm uplo": ("PBLASArgumentError", "2"),
    "symm m<0": ("PBLASArgumentError", "3"),
    "symm A too small": ("PBLASArgumentError", "7"),
    "symm B on other grid": ("PBLASArgumentError", "13"),
    "symm ic": ("PBLASArgumentError", "17"),
    "grid too big": ("GridError", "-"),
    "grid zero": ("GridError", "-"),
    "grid order": ("GridError", "-"),
    "block size 0": ("DescriptorError", "-"),
    "rsrc outside grid": ("DescriptorError", "-"),
    "from_global 1-D": ("DescriptorError", "-"),
}


@pytest.mark.parametrize("nprow,npcol", [(2, 2), (1, 3)])
def test_bad_arguments_raise_on_every_rank_without_hang(nprow, npcol):
    n = nprow * npcol
    r = run_python(n, PROGRAMS / "linalg_errors.py", str(nprow), str(npcol), timeout=180).check()
    seen: dict[tuple[int, str], tuple[str, str]] = {}
    for line in r.stdout.splitlines():
        m = re.match(r"rank (\d+) CASE (.+?) -> (\w+)(?: position (\S+))? \|", line)
        if m:
            seen[(int(m.group(1)), m.group(2))] = (m.group(3), m.group(4))
    for rank in range(n):
        for case, expected in EXPECTED.items():
            assert seen.get((rank, case)) == expected, (rank, case, seen.get((rank, case)), r.stdout)
        assert f"rank {rank} FINISHED ok=True" in r.stdout
    # Messages name the argument and say what to do.
    assert "argument 8 is illegal: ia=1" in r.stdout
    assert "different process grid" in r.stdout


@pytest.mark.parametrize("nprow,npcol", [(1, 1), (2, 2), (2, 3)], ids=["1x1", "2x2", "2x3"])
def test_redistribute_same_layout_matches_general_path(nprow, npcol):
    """The no-message path of ``redistribute`` is taken exactly when the layouts agree and returns the
    ``Alltoallv`` path's bytes; the triangle (made in place, or copied out of A in one pass) returns the
    ``np.where`` formula's bytes (NaN, Inf and -0.0 in A), and A is left unchanged."""
    program = Path(__file__).resolve().parent / "programs" / "redistribute_same_layout.py"
    r = run_python(nprow * npcol, program, str(nprow), str(npcol), timeout=240).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    # 2 dtypes x (24 layouts + 2 x 32 triangles); local: 9 layouts per dtype (on 1 x 1 all 20 untransposed);
    # triangles copied out of A in one pass: the square-blocked matrix's untransposed ones at aligned offsets
    # (on 1 x 1 every untransposed one)
    fast, tri_fast = (18, 16) if nprow * npcol > 1 else (40, 64)
    assert f"DONE cases=176 fast={fast} tri_fast={tri_fast} failures=0" in r.stdout
