"""Monte Carlo estimates of the catastrophic-failure probabilities, with a Wilson confidence interval.

They simulate the same setting as :mod:`ftkit.models.reliability` (x distinct failed nodes, uniformly at
random, among n nodes in groups of k consecutive nodes) and are used to cross-check the exact counts. Trials
run in batches of vectorized numpy work; a seed makes the estimate reproducible.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ..errors import ModelError
from .reliability import Scheme, check_layout

__all__ = ["catastrophic_probability_mc", "partner_probability_mc", "scheme_probability_mc",
           "wilson_interval"]

# Elements (trials × sampled nodes) per numpy batch: a few MB of int64, whatever the trial count.
_BATCH_ELEMENTS = 1 << 19


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Return the Wilson score interval for a binomial proportion.

    E. B. Wilson, "Probable inference, the law of succession, and statistical inference", JASA 22, 1927.
    Unlike the normal approximation it stays inside [0, 1] and is not empty when ``successes`` is 0 or
    ``trials``.

    Parameters
    ----------
    successes
        Number of successes, ``0 <= successes <= trials``.
    trials
        Number of trials, > 0.
    confidence
        Two-sided confidence level in (0, 1).

    Returns
    -------
    (low, high)
        Interval bounds.

    Raises
    ------
    ModelError
        On out-of-range arguments.
    """
    if trials <= 0 or not 0 <= successes <= trials:
        raise ModelError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    if not 0.0 < confidence < 1.0:
        raise ModelError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _sample_failures(rng: np.random.Generator, n: int, x: int, batch: int) -> np.ndarray:
    """Return a (batch, x) array whose rows are sorted uniformly random x-subsets of range(n)."""
    if x * x <= n:
        # Few failures among many nodes: draw with replacement and redraw the rare rows with a repeat.
        rows = np.sort(rng.integers(0, n, size=(batch, x)), axis=1)
        while True:
            bad = np.flatnonzero((np.diff(rows, axis=1) == 0).any(axis=1)) if x > 1 else np.empty(0, np.intp)
            if bad.size == 0:
                return rows
            rows[bad] = np.sort(rng.integers(0, n, size=(bad.size, x)), axis=1)
    # Many failures: the x smallest of n random keys are a uniform x-subset.
    keys = rng.random((batch, n))
    return np.sort(np.argpartition(keys, x - 1, axis=1)[:, :x], axis=1)


def _run(n: int, k: int, x: int, trials: int, seed: int | None, confidence: float,
         lost) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ModelError(f"trials must be a positive integer, got {trials!r}")
    rng = np.random.default_rng(seed)
    per_row = max(x if x * x <= n else n, 1)
    batch_size = max(1, _BATCH_ELEMENTS // per_row)
    hits, done = 0, 0
    while done < trials:
        batch = min(batch_size, trials - done)
        if x == 0:
            done += batch
            continue
        hits += int(lost(_sample_failures(rng, n, x, batch)).sum())
        done += batch
    low, high = wilson_interval(hits, trials, confidence)
    return hits / trials, low, high


def catastrophic_probability_mc(n: int, k: int, t: int, x: int, trials: int = 100_000,
                                seed: int | None = None, *,
                                confidence: float = 0.95) -> tuple[float, float, float]:
    """Estimate :func:`~ftkit.models.catastrophic_probability` by simulation.

    Parameters
    ----------
    n, k, t, x
        Nodes, group size, failures a group tolerates, simultaneous failures (as in the exact function).
    trials
        Number of simulated failure events.
    seed
        Seed of :func:`numpy.random.default_rng` (``None``: fresh entropy).
    confidence
        Level of the Wilson interval.

    Returns
    -------
    (estimate, low, high)
        Fraction of trials in which some group got more than ``t`` failures, and its confidence interval.

    Raises
    ------
    ModelError
        On an invalid layout or a non-positive trial count.
    """
    n, k, x, _ = check_layout(n, k, x, t)
    t = int(t)

    def lost(rows: np.ndarray) -> np.ndarray:
        if x <= t:
            return np.zeros(rows.shape[0], dtype=bool)
        groups = rows // k
        # Rows are sorted, so a group holding t+1 failures shows up as equal ids t columns apart.
        return (groups[:, t:] == groups[:, : x - t]).any(axis=1)

    return _run(n, k, x, trials, seed, confidence, lost)


def partner_probability_mc(n: int, k: int, x: int, trials: int = 100_000, seed: int | None = None,
                           *, confidence: float = 0.95) -> tuple[float, float, float]:
    """Estimate :func:`~ftkit.models.partner_probability` (ring partner copy) by simulation.

    Parameters
    ----------
    n, k, x
        Nodes, ring size, simultaneous failures.
    trials, seed, confidence
        As in :func:`catastrophic_probability_mc`.

    Returns
    -------
    (estimate, low, high)
        Fraction of trials in which some node and its ring successor both failed, and its interval.

    Raises
    ------
    ModelError
        On an invalid layout or a non-positive trial count.
    """
    n, k, x, _ = check_layout(n, k, x)

    def lost(rows: np.ndarray) -> np.ndarray:
        batch = rows.shape[0]
        offset = (np.arange(batch, dtype=np.int64) * n)[:, None]
        keys = (rows + offset).ravel()  # globally sorted: rows are sorted and offset by row
        successor = ((rows // k) * k + (rows % k + 1) % k + offset).ravel()
        pos = np.minimum(np.searchsorted(keys, successor), keys.size - 1)
        return (keys[pos] == successor).reshape(batch, -1).any(axis=1)

    return _run(n, k, x, trials, seed, confidence, lost)


def scheme_probability_mc(scheme: Scheme, n: int, k: int, x: int, trials: int = 100_000,
                          seed: int | None = None, *, confidence: float = 0.95) -> tuple[float, float, float]:
    """Estimate ``scheme.probability(n, k, x)`` by simulation; returns ``(estimate, low, high)``.

    Raises
    ------
    ModelError
        On an invalid layout or a non-positive trial count.
    """
    if scheme.ring:
        return partner_probability_mc(n, k, x, trials, seed, confidence=confidence)
    return catastrophic_probability_mc(n, k, scheme.tolerance(k), x, trials, seed, confidence=confidence)
