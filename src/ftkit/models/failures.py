"""Distributions of the number of simultaneously failed nodes, and eq. (3) of reference 002.

Reference 002 multiplies the conditional probability of a catastrophic failure given ``x`` failed nodes by
``Pr(x)``, the probability that a failure event takes down ``x`` nodes at once (estimated in the paper from
1280 failures logged on TSUBAME1 over four years), and sums over ``x``::

    Pr(catastrophic) = Σ_x Pr(x ∩ x_Ct) = Σ_x Pr(x) · Pr(x_Ct | x)          (3)

so the result is the probability that *one failure event* destroys a checkpoint level.

The TSUBAME log is not public, so ftkit ships two illustrative defaults (:func:`default_scenarios`), both
truncated geometric laws ``Pr(x) ∝ q^(x-1)`` for ``x = 1..64``: *few correlated failures* (q = 0.1: 90 % of
events are single-node) and *many correlated failures* (q = 0.5: half the events take down two or more
nodes, as with shared power supplies or a rack's cooling). Users pass their own log as a CSV file with a
header ``x,count`` and one row per number of simultaneously failed nodes (:func:`load_failures`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError

__all__ = ["FailureDistribution", "geometric_failures", "default_scenarios", "load_failures",
           "combined_probability"]


@dataclass(frozen=True)
class FailureDistribution:
    """``Pr(x)``: probability that a failure event takes down exactly ``x`` nodes (sums to 1)."""

    name: str
    probabilities: Mapping[int, float]

    def __post_init__(self) -> None:
        if not self.probabilities:
            raise ModelError(f"failure distribution {self.name!r} is empty")
        for x, p in self.probabilities.items():
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise ModelError(f"failure distribution {self.name!r}: x = {x!r} must be an integer >= 1")
            if not (math.isfinite(p) and p >= 0):
                raise ModelError(f"failure distribution {self.name!r}: Pr({x}) = {p!r} must be >= 0")
        total = math.fsum(self.probabilities.values())
        if abs(total - 1.0) > 1e-9:
            raise ModelError(f"failure distribution {self.name!r} sums to {total}, not 1")

    @property
    def max_failures(self) -> int:
        """Largest ``x`` with non-zero probability."""
        return max(x for x, p in self.probabilities.items() if p > 0)

    @classmethod
    def from_counts(cls, name: str, counts: Mapping[int, float]) -> FailureDistribution:
        """Normalize event counts per ``x`` into a distribution.

        Raises
        ------
        ModelError
            If the counts are negative or all zero.
        """
        total = math.fsum(counts.values())
        if any(c < 0 for c in counts.values()) or total <= 0:
            raise ModelError(f"failure counts of {name!r} must be >= 0 with a positive total")
        return cls(name, {int(x): c / total for x, c in sorted(counts.items()) if c > 0})


def geometric_failures(q: float, max_failures: int = 64, name: str | None = None) -> FailureDistribution:
    """Return the truncated geometric law ``Pr(x) ∝ q^(x-1)``, ``x = 1..max_failures``.

    Parameters
    ----------
    q
        Ratio between consecutive probabilities, ``0 <= q < 1`` (0: only single-node failures).
    max_failures
        Largest number of simultaneous failures, >= 1.
    name
        Label for tables and plots.

    Raises
    ------
    ModelError
        If ``q`` or ``max_failures`` is out of range.
    """
    if not 0.0 <= q < 1.0:
        raise ModelError(f"geometric parameter q = {q} must be in [0, 1)")
    if max_failures < 1:
        raise ModelError(f"max_failures = {max_failures} must be >= 1")
    weights = {x: q ** (x - 1) for x in range(1, max_failures + 1)}
    return FailureDistribution.from_counts(name or f"geometric q={q:g}", weights)


def default_scenarios() -> list[FailureDistribution]:
    """Return ftkit's two illustrative scenarios: few (q = 0.1) and many (q = 0.5) correlated failures."""
    return [geometric_failures(0.1, name="scenario 1: few correlated failures (q=0.1)"),
            geometric_failures(0.5, name="scenario 2: many correlated failures (q=0.5)")]


def load_failures(path: str | Path) -> FailureDistribution:
    """Read a failure log summary: a CSV file with header ``x,count``.

    Each row gives a number ``x >= 1`` of nodes that failed simultaneously and how many such events were
    logged (a non-negative number). Repeated ``x`` are added up. Extra columns are ignored.

    Parameters
    ----------
    path
        The CSV file.

    Returns
    -------
    FailureDistribution
        The normalized counts, named after the file.

    Raises
    ------
    ModelError
        If the file cannot be read, lacks the ``x`` and ``count`` columns, or has a bad row (the message
        gives the line number).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelError(f"cannot read failure log {path}: {exc.strerror or exc}") from exc
    reader = csv.DictReader(text.splitlines())
    fields = [f.strip().lower() for f in (reader.fieldnames or [])]
    if "x" not in fields or "count" not in fields:
        raise ModelError(f"failure log {path} must be a CSV file with a header line 'x,count' "
                         f"(got columns {reader.fieldnames})")
    reader.fieldnames = fields
    counts: dict[int, float] = {}
    for line, row in enumerate(reader, start=2):
        raw_x, raw_c = (row.get("x") or "").strip(), (row.get("count") or "").strip()
        if not raw_x and not raw_c:
            continue
        try:
            x, count = int(raw_x), float(raw_c)
        except ValueError:
            raise ModelError(f"{path}:{line}: x must be an integer and count a number, "
                             f"got x={raw_x!r}, count={raw_c!r}") from None
        if x < 1 or not (math.isfinite(count) and count >= 0):
            raise ModelError(f"{path}:{line}: need x >= 1 and count >= 0, got x={x}, count={raw_c}")
        counts[x] = counts.get(x, 0.0) + count
    if not counts:
        raise ModelError(f"failure log {path} has no rows: add lines 'x,count' after the header")
    return FailureDistribution.from_counts(path.name, counts)


def combined_probability(failures: FailureDistribution, conditional: Callable[[int], float],
                         nodes: int | None = None) -> float:
    """Return eq. (3): ``Σ_x Pr(x) · conditional(x)``, the catastrophic probability per failure event.

    Parameters
    ----------
    failures
        ``Pr(x)``.
    conditional
        ``x -> Pr(x_Ct | x)``, e.g. ``lambda x: catastrophic_probability(n, k, t, x)``.
    nodes
        Number of nodes of the machine; if given, a distribution with ``x > nodes`` is an error.

    Raises
    ------
    ModelError
        If the distribution needs more failed nodes than the machine has.
    """
    if nodes is not None and failures.max_failures > nodes:
        raise ModelError(f"failure distribution {failures.name!r} has events of {failures.max_failures} "
                         f"nodes but the machine has only {nodes}: use more nodes or a smaller log")
    return math.fsum(p * conditional(x) for x, p in sorted(failures.probabilities.items()) if p > 0)
