"""Report periods: a schedule's report covers the last whole UTC day or ISO week.

Beat builds at 06:00 UTC (weekly: on Monday), so the period that just ended has had six
hours for late runs to finish before it is reported.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

DAILY = "daily"
WEEKLY = "weekly"
PERIODS = ((DAILY, "daily"), (WEEKLY, "weekly (Monday)"))
BUILD_HOUR_UTC = 6


def last_full_period(period: str, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the last whole day (daily) or Monday-to-Monday week (weekly) before ``now``."""
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == DAILY:
        return midnight - timedelta(days=1), midnight
    if period == WEEKLY:
        monday = midnight - timedelta(days=midnight.weekday())
        return monday - timedelta(days=7), monday
    raise ValueError(f"unknown report period {period!r} (expected {DAILY} or {WEEKLY})")


def check_period(start: datetime, end: datetime) -> None:
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("a report period needs aware datetimes (UTC)")
    if start >= end:
        raise ValueError(f"a report period must end after it starts, got {start.isoformat()} .. {end.isoformat()}")
