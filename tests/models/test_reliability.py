"""Catastrophic-failure probabilities: exact vs brute force, eq. (4) by hand, Monte Carlo, monotonicity."""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations, pairwise
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftkit.errors import ModelError
from ftkit.models import (
    catastrophic_probability,
    catastrophic_probability_mc,
    eq4_probability,
    get_scheme,
    partner_probability,
    partner_probability_mc,
    wilson_interval,
)


def _brute_threshold(n: int, k: int, t: int, x: int) -> Fraction:
    bad = total = 0
    for failed in combinations(range(n), x):
        counts = [0] * (n // k)
        for node in failed:
            counts[node // k] += 1
        bad += max(counts) > t
        total += 1
    return Fraction(bad, total)


def _brute_partner(n: int, k: int, x: int) -> Fraction:
    bad = total = 0
    for failed in combinations(range(n), x):
        s = set(failed)
        bad += any((v // k) * k + (v % k + 1) % k in s for v in s)
        total += 1
    return Fraction(bad, total)


LAYOUTS = [(12, 2), (12, 3), (12, 4), (12, 6), (10, 5), (8, 4), (9, 3)]


@pytest.mark.parametrize("n,k", LAYOUTS)
def test_exact_threshold_equals_brute_force(n, k):
    for t in range(k):
        for x in range(n + 1):
            got = catastrophic_probability(n, k, t, x, exact=True)
            assert got == _brute_threshold(n, k, t, x), (n, k, t, x)


@pytest.mark.parametrize("n,k", LAYOUTS)
def test_exact_partner_equals_brute_force(n, k):
    for x in range(n + 1):
        assert partner_probability(n, k, x, exact=True) == _brute_partner(n, k, x), (n, k, x)


def test_eq4_hand_computed():
    # n=12, k=4 (g=3), t=1, x=3: 3·C(4,2)·C(10,1)/C(12,3) = 3·6·10/220
    assert eq4_probability(12, 4, 1, 3) == pytest.approx(180 / 220, rel=1e-15)
    # n=1408, k=8 (g=176), t=4, x=6: 176·C(8,5)·C(1403,1)/C(1408,6)
    expected = 176 * 56 * 1403 / comb(1408, 6)
    assert eq4_probability(1408, 8, 4, 6) == pytest.approx(expected, rel=1e-12)
    # By hand: 176/1408 = 1/8 and 1403 cancels, leaving 56·720/(8·1407·1406·1405·1404)
    assert eq4_probability(1408, 8, 4, 6) == pytest.approx(5040 / (1407 * 1406 * 1405 * 1404), rel=1e-12)
    assert eq4_probability(1408, 8, 4, 6) == pytest.approx(1.29154e-9, rel=1e-5)
    # Below the threshold nothing can be lost.
    assert eq4_probability(12, 4, 2, 2) == 0.0


def test_eq4_overcounts_and_can_exceed_one():
    # Exact for x = t+1 (each bad set counted once) ...
    assert eq4_probability(12, 4, 1, 2) == pytest.approx(float(catastrophic_probability(12, 4, 1, 2)))
    # ... over-counts above: the 12 sets with 3 failures in one group are counted 3 times (180 vs 156).
    assert catastrophic_probability(12, 4, 1, 3, exact=True) == Fraction(156, 220)
    assert eq4_probability(12, 4, 1, 3) > catastrophic_probability(12, 4, 1, 3)
    assert eq4_probability(8, 4, 1, 4) == pytest.approx(180 / 70)
    assert catastrophic_probability(8, 4, 1, 4) == 1.0


@given(st.sampled_from([(12, 3), (16, 4), (24, 6), (20, 4), (30, 5)]), st.data())
@settings(max_examples=60, deadline=None)
def test_eq4_is_an_upper_bound(layout, data):
    n, k = layout
    t = data.draw(st.integers(0, k - 1))
    x = data.draw(st.integers(0, n))
    assert eq4_probability(n, k, t, x) >= catastrophic_probability(n, k, t, x) - 1e-15


def test_large_machine_is_exact_and_fast():
    # n = 10 000 and x = 64 must neither overflow nor round to 0/1.
    p = catastrophic_probability(10_000, 4, 2, 64, exact=True)
    assert isinstance(p, Fraction) and 0 < p < 1
    assert catastrophic_probability(10_000, 16, 8, 64) > 0  # ~7e-14: tiny but not underflowed
    # For x = t+1 the exact value has a closed form: g·C(k,t+1)/C(n,t+1).
    closed_form = Fraction(1250 * comb(8, 5), comb(10_000, 5))
    assert catastrophic_probability(10_000, 8, 4, 5, exact=True) == closed_form
    assert catastrophic_probability(10_000, 4, 1, 10_000) == 1.0


def test_monotonic_in_failures():
    for k, t in [(4, 1), (4, 2), (8, 4), (16, 8)]:
        values = [catastrophic_probability(1408, k, t, x) for x in range(0, 80)]
        assert all(a <= b for a, b in pairwise(values)), (k, t)
        assert values[t] == 0.0 and values[t + 1] > 0
    values = [partner_probability(1408, 8, x) for x in range(0, 80)]
    assert all(a <= b for a, b in pairwise(values))


def test_monotonic_in_group_size():
    # Fixed tolerance: bigger groups gather more failures, so the loss probability grows with k.
    for x in (2, 5, 20, 64):
        xor = [catastrophic_probability(1440, k, 1, x) for k in (2, 4, 8, 16, 32)]
        assert all(a <= b for a, b in pairwise(xor)), x
    # FTI's RS (t = k/2): tolerance grows faster than exposure, so the probability falls with k.
    for x in (5, 20, 64):
        rs = [catastrophic_probability(1408, k, k // 2, x) for k in (4, 8, 16)]
        assert rs[0] > rs[1] > rs[2], x
    # More tolerance never hurts.
    for t in range(0, 7):
        assert catastrophic_probability(1408, 8, t, 20) >= catastrophic_probability(1408, 8, t + 1, 20)


@pytest.mark.parametrize("n,k,t,x", [(1408, 4, 1, 20), (1408, 8, 2, 30), (10_000, 4, 2, 64),
                                     (200, 10, 3, 40)])
def test_monte_carlo_brackets_exact(n, k, t, x):
    exact = catastrophic_probability(n, k, t, x)
    est, low, high = catastrophic_probability_mc(n, k, t, x, trials=20_000, seed=12345, confidence=0.999)
    assert low <= est <= high
    assert low <= exact <= high, (exact, low, high)


@pytest.mark.parametrize("n,k,x", [(1408, 4, 20), (1408, 16, 30), (10_000, 2, 64), (60, 6, 40)])
def test_partner_monte_carlo_brackets_exact(n, k, x):
    exact = partner_probability(n, k, x)
    est, low, high = partner_probability_mc(n, k, x, trials=20_000, seed=7, confidence=0.999)
    assert low <= exact <= high, (exact, low, high)


def test_monte_carlo_is_seeded_and_detects_a_wrong_model():
    a = catastrophic_probability_mc(1408, 4, 1, 20, trials=5000, seed=3)
    b = catastrophic_probability_mc(1408, 4, 1, 20, trials=5000, seed=3)
    assert a == b
    # The interval is tight enough to reject the paper's over-counting eq. (4) where it is far off.
    _, low, high = catastrophic_probability_mc(1408, 16, 1, 20, trials=20_000, seed=5, confidence=0.999)
    assert not low <= eq4_probability(1408, 16, 1, 20) <= high


def test_wilson_interval_known_values():
    low, high = wilson_interval(0, 100, 0.95)
    assert low == 0.0 and high == pytest.approx(0.036994, abs=1e-5)  # 1.96²/(100+1.96²)
    low, high = wilson_interval(50, 100, 0.95)
    assert (low, high) == (pytest.approx(0.40383, abs=1e-4), pytest.approx(0.59617, abs=1e-4))
    with pytest.raises(ModelError):
        wilson_interval(5, 3)


@pytest.mark.parametrize("args,match", [
    ((10, 4, 1, 2), "does not divide"),
    ((12, 4, 4, 2), r"t = 4 .* \[0, 3\]"),
    ((12, 4, -1, 2), "t = -1"),
    ((12, 1, 0, 2), "at least 2"),
    ((12, 4, 1, 13), "outside"),
    ((12.0, 4, 1, 2), "integer"),
])
def test_bad_layouts_raise_model_error(args, match):
    with pytest.raises(ModelError, match=match):
        catastrophic_probability(*args)
    with pytest.raises(ModelError, match=match):
        eq4_probability(*args)


def test_bad_trials_and_schemes():
    with pytest.raises(ModelError, match="trials"):
        catastrophic_probability_mc(12, 4, 1, 2, trials=0)
    with pytest.raises(ModelError, match="unknown protection scheme"):
        get_scheme("raid6")
    assert get_scheme("rs").tolerance(16) == 8
    assert get_scheme("t=3").tolerance(16) == 3
    assert get_scheme("partner").probability(12, 4, 3) == float(_brute_partner(12, 4, 3))
