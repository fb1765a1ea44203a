"""Reliability and cost models (reference 002): catastrophic-failure probability, encoding time, interval.

Only re-exports. matplotlib (plots) and MPI (measurements) are imported lazily by the modules that need
them, so importing this package is cheap.
"""

from __future__ import annotations

from .compare import compare_conditional, compare_schemes
from .encoding import EncodingModel
from .failures import (
    FailureDistribution,
    combined_probability,
    default_scenarios,
    geometric_failures,
    load_failures,
)
from .interval import daly_interval, expected_waste, young_interval
from .montecarlo import (
    catastrophic_probability_mc,
    partner_probability_mc,
    scheme_probability_mc,
    wilson_interval,
)
from .reliability import (
    SCHEMES,
    Scheme,
    catastrophic_probability,
    eq4_probability,
    get_scheme,
    partner_probability,
    threshold_scheme,
)
from .units import parse_duration, parse_size

__all__ = [
    "eq4_probability",
    "catastrophic_probability",
    "catastrophic_probability_mc",
    "partner_probability",
    "partner_probability_mc",
    "scheme_probability_mc",
    "wilson_interval",
    "SCHEMES",
    "Scheme",
    "get_scheme",
    "threshold_scheme",
    "FailureDistribution",
    "geometric_failures",
    "default_scenarios",
    "load_failures",
    "combined_probability",
    "compare_schemes",
    "compare_conditional",
    "EncodingModel",
    "young_interval",
    "daly_interval",
    "expected_waste",
    "parse_duration",
    "parse_size",
]
