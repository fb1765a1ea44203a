"""Process-failure handling: detection with deadlines, ULFM agreement and repair, the process-state table."""

from __future__ import annotations

from .detect import DeathWatch, Fenced, default_timeout, ft_dup, is_failure_error, measure_round_trip
from .exchange import Exchange, FailureDetector
from .state import (
    get_state_table,
    load_state_table,
    persist_state_table,
    record_failures,
    reset_state,
    save_state_table,
    set_state_table,
)
from .ulfm import (
    agree_flag,
    agree_on_dead,
    exit_without_finalize,
    failed_ranks,
    guarded,
    repair,
    require_ulfm,
    revoke,
)

__all__ = [
    "DeathWatch",
    "Exchange",
    "FailureDetector",
    "Fenced",
    "default_timeout",
    "ft_dup",
    "is_failure_error",
    "measure_round_trip",
    "get_state_table",
    "set_state_table",
    "reset_state",
    "record_failures",
    "persist_state_table",
    "save_state_table",
    "load_state_table",
    "agree_on_dead",
    "agree_flag",
    "exit_without_finalize",
    "failed_ranks",
    "guarded",
    "repair",
    "revoke",
    "require_ulfm",
]
