"""Fixed instants for test data (it never depends on the wall clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at_second(seconds: float) -> datetime:
    """A fixed instant: T0 plus `seconds` (test data never depends on the wall clock)."""
    return T0 + timedelta(seconds=seconds)


def ms_at_second(seconds: float) -> int:
    return int(at_second(seconds).timestamp() * 1000)
