"""The event log's level rules and its default handler (ftkit.eventlog), in-process."""

from __future__ import annotations

import logging

import pytest

from ftkit import eventlog
from ftkit.eventlog import OFF, RankHandler, choose_level, configure, get_logger, parse_level


@pytest.fixture
def clean_logging(monkeypatch):
    """The 'ftkit' logger and the root logger as in a program that configured nothing (pytest's capture
    handlers removed for the test)."""
    root, ftk = logging.getLogger(), get_logger()
    levels = root.level, ftk.level
    monkeypatch.setattr(ftk, "handlers", [])
    monkeypatch.setattr(eventlog, "_set_by_ftkit", None)
    monkeypatch.delenv(eventlog.ENV, raising=False)
    ftk.setLevel(logging.NOTSET)   # setLevel, not an attribute: it clears the loggers' level caches
    yield ftk
    root.setLevel(levels[0])
    ftk.setLevel(levels[1])


def _no_root_handlers(monkeypatch):
    """Remove the root logger's handlers for the rest of the test (pytest adds its own to it for the call)."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])


def test_parse_level_names_and_fti_verbosity_digits():
    assert parse_level("DEBUG") == logging.DEBUG and parse_level(" info ") == logging.INFO
    assert parse_level("off") == OFF and parse_level("1") == logging.DEBUG
    assert parse_level("3") == logging.WARNING
    assert parse_level("loud") is None and parse_level("7") is None


def test_choose_level_environment_then_log_level_then_verbosity():
    assert choose_level(2, "", "", verbosity_set=False) is None   # defaults alone decide nothing
    assert choose_level(3, "", "", verbosity_set=True) == logging.WARNING
    assert choose_level(3, "debug", "", verbosity_set=True) == logging.DEBUG
    assert choose_level(3, "debug", "error", verbosity_set=True) == logging.ERROR
    assert choose_level(1, "", "bogus", verbosity_set=True) == logging.DEBUG   # a bad FTKIT_LOG is ignored


def test_default_handler_prefixes_rank_and_time(clean_logging, capsys, monkeypatch):
    _no_root_handlers(monkeypatch)
    configure(2, "", 5)
    assert clean_logging.level == logging.INFO
    get_logger("checkpoint").info("checkpoint %d at L%d", 3, 2)
    get_logger("checkpoint").debug("not shown")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("rank 5] checkpoint 3 at L2\n"), err
    assert err.startswith("[ftkit ") and err[7:15].count(":") == 2, err


def test_application_logging_takes_over(clean_logging, capsys, monkeypatch):
    _no_root_handlers(monkeypatch)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.WARNING)
    configure(2, "", 0)                     # verbosity not set by the file: the application's levels rule
    assert clean_logging.level == logging.NOTSET
    get_logger("checkpoint").info("hidden by the root's WARNING level")
    get_logger("recovery").warning("shown by the application")
    assert capsys.readouterr().err == ""    # ftkit's own handler stays silent
    assert [r.getMessage() for r in records] == ["shown by the application"]


def test_a_level_the_application_set_is_kept_unless_ftkit_log_says(clean_logging, monkeypatch):
    clean_logging.setLevel(logging.ERROR)
    configure(1, "debug", 0, verbosity_set=True)
    assert clean_logging.level == logging.ERROR
    monkeypatch.setenv(eventlog.ENV, "debug")
    configure(1, "", 0, verbosity_set=True)
    assert clean_logging.level == logging.DEBUG
    assert sum(isinstance(h, RankHandler) for h in clean_logging.handlers) == 1   # attached once


def test_warn_once(clean_logging, capsys, monkeypatch):
    _no_root_handlers(monkeypatch)
    configure(2, "", 0)
    for _ in range(3):
        eventlog.warn_once(get_logger("recovery"), "k-test", "skipped %s", "checkpoint 4")
    assert capsys.readouterr().err.count("WARNING: skipped checkpoint 4") == 1
