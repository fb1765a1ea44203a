"""Reliability and cost models: catastrophic-failure probability, encoding time, checkpoint interval."""

from __future__ import annotations

from .interval import daly_interval, expected_waste, young_interval
from .units import parse_duration, parse_size

__all__ = ["daly_interval", "expected_waste", "young_interval", "parse_duration", "parse_size"]
