"""When does the job's allocation end? Read from the batch system or the configuration, never guessed.

:func:`job_end_time` answers, first source that applies:

1. ``[ftkit] end_time`` (or ``ftkit launch --end-time``, which exports it as ``FTKIT_END_TIME``), parsed by
   :func:`parse_end_time`: ISO 8601 *with* a time zone (``2026-12-05T18:00:00+01:00``, ``...Z``) or seconds
   since the epoch (``1796486400``). A time without a zone is refused: on a cluster the login node, the
   compute nodes and the scheduler may not share one.
2. SLURM: ``SLURM_JOB_END_TIME`` (seconds since the epoch, set by recent SLURM in the job's environment),
   else ``squeue -h -j $SLURM_JOB_ID -o %e`` (the end in the controller's local time, which is this node's:
   they share the cluster's zone), run with a timeout so a slow controller never holds the job.
3. None: the end is unknown and only signals and halt requests end the job early.
"""

from __future__ import annotations

import math
import os
import subprocess
from datetime import datetime

from .errors import ConfigError

__all__ = ["parse_end_time", "slurm_end_time", "job_end_time", "END_TIME_ENV"]

#: The environment variable ``ftkit launch --end-time`` sets (the config key wins over it).
END_TIME_ENV = "FTKIT_END_TIME"
_SQUEUE_TIMEOUT_S = 10.0


def parse_end_time(text: str, where: str = "end_time") -> float:
    """Return ``text`` (ISO 8601 with a zone, or seconds since the epoch) as seconds since the epoch.

    Raises
    ------
    ConfigError
        If ``text`` is neither, or is an ISO time without a zone.
    """
    raw = str(text).strip()
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{where} = {raw!r}: seconds since the epoch must be a positive number")
        return value
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise ConfigError(f"{where} = {raw!r} is not a time: give ISO 8601 with a zone "
                          "(2026-12-05T18:00:00+01:00, or ...Z for UTC) or seconds since the epoch") from None
    if when.tzinfo is None:
        raise ConfigError(f"{where} = {raw!r} has no time zone: add one (+01:00, Z) so every host reads the "
                          "same instant, or give seconds since the epoch")
    return when.timestamp()


def slurm_end_time(env: dict[str, str] | None = None, timeout: float = _SQUEUE_TIMEOUT_S) -> float | None:
    """Return the SLURM job's end (seconds since the epoch), or None outside SLURM or when it is unknown."""
    env = dict(os.environ) if env is None else env
    raw = env.get("SLURM_JOB_END_TIME", "").strip()
    if raw:
        try:
            return float(raw)
        except ValueError:
            pass
    job = env.get("SLURM_JOB_ID", "").strip()
    if not job:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True,
                             timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    try:
        return datetime.fromisoformat(text).timestamp()  # local time, as squeue prints it
    except ValueError:
        return None  # "N/A", "Unknown", "NONE"


def job_end_time(configured: str = "", env: dict[str, str] | None = None) -> tuple[float | None, str]:
    """Return the job's end (seconds since the epoch, or None) and where it was read from (for messages).

    Raises
    ------
    ConfigError
        If ``configured`` or ``$FTKIT_END_TIME`` is set but is not a time (:func:`parse_end_time`).
    """
    env = dict(os.environ) if env is None else env
    if str(configured).strip():
        return parse_end_time(configured, "[ftkit] end_time"), "[ftkit] end_time"
    if env.get(END_TIME_ENV, "").strip():
        return parse_end_time(env[END_TIME_ENV], END_TIME_ENV), END_TIME_ENV
    end = slurm_end_time(env)
    return end, "SLURM" if end is not None else "unknown"
