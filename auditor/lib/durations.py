"""Durations written as 30s, 2m, 1h, 7d (or plain seconds)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)?")
_FACTORS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: object) -> int:
    """Seconds in ``value``; raises ValueError naming the expected forms."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration (expected e.g. 30s, 2m, 1h, 7d)")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return value
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match:
            return int(int(match.group(1)) * _FACTORS[match.group(2)])
    raise ValueError(f"{value!r} is not a duration (expected e.g. 30s, 2m, 1h, 7d)")
