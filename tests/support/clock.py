"""Fixed instants for test data (it never depends on the wall clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at_second(seconds: float) -> datetime:
    """A fixed instant: T0 plus `seconds` (test data never depends on the wall clock)."""
    return T0 + timedelta(seconds=seconds)


def ms_at_second(seconds: float) -> int:
    return int(at_second(seconds).timestamp() * 1000)


# The stuck verdicts' clock margin (verdict_outcomes.COMPLETENESS_SLACK_MS, a minute, for clocks
# that drift apart) in tests whose clients all share this machine's clock: 3 s stands in for it,
# so a test need not wait a minute for a ledger to speak for the rows created after it started.
SHARED_CLOCK_SLACK_MS = 3_000
_SLACK_MODULES = (
    "auditor.stuck.verdict_outcomes",
    "auditor.stuck.verdicts_absent",
    "auditor.stuck.verdicts_unplaced",
    "auditor.stuck.untraced",
)


def shared_clock_slack(monkeypatch: object) -> float:
    """Set the margin to SHARED_CLOCK_SLACK_MS in every module that holds it (some import it by
    name); returns the seconds to wait past a producer's start for its ledger to speak."""
    import importlib

    for name in _SLACK_MODULES:
        monkeypatch.setattr(importlib.import_module(name), "COMPLETENESS_SLACK_MS", SHARED_CLOCK_SLACK_MS)  # type: ignore[attr-defined]
    return SHARED_CLOCK_SLACK_MS / 1000 + 1.0
