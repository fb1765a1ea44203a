"""Detector pieces that need no MPI job: the timeout rule and error classification."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from ftkit.errors import ProcessFailure, TimeoutFailure
from ftkit.failure import Fenced, default_timeout, is_failure_error
from ftkit.failure.detect import DEFAULT_FACTOR, DEFAULT_MIN_TIMEOUT


def test_timeout_is_factor_times_round_trip_with_a_floor():
    assert default_timeout(2.0) == pytest.approx(2.0 * DEFAULT_FACTOR)
    assert default_timeout(1e-5) == DEFAULT_MIN_TIMEOUT  # a fast network never gives a hair trigger
    assert default_timeout(0.01, factor=5, min_timeout=0.02) == pytest.approx(0.05)


def test_failure_error_classification():
    assert is_failure_error(MPI.Exception(MPI.ERR_PROC_FAILED))
    assert is_failure_error(MPI.Exception(MPI.ERR_REVOKED))
    assert not is_failure_error(MPI.Exception(MPI.ERR_TRUNCATE))
    assert not is_failure_error(ValueError("x"))


def test_fenced_is_a_process_failure_naming_the_rank():
    exc = Fenced("out", [3])
    assert isinstance(exc, ProcessFailure) and exc.failed_ranks == (3,)
    assert issubclass(TimeoutFailure, ProcessFailure)
