"""Every benchmark script with a command line still starts: ``--help`` prints its usage.

The benchmarks are not run by ``make test`` (they time things, some need FTI or ScaLAPACK), so an import a
refactoring breaks (a helper moved between the scripts of ``benchmarks/fti/``) was found only when the quiet
measurement started. Loading each script up to its argument parser catches that.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py")
                 if ("argparse" in (text := p.read_text()) or "parse_args()" in text) and "__main__" in text)


def test_the_benchmark_scripts_are_found():
    assert len(SCRIPTS) >= 15
    assert BENCHMARKS / "fti" / "cluster_sbs.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_benchmark_script_prints_its_usage(script: Path) -> None:
    r = subprocess.run([sys.executable, str(script), "--help"], cwd=script.parent, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout
