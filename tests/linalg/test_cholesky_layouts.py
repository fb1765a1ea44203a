"""PDPOTRF's per-layout tables, made once per layout and process and reused by later calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.mark.parametrize("nprow,npcol", [(2, 3), (3, 2), (2, 2)], ids=["2x3", "3x2", "2x2"])
def test_potrf_calls_on_changing_layouts(nprow, npcol):
    """One process calls pdpotrf on layouts that differ in n, nb, the offsets, the source process or uplo,
    then on the first again (``programs/potrf_layouts.py``): every factor is numpy's, the rest of A unchanged,
    the repeated layout's factor bit for bit its first one, and one cached layout per distinct layout."""
    r = run_python(nprow * npcol, PROGRAMS / "potrf_layouts.py", str(nprow), str(npcol), timeout=300).check()
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, "\n".join(fails[:20])
    assert "DONE cases=8 failures=0" in r.stdout, r.stdout + r.stderr
