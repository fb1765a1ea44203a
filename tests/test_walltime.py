"""The job's end: ``[ftkit] end_time`` / ``FTKIT_END_TIME`` parsed strictly, SLURM's variable read."""

from __future__ import annotations

import pytest

from ftkit.config import Config
from ftkit.errors import ConfigError
from ftkit.walltime import job_end_time, parse_end_time


def test_parse_end_time_forms():
    assert parse_end_time("1796486400") == 1796486400.0
    assert parse_end_time("2026-12-05T18:00:00Z") == parse_end_time("2026-12-05T19:00:00+01:00")


@pytest.mark.parametrize("bad", ["tomorrow", "2026-12-05T18:00:00", "-5", "nan", ""])
def test_parse_end_time_refuses(bad):
    with pytest.raises(ConfigError):
        parse_end_time(bad)


def test_config_checks_end_time():
    with pytest.raises(ConfigError, match="no time zone"):
        Config(end_time="2026-12-05T18:00:00")
    assert Config(end_time="1796486400").end_time == "1796486400"
    with pytest.raises(ConfigError):
        Config(exit_level=5)


def test_job_end_time_sources():
    assert job_end_time("100", {"SLURM_JOB_END_TIME": "200"}) == (100.0, "[ftkit] end_time")
    assert job_end_time("", {"FTKIT_END_TIME": "150", "SLURM_JOB_END_TIME": "200"})[0] == 150.0
    assert job_end_time("", {"SLURM_JOB_END_TIME": "200"}) == (200.0, "SLURM")
    assert job_end_time("", {}) == (None, "unknown")
