"""Optimal checkpoint interval (Young, Daly) and the expected fraction of machine time lost.

All quantities are in seconds. ``cost`` (δ) is the time to take one checkpoint, ``mtbf`` (M) the mean time
between failures of the whole job (failures exponentially distributed), the interval (τ) is the *compute*
time between two checkpoints (the checkpoint cost comes on top), and ``restart`` (R) the time to restart
after a failure.
"""

from __future__ import annotations

import math

from ..errors import ModelError

__all__ = ["young_interval", "daly_interval", "expected_waste"]


def _check_positive(value: float, name: str) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ModelError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return value


def young_interval(cost: float, mtbf: float) -> float:
    """Return Young's first-order optimal checkpoint interval ``sqrt(2·cost·mtbf)``.

    J. W. Young, "A first order approximation to the optimum checkpoint interval", Communications of the
    ACM 17(9):530-531, 1974.

    Parameters
    ----------
    cost
        Time to write one checkpoint (s), > 0.
    mtbf
        Mean time between failures (s), > 0.

    Returns
    -------
    float
        Compute time between checkpoints (s).

    Raises
    ------
    ModelError
        If ``cost`` or ``mtbf`` is not a positive finite number.

    Examples
    --------
    >>> young_interval(12.0, 6 * 3600.0)   # sqrt(2 * 12 * 21600) = 720 s
    720.0
    """
    cost = _check_positive(cost, "checkpoint cost")
    mtbf = _check_positive(mtbf, "MTBF")
    return math.sqrt(2.0 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    """Return Daly's higher-order optimal checkpoint interval.

    J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
    Generation Computer Systems 22(3):303-312, 2006, eq. (37)::

        τ_opt = sqrt(2δM) · [1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ     for δ < 2M
        τ_opt = M                                                           for δ ≥ 2M

    with δ the checkpoint cost and M the MTBF. It refines Young's ``sqrt(2δM)`` when the cost is not small
    against the MTBF, and does not depend on the restart time.

    Parameters
    ----------
    cost
        Time to write one checkpoint δ (s), > 0.
    mtbf
        Mean time between failures M (s), > 0.

    Returns
    -------
    float
        Compute time between checkpoints (s).

    Raises
    ------
    ModelError
        If ``cost`` or ``mtbf`` is not a positive finite number.

    Examples
    --------
    >>> round(daly_interval(12.0, 6 * 3600.0), 6)   # 720·(1 + 0.0055556 + 0.0000309) − 12
    712.022222
    """
    cost = _check_positive(cost, "checkpoint cost")
    mtbf = _check_positive(mtbf, "MTBF")
    if cost >= 2.0 * mtbf:
        return mtbf
    ratio = cost / (2.0 * mtbf)
    return math.sqrt(2.0 * cost * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost


def expected_waste(interval: float, cost: float, mtbf: float, restart: float = 0.0) -> float:
    """Return the expected fraction of wall-clock time not spent on useful computation.

    Uses Daly's model (FGCS 2006, eq. (13)) for exponentially distributed failures: a run that needs ``T_s``
    seconds of computation, checkpointing every ``τ`` seconds of computation at cost ``δ``, takes in
    expectation ``T_w = M·e^(R/M)·(e^((τ+δ)/M) − 1)·T_s/τ``, so the waste is ``1 − T_s/T_w``. It counts the
    checkpoints themselves, the recomputation of lost work and the restarts.

    Parameters
    ----------
    interval
        Compute time between checkpoints τ (s), > 0.
    cost
        Time to write one checkpoint δ (s), >= 0.
    mtbf
        Mean time between failures M (s), > 0.
    restart
        Time to restart after a failure R (s), >= 0.

    Returns
    -------
    float
        Waste fraction in [0, 1).

    Raises
    ------
    ModelError
        If a value is out of range.
    """
    interval = _check_positive(interval, "checkpoint interval")
    mtbf = _check_positive(mtbf, "MTBF")
    cost, restart = float(cost), float(restart)
    if not (math.isfinite(cost) and cost >= 0):
        raise ModelError(f"checkpoint cost must be a non-negative finite number of seconds, got {cost!r}")
    if not (math.isfinite(restart) and restart >= 0):
        raise ModelError(f"restart time must be a non-negative finite number of seconds, got {restart!r}")
    # expm1 keeps precision when (τ+δ) ≪ M, where the waste is small and a naive exp(x) − 1 cancels.
    stretch = mtbf * math.exp(restart / mtbf) * math.expm1((interval + cost) / mtbf) / interval
    return 1.0 - 1.0 / stretch
