"""Issue 13, defect 5: one NaN, Inf or 1e300 in A must not switch detection off silently.

The poisoned value makes the checksums of its whole block row non-finite (or overflow): those blocks are
reported as unchecked (never as checked), ``unchecked_is_error=True`` turns them into an ``ABFTError``
carrying the report, and a flip in another block row is still detected.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAM = Path(__file__).parents[1] / "programs" / "linalg_abft_nonfinite.py"

pytestmark = pytest.mark.mpi


def _report(poison: str) -> tuple[dict[str, str], str]:
    r = run_python(4, PROGRAM, "--poison", poison, timeout=120).check()
    m = re.search(r"REPORT checked=(\d+) unchecked=(\d+) total=(\d+) detected=(\d+) "
                  r"unchecked_blocks=(\[.*?\]) detected_blocks=(\[.*?\])", r.stdout)  # fmt: skip
    assert m, r.stdout + r.stderr
    keys = ("checked", "unchecked", "total", "detected", "unchecked_blocks", "detected_blocks")
    return dict(zip(keys, m.groups(), strict=True)), r.stdout


@pytest.mark.parametrize("poison", ["nan", "inf", "1e300"])
def test_poisoned_block_row_is_reported_unchecked_not_checked(poison):
    rep, out = _report(poison)
    assert rep["unchecked"] == "4" and rep["checked"] == "12" and rep["total"] == "16", out
    assert rep["unchecked_blocks"] == "[(0, 0), (0, 1), (0, 2), (0, 3)]", out
    assert rep["detected_blocks"] == "[(1, 1)]", out  # the flip outside the poisoned block row is still seen
    assert "STRICT error=ABFTError unchecked=4" in out, out


def test_finite_data_has_no_unchecked_blocks():
    rep, out = _report("none")
    assert rep["unchecked"] == "0" and rep["checked"] == "16", out
    assert rep["detected_blocks"] == "[(0, 0), (1, 1)]", out
    assert "STRICT error=None unchecked=0" in out, out
