"""ftkit's event log, through Python's :mod:`logging`: logger ``ftkit`` and its children.

What is logged (FTI's one line per event, and its ``verbosity`` key):

- INFO, on rank 0 only: one line per event of the job -- a checkpoint taken (id, level, bytes, seconds,
  bandwidth), a recovery (checkpoint, level, bytes, seconds), a level completed by background
  post-processing, a process failure seen and what the repair did (spare promoted, shrink), an online
  restore. The loggers are ``ftkit.checkpoint``, ``ftkit.recovery`` and ``ftkit.failure``.
- DEBUG, on every rank: that rank's share (its file, its bytes, its level).
- WARNING: what the user should look at (a checkpoint skipped by a recovery as unusable), once per job
  (rank 0). A normal run logs nothing at WARNING.

The level comes from, first to last: the environment variable ``FTKIT_LOG`` (``debug``, ``info``,
``warning``, ``error``, ``off``; or FTI's verbosity digit ``1``-``3``), ``[ftkit] log_level``, FTI's
``[basic] verbosity`` (1 debug, 2 info, 3 warnings and errors only). Without any of them: INFO (FTI's
default ``verbosity = 2``) unless the application configured logging itself (a handler on the root logger),
in which case ftkit's loggers inherit the root's level. A level the application set on the ``ftkit`` logger
is kept (only ``FTKIT_LOG`` overrides it).

Output: :func:`configure` attaches one handler to ``ftkit`` that writes ``[ftkit HH:MM:SS rank R] ...``
lines to standard error, but only while the application has not configured logging: when the root logger or
``ftkit`` has another handler (checked at each record), it stays silent and the records reach the
application's handlers as any other library's do.

Cost when disabled: callers test :func:`logging.Logger.isEnabledFor` before gathering or formatting
anything, and pass ``%`` arguments (formatted only when a record is emitted); nothing here communicates.
"""

from __future__ import annotations

import logging
import os
import sys
import time

__all__ = ["ROOT", "ENV", "VERBOSITY", "NAMES", "OFF", "get_logger", "parse_level", "choose_level",
           "configure", "RankHandler", "warn_once", "format_size"]

#: Name of ftkit's root logger.
ROOT = "ftkit"
#: Environment variable that overrides the configured level.
ENV = "FTKIT_LOG"
#: Level above every record: nothing is logged.
OFF = logging.CRITICAL + 10
#: FTI's ``verbosity`` values and the levels they mean (FTI prints level >= verbosity).
VERBOSITY = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING}
#: Level names accepted by ``[ftkit] log_level`` and ``FTKIT_LOG``.
NAMES = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
         "off": OFF}

_set_by_ftkit: int | None = None   # the level configure() last gave the 'ftkit' logger
_warned: set[str] = set()


def get_logger(name: str = "") -> logging.Logger:
    """Return ftkit's logger, or its child ``ftkit.<name>``."""
    return logging.getLogger(f"{ROOT}.{name}" if name else ROOT)


def parse_level(text: str) -> int | None:
    """Return the level ``text`` names (a name of :data:`NAMES` or a verbosity digit), or None."""
    word = text.strip().lower()
    if word.isdigit():
        return VERBOSITY.get(int(word))
    return NAMES.get(word)


def choose_level(verbosity: int, log_level: str, env: str, *, verbosity_set: bool) -> int | None:
    """Return the level for the ``ftkit`` logger, or None to leave it unset (inherit the root's).

    ``env`` wins (when it names a level), then ``log_level``, then ``verbosity`` when the configuration set it
    (``verbosity_set``); otherwise None.
    """
    for text in (env, log_level):
        level = parse_level(text) if text else None
        if level is not None:
            return level
    return VERBOSITY.get(verbosity) if verbosity_set else None


class RankHandler(logging.Handler):
    """Write ``[ftkit HH:MM:SS rank R] message`` to ``sys.stderr``, unless the application configured
    logging (another handler on the root logger or on ``ftkit``)."""

    def __init__(self, rank: int | None = None) -> None:
        super().__init__()
        self.rank = _launcher_rank() if rank is None else rank

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers or any(h is not self for h in get_logger().handlers):
            return  # the application's handlers get the record (it propagates to them)
        try:
            stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
            kind = f"{record.levelname}: " if record.levelno >= logging.WARNING else ""
            sys.stderr.write(f"[ftkit {stamp} rank {self.rank}] {kind}{record.getMessage()}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into the application
            self.handleError(record)


def _launcher_rank() -> int | str:
    """This process's rank as the launcher set it (before MPI is initialised), or '?'."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return "?"


def configure(verbosity: int, log_level: str, rank: int, *, verbosity_set: bool = False) -> None:
    """Set the ``ftkit`` logger's level and attach its :class:`RankHandler` (once); not collective.

    Parameters
    ----------
    verbosity
        FTI's ``[basic] verbosity`` (1, 2 or 3).
    log_level
        ``[ftkit] log_level`` (empty: not set).
    rank
        This process's rank, shown by the handler.
    verbosity_set
        Whether the configuration file set ``verbosity`` (its default alone does not override the
        application's logging).
    """
    global _set_by_ftkit
    logger = get_logger()
    env = os.environ.get(ENV, "")
    level = choose_level(verbosity, log_level, env, verbosity_set=verbosity_set)
    if level is None and not logging.getLogger().handlers:
        level = logging.INFO  # FTI's default (verbosity = 2), when nobody configured logging
    ours = logger.level == logging.NOTSET or logger.level == _set_by_ftkit
    if level is not None and (ours or parse_level(env) is not None):
        logger.setLevel(level)
        _set_by_ftkit = level
    handler = next((h for h in logger.handlers if isinstance(h, RankHandler)), None)
    if handler is None:
        logger.addHandler(RankHandler(rank))
    else:
        handler.rank = rank


def warn_once(logger: logging.Logger, key: str, msg: str, *args: object) -> None:
    """Log ``msg % args`` at WARNING the first time ``key`` is seen in this process (callers log on one
    rank, so a warning appears once per job)."""
    if key in _warned or not logger.isEnabledFor(logging.WARNING):
        return
    _warned.add(key)
    logger.warning(msg, *args)


def format_size(nbytes: float) -> str:
    """Return ``nbytes`` in binary units (``"64 MiB"``), as the event lines show sizes.

    Here, not only in :mod:`ftkit.models.units` (which re-exports it): the first checkpoint line of a job
    imported the whole ``ftkit.models`` package for it, 20-80 ms on rank 0 inside the first checkpoint call
    (issue 37).
    """
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= factor:
            return f"{nbytes / factor:.4g} {unit}"
    return f"{nbytes:.0f} B"
