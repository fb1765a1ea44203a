"""The numpy fallbacks of the compiled BLAS calls (``FTKIT_NO_CBLAS=1``: what a numpy without scipy's CBLAS
gets): ``ft_pdpotrf``'s carry, transit check and initial checksums, and the triangle routines' ``trsm``,
run the same fault cases as with CBLAS, under the launcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import run_python

PROGRAMS = Path(__file__).resolve().parent / "programs"
NO_CBLAS = {"FTKIT_NO_CBLAS": "1"}


@pytest.mark.mpi
def test_the_variable_turns_the_compiled_calls_off(tmp_path):
    """What the other tests rely on: the ranks see no CBLAS at all."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ftkit.linalg import _blas\nprint('HAVE', _blas.HAVE_CBLAS, bool(_blas._trsm))\n")
    res = run_python(1, probe, env=NO_CBLAS).check()
    assert "HAVE False False" in res.stdout, res.stdout + res.stderr


@pytest.mark.mpi
def test_ft_pdpotrf_without_cblas_corrects_and_recomputes_on_2x2():
    """Error-free bit for bit ``pdpotrf``'s factor, flips in sent, received and held values corrected, two
    flips in one column recomputed (``programs/ft_potrf_grids.py``), on the numpy products."""
    res = run_python(4, PROGRAMS / "ft_potrf_grids.py", timeout=300, env=NO_CBLAS).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 18 and "FAIL" not in res.stdout, res.stdout


@pytest.mark.mpi
def test_ft_pdtrsm_without_cblas_on_non_square_grids():
    """Every flag combination on 2x3 and 3x2, error-free and with flips (``programs/ft_trsm_grids.py``), with
    numpy's triangular solve in place of ``?trsm``."""
    res = run_python(6, PROGRAMS / "ft_trsm_grids.py", timeout=300, env=NO_CBLAS).check()
    assert "DONE failures=0" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("CASE ") == 2 * (16 + 4) * 4 and "FAIL" not in res.stdout, res.stdout
