"""Failure distributions, the CSV log reader and eq. (3)."""

from __future__ import annotations

import pytest

from ftkit.errors import ModelError
from ftkit.models import (
    FailureDistribution,
    catastrophic_probability,
    combined_probability,
    compare_schemes,
    default_scenarios,
    geometric_failures,
    get_scheme,
    load_failures,
)


def test_geometric_and_defaults():
    d = geometric_failures(0.5, max_failures=3)
    assert d.probabilities == pytest.approx({1: 4 / 7, 2: 2 / 7, 3: 1 / 7})
    few, many = default_scenarios()
    assert few.probabilities[1] > 0.89 and many.probabilities[1] == pytest.approx(0.5)
    assert geometric_failures(0.0).probabilities == {1: 1.0}


def test_load_failures_csv(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("x,count,comment\n1,900,single\n2,80,\n3,20,psu\n2,0,\n\n")
    d = load_failures(log)
    assert d.probabilities == pytest.approx({1: 0.9, 2: 0.08, 3: 0.02})
    assert d.max_failures == 3


@pytest.mark.parametrize("text,match", [
    ("nodes,events\n1,3\n", "header line 'x,count'"),
    ("x,count\n1,abc\n", r"log.csv:2: x must be an integer"),
    ("x,count\n0,5\n", r"log.csv:2: need x >= 1"),
    ("x,count\n1,-5\n", r"log.csv:2: need x >= 1 and count >= 0"),
    ("x,count\n", "no rows"),
    ("x,count\n1,0\n", "positive total"),
])
def test_load_failures_errors(tmp_path, text, match):
    log = tmp_path / "log.csv"
    log.write_text(text)
    with pytest.raises(ModelError, match=match):
        load_failures(log)


def test_missing_log_file(tmp_path):
    with pytest.raises(ModelError, match="cannot read failure log"):
        load_failures(tmp_path / "nope.csv")


def test_eq3_is_the_weighted_sum():
    d = FailureDistribution("t", {1: 0.5, 2: 0.3, 3: 0.2})
    got = combined_probability(d, lambda x: catastrophic_probability(12, 4, 1, x), nodes=12)
    assert got == pytest.approx(0.3 * (18 / 66) + 0.2 * (156 / 220), rel=1e-14)
    with pytest.raises(ModelError, match="only 2"):
        combined_probability(d, lambda x: 0.0, nodes=2)


def test_compare_schemes_orders_rs_below_xor():
    rs, xor = get_scheme("rs"), get_scheme("xor")
    results = compare_schemes(1408, [4, 8, 16], default_scenarios(), [rs, xor])
    assert len(results) == 2 * 3 * 2
    for scenario in {r.scenario for r in results}:
        for k in (4, 8, 16):
            cell = {r.scheme: r for r in results if r.scenario == scenario and r.group_size == k}
            assert cell["rs"].probability < cell["xor"].probability / 100  # orders of magnitude (Fig. 5(e))
            assert cell["xor"].eq4_probability >= cell["xor"].probability
    few = {r.group_size: r.probability for r in results if r.scheme == "xor" and "few" in r.scenario}
    many = {r.group_size: r.probability for r in results if r.scheme == "xor" and "many" in r.scenario}
    assert all(many[k] > few[k] for k in few)  # more correlated failures, more losses (Fig. 5(f))


def test_bad_distribution():
    with pytest.raises(ModelError, match="sums to"):
        FailureDistribution("bad", {1: 0.5})
    with pytest.raises(ModelError, match="integer >= 1"):
        FailureDistribution("bad", {0: 1.0})
    with pytest.raises(ModelError):
        geometric_failures(1.0)
