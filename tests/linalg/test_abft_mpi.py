"""ft_pdgemm / ft_pdsymm under mpirun on 1x1, 2x2 and 2x3 grids (programs: tests/programs/linalg_abft_*)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_python

PROG = Path(__file__).resolve().parents[1] / "programs" / "linalg_abft_run.py"
GRIDS = [(1, 1), (2, 2), (2, 3)]
# 1000 adversarial products in all (each checked with the rigorous and the statistical threshold)
FP_CASES = {(1, 1): 700, (2, 2): 180, (2, 3): 120}


def _summary(res) -> dict:
    res.check()
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("SUMMARY ")]
    assert len(lines) == 1, res.stdout
    return json.loads(lines[0][len("SUMMARY ") :])


@pytest.mark.mpi
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_no_false_positives_and_bit_identical_to_pdgemm(grid):
    nprow, npcol = grid
    s = _summary(
        run_python(
            nprow * npcol,
            PROG,
            str(nprow),
            str(npcol),
            "fp",
            "--cases",
            str(FP_CASES[grid]),
            "--seed",
            str(7 + nprow * 10 + npcol),
            timeout=400,
        )
    )
    assert s["cases"] == FP_CASES[grid]
    assert s["products"] == 2 * FP_CASES[grid]
    assert s["flagged"] == 0 and s["detected"] == 0
    assert s["symm"] >= 8
    # the residuals stay below the thresholds by a margin, and the statistical one is the tighter
    assert 0 < s["max_ratio_rig"] < 0.5 and 0 < s["max_ratio_stat"] < 0.5


@pytest.mark.mpi
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_injected_flips_are_detected_and_corrected(grid):
    nprow, npcol = grid
    s = _summary(
        run_python(
            nprow * npcol,
            PROG,
            str(nprow),
            str(npcol),
            "inject",
            "--cases",
            "24",
            "--seed",
            str(nprow + npcol),
            timeout=400,
        )
    )
    assert s["cases"] == 24
    # C flips: located in O(1) or recomputed; operand flips in transit recomputed; persistent ones raise
    assert s["located"] >= 12
    assert s["recomputed"] >= 4
    assert s["abft_errors"] == 4
    assert s["detect_mode"] >= 3
    assert s["symm"] == 4


@pytest.mark.mpi
def test_api_policy_detect_mode_and_rounding_alarms():
    res = run_python(4, Path(__file__).resolve().parents[1] / "programs" / "linalg_abft_api.py", timeout=300)
    res.check()
    for name in ("argument errors", "policy", "detect mode", "structured data", "corner cases"):
        assert f"OK {name}" in res.stdout, res.stdout


@pytest.mark.mpi
def test_cg_example_corrects_a_flip_on_a_checked_call():
    example = Path(__file__).resolve().parents[2] / "examples" / "cg.py"
    res = run_python(4, example, "--n", "160", "--nb", "16", "--flip-at", "20", timeout=300)
    res.check()
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("RESULT "))
    fields = dict(kv.split("=") for kv in line.split()[1:])
    assert fields["detected"] == "1" and fields["corrected"] == "1"
    assert fields["iterations"] == fields["reference"]
    assert float(fields["residual"]) < 1e-9 and float(fields["dx"]) < 1e-8
