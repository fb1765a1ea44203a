"""Young/Daly intervals and expected waste against hand-computed numbers; duration and size parsing."""

from __future__ import annotations

import math

import pytest

from ftkit.errors import ModelError
from ftkit.models import daly_interval, expected_waste, parse_duration, parse_size, young_interval


def test_young_hand_computed():
    assert young_interval(12, 6 * 3600) == pytest.approx(720.0)          # sqrt(2·12·21600) = sqrt(518400)
    assert young_interval(60, 24 * 3600) == pytest.approx(3220.0, rel=1e-3)  # sqrt(10 368 000) ≈ 3219.94


def test_daly_hand_computed():
    # δ/(2M) = 12/43200 = 1/3600: 720·(1 + (1/3)(1/60) + (1/9)(1/3600)) − 12 = 720 + 4 + 0.0222… − 12
    assert daly_interval(12, 6 * 3600) == pytest.approx(712.0 + 1 / 45, rel=1e-12)
    # δ/(2M) = 1/4: sqrt(2·100·200)·(1 + 1/6 + 1/36) − 100 = 200·43/36 − 100 = 138.888…
    assert daly_interval(100, 200) == pytest.approx(200 * 43 / 36 - 100, rel=1e-12)
    # δ >= 2M: the MTBF itself.
    assert daly_interval(100, 50) == 50.0
    assert daly_interval(100, 40) == 40.0


def test_daly_close_to_young_for_cheap_checkpoints():
    y, d = young_interval(1, 1e6), daly_interval(1, 1e6)
    assert abs(d - y) / y < 2e-3


def test_expected_waste():
    # τ=720, δ=12, M=21600, R=0: 1 − 720/(21600·(e^(732/21600) − 1))
    expected = 1 - 720 / (21600 * (math.exp(732 / 21600) - 1))
    assert expected_waste(720, 12, 21600) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.032960, abs=2e-5)
    # Without failures worth speaking of, the waste is the checkpoint share δ/(τ+δ).
    assert expected_waste(100, 1, 1e12) == pytest.approx(1 / 101, rel=1e-6)
    # Daly's interval is (near) optimal: moving away in either direction wastes more.
    best = daly_interval(12, 21600)
    w = expected_waste(best, 12, 21600)
    assert w < expected_waste(best * 0.5, 12, 21600) and w < expected_waste(best * 2, 12, 21600)
    # Restarts cost extra.
    assert expected_waste(720, 12, 21600, restart=60) > expected_waste(720, 12, 21600)


@pytest.mark.parametrize("cost,mtbf", [(0, 10), (-1, 10), (1, 0), (float("nan"), 1), (1, float("inf"))])
def test_bad_interval_arguments(cost, mtbf):
    with pytest.raises(ModelError):
        young_interval(cost, mtbf)
    with pytest.raises(ModelError):
        daly_interval(cost, mtbf)


@pytest.mark.parametrize("text,seconds", [("12s", 12), ("6h", 21600), ("30min", 1800), ("1.5d", 129600),
                                          ("250ms", 0.25), ("40", 40), (" 2 m", 120), ("1e3s", 1000)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,match", [("12x", "unknown unit"), ("abc", "not a duration"),
                                        ("-5s", "not a duration"), ("", "not a duration")])
def test_parse_duration_errors(text, match):
    with pytest.raises(ModelError, match=match):
        parse_duration(text, name="--cost")


def test_parse_size():
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1GB") == 10**9
    assert parse_size("4096") == 4096
    assert parse_size("1.5KiB") == 1536
    for bad in ("0", "12 parsecs", "-1MiB"):
        with pytest.raises(ModelError):
            parse_size(bad)
