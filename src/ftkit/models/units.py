"""Parse human-written durations (``12s``, ``6h``, ``30min``) and sizes (``64MiB``, ``1GB``).

A bare number is taken in the base unit (seconds, bytes). Anything else raises
:class:`~ftkit.errors.ModelError` with the accepted units, so the CLI can print one clear line.
"""

from __future__ import annotations

import math
import re

from ..errors import ModelError
from ..eventlog import format_size  # noqa: F401 - re-exported: the one implementation is the event log's

__all__ = ["parse_duration", "parse_size", "format_duration", "format_size"]

_DURATION_UNITS = {
    "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}

_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_duration(text: str | float | int, *, name: str = "duration") -> float:
    """Return ``text`` (e.g. ``"12s"``, ``"6h"``, ``"30min"``, ``"1.5d"``, ``"250ms"``, ``"40"``) in seconds.

    Parameters
    ----------
    text
        A non-negative number with an optional unit: ms, s, min (or m), h, d. A bare number is seconds.
    name
        What the value is, used in the error message (e.g. ``"--cost"``).

    Returns
    -------
    float
        The duration in seconds.

    Raises
    ------
    ModelError
        If the text is not a number followed by a known unit, or is negative, infinite or NaN.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
        unit = "s"
    else:
        match = _NUMBER_UNIT.match(str(text))
        if match is None:
            raise ModelError(f"{name} {text!r} is not a duration: write a number with a unit, "
                             f"e.g. 12s, 30min, 6h, 2d (a bare number means seconds)")
        value, unit = float(match.group(1)), (match.group(2).lower() or "s")
        if unit not in _DURATION_UNITS:
            raise ModelError(f"{name} {text!r} has unknown unit {match.group(2)!r}: "
                             f"use ms, s, min, h or d (e.g. 12s, 30min, 6h)")
    if not math.isfinite(value) or value < 0:
        raise ModelError(f"{name} {text!r} must be a finite, non-negative duration")
    return value * _DURATION_UNITS[unit]


def parse_size(text: str | int, *, name: str = "size") -> int:
    """Return ``text`` (e.g. ``"64MiB"``, ``"1GB"``, ``"4096"``) in bytes.

    Parameters
    ----------
    text
        A positive number with an optional unit: B, kB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of
        1024). A bare number is bytes.
    name
        What the value is, used in the error message.

    Returns
    -------
    int
        The size in bytes (rounded to the nearest byte).

    Raises
    ------
    ModelError
        If the text is not a number with a known unit, or is not positive.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        match = _NUMBER_UNIT.match(str(text))
        if match is None:
            raise ModelError(f"{name} {text!r} is not a size: write a number with a unit, "
                             f"e.g. 64MiB, 1GB, 4096")
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit not in _SIZE_UNITS:
            raise ModelError(f"{name} {text!r} has unknown unit {match.group(2)!r}: "
                             f"use B, kB, MB, GB, KiB, MiB or GiB")
    size = int(round(value * _SIZE_UNITS[unit]))
    if not math.isfinite(value) or size <= 0:
        raise ModelError(f"{name} {text!r} must be a positive number of bytes")
    return size


def format_duration(seconds: float) -> str:
    """Return ``seconds`` as a short human-readable string (``"2.31 h"``, ``"12.0 s"``)."""
    if seconds == 0:
        return "0 s"
    if seconds >= 86400:
        return f"{seconds / 86400:.3g} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    return f"{seconds * 1e3:.3g} ms"
