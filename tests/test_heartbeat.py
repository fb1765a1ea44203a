"""ULFM's failure detector under ``ftkit launch``: a rank that computes longer than the detector's timeout
without calling MPI is not declared dead (its heartbeats go on from ``ftkit._heartbeat``'s thread), and a
program that calls ``MPI.Finalize`` itself still ends."""

from __future__ import annotations

import re

import pytest

from ftkit import _heartbeat

from .conftest import REPO, run_python

PROGRAM = REPO / "tests" / "programs" / "long_compute.py"
#: A short detector (heartbeat every 2 s, suspected after 10 s) and a computation 2.5 times its timeout:
#: without the thread, rank 1 is declared dead and the job aborts every time.
SHORT_DETECTOR = {"OMPI_MCA_mpi_ft_detector_period": "2", "OMPI_MCA_mpi_ft_detector_timeout": "10"}


@pytest.mark.mpi
def test_a_rank_computing_longer_than_the_detector_timeout_is_not_declared_dead():
    r = run_python(4, PROGRAM, "25", env=SHORT_DETECTOR, timeout=240)
    out = r.stdout + r.stderr
    assert not r.timed_out and r.returncode == 0, out
    assert "reported dead" not in out, out
    lines = re.findall(r"^R(\d) ok threads=(\S+)$", r.stdout, re.M)
    assert sorted(int(rank) for rank, _ in lines) == [0, 1, 2, 3], out
    assert all("ftkit-mpi-heartbeat" in names.split(",") for _, names in lines), out


@pytest.mark.mpi
def test_a_program_that_finalizes_mpi_itself_ends_with_the_thread_stopped_first():
    r = run_python(2, PROGRAM, "0", "--finalize", timeout=120)
    out = r.stdout + r.stderr
    assert not r.timed_out and r.returncode == 0, out
    assert sorted(re.findall(r"^R(\d) finalized$", r.stdout, re.M)) == ["0", "1"], out


def test_the_thread_is_wanted_only_with_the_detector_and_without_its_own_thread():
    assert _heartbeat.wanted({"OMPI_MCA_mpi_ft_detector": "true"})
    assert not _heartbeat.wanted({})
    assert not _heartbeat.wanted({"OMPI_MCA_mpi_ft_detector": "true", "OMPI_MCA_mpi_ft_detector_thread": "1"})
    assert _heartbeat.poll_interval({"OMPI_MCA_mpi_ft_detector_period": "5"}) == 1.25
    assert _heartbeat.poll_interval({}) == 0.75                     # Open MPI's default period, 3 s
    assert _heartbeat.poll_interval({"OMPI_MCA_mpi_ft_detector_period": "x"}) == 0.75
