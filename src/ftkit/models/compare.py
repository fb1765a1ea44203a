"""Compare protection schemes over group sizes: eq. (3) per failure scenario, or Pr(x_Ct | x) for one x.

This is the computation behind ``ftkit model reliability`` and its plot (reference 002, Figure 5(e)/(f)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from ..errors import ModelError
from .failures import FailureDistribution, combined_probability
from .montecarlo import scheme_probability_mc
from .reliability import SCHEMES, Scheme, check_layout

__all__ = ["SchemeResult", "ConditionalResult", "compare_schemes", "compare_conditional", "format_table",
           "format_conditional"]


@dataclass(frozen=True)
class SchemeResult:
    """One cell of the scenario comparison: eq. (3) with the exact conditional and with eq. (4)."""

    scenario: str
    scheme: str             # short name
    label: str
    group_size: int
    tolerance: int
    probability: float      # Σ Pr(x)·exact Pr(x_Ct|x)
    eq4_probability: float  # Σ Pr(x)·eq4(x), the paper's over-counting estimate


@dataclass(frozen=True)
class ConditionalResult:
    """``Pr(x_Ct | x)`` for one scheme and group size: eq. (4), exact, and optionally Monte Carlo."""

    scheme: str
    label: str
    group_size: int
    tolerance: int
    failed: int
    eq4: float
    exact: float
    mc: tuple[float, float, float] | None = None  # (estimate, low, high)


def _check_sizes(nodes: int, group_sizes: Sequence[int], schemes: Sequence[Scheme]) -> None:
    if not group_sizes:
        raise ModelError("no group sizes given: pass e.g. --group-sizes 4,8,16")
    if not schemes:
        raise ModelError("no protection scheme given: pass e.g. --schemes rs,xor,partner")
    for k in group_sizes:
        for scheme in schemes:
            check_layout(nodes, k, 0, scheme.tolerance(k))


def _conditional(scheme: Scheme, nodes: int, k: int, method: str, x: int) -> float:
    return scheme.probability(nodes, k, x, method=method)


def compare_schemes(nodes: int, group_sizes: Sequence[int], scenarios: Sequence[FailureDistribution],
                    schemes: Sequence[Scheme] = tuple(SCHEMES.values())) -> list[SchemeResult]:
    """Return eq. (3) for every scenario × group size × scheme.

    Parameters
    ----------
    nodes
        Number of nodes ``n``; every group size must divide it.
    group_sizes
        Group sizes ``k`` (e.g. 4, 8, 16).
    scenarios
        Failure distributions ``Pr(x)``.
    schemes
        Protection schemes (default: RS, XOR, partner copy).

    Raises
    ------
    ModelError
        On an invalid layout, a tolerance >= k, or a scenario with more failures than nodes.
    """
    _check_sizes(nodes, group_sizes, schemes)
    results = []
    for scenario in scenarios:
        for k in group_sizes:
            for s in schemes:
                exact = combined_probability(scenario, partial(_conditional, s, nodes, k, "exact"), nodes)
                approx = combined_probability(scenario, partial(_conditional, s, nodes, k, "eq4"), nodes)
                results.append(SchemeResult(scenario.name, s.name, s.label, k, s.tolerance(k), exact, approx))
    return results


def compare_conditional(nodes: int, group_sizes: Sequence[int], failed: int,
                        schemes: Sequence[Scheme] = tuple(SCHEMES.values()), *, trials: int = 0,
                        seed: int | None = None) -> list[ConditionalResult]:
    """Return ``Pr(x_Ct | x = failed)`` by eq. (4), exactly and (if ``trials > 0``) by Monte Carlo.

    Raises
    ------
    ModelError
        On an invalid layout, a tolerance >= k or ``failed`` outside [0, nodes].
    """
    _check_sizes(nodes, group_sizes, schemes)
    results = []
    for k in group_sizes:
        for s in schemes:
            mc = scheme_probability_mc(s, nodes, k, failed, trials, seed) if trials > 0 else None
            results.append(ConditionalResult(s.name, s.label, k, s.tolerance(k), failed,
                                             s.probability(nodes, k, failed, method="eq4"),
                                             s.probability(nodes, k, failed), mc))
    return results


def format_table(results: Sequence[SchemeResult]) -> str:
    """Return scenario results as an aligned text table."""
    lines = [f"{'scenario':<45} {'scheme':<22} {'k':>3} {'t':>2} {'Pr (exact, eq.3)':>17} "
             f"{'Pr (eq.4, eq.3)':>16}"]
    for r in results:
        lines.append(f"{r.scenario:<45} {r.label:<22} {r.group_size:>3} {r.tolerance:>2} "
                     f"{r.probability:>17.4e} {r.eq4_probability:>16.4e}")
    return "\n".join(lines)


def format_conditional(results: Sequence[ConditionalResult]) -> str:
    """Return conditional results as an aligned text table."""
    lines = [f"{'scheme':<22} {'k':>3} {'t':>2} {'x':>5} {'eq.(4)':>11} {'exact':>11} "
             f"{'Monte Carlo [95% CI]':>36}"]
    for r in results:
        mc = "" if r.mc is None else f"{r.mc[0]:.4e} [{r.mc[1]:.3e}, {r.mc[2]:.3e}]"
        lines.append(f"{r.label:<22} {r.group_size:>3} {r.tolerance:>2} {r.failed:>5} {r.eq4:>11.4e} "
                     f"{r.exact:>11.4e} {mc:>36}")
    return "\n".join(lines)
