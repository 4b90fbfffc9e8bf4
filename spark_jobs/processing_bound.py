"""How long a probed consumer session may still be processing what one of its commits passed.

A consumer that commits what it was handed before it is done with it (librdkafka's
auto-commit, an at-most-once loop, a worker pool behind the polling thread) passes records it
is still processing. Nothing a reader sees tells such a record from one the consumer skipped
until the session marks it, closes, or has had long enough: a later mark of the session above
it proves nothing where records are processed concurrently (a pool marks them in the order they
finish, stop 86). The bound is the session's max.poll.interval.ms as its probe reported it in
the clients topic (the longest its own client lets it go without polling; librdkafka's default
where it does not show it), capped by $AUDITOR_PROCESSING_BOUND_SECONDS where set (0: no hold).
It is a bound, not a proof: a worker still busy with a record that long after the commit that
passed it is taken to have skipped it. No Spark here: the job's driver and the stuck diagnosis
both use it."""

from __future__ import annotations

from typing import Any

DEFAULT_MAX_POLL_INTERVAL_MS = 300_000  # librdkafka's max.poll.interval.ms (and the Java client's)


def whole_ms(value: Any, what: str) -> int:
    """A whole number of ms, 0 or more, as a payload carries it; ValueError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number of ms, 0 or more, got {value!r}")
    return value


def parse_bounds(value: Any, what: str) -> dict[str, int]:
    """A session -> ms mapping as a payload carries it (JSON object); ValueError naming `what`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object of session ids to ms, got {value!r}")
    return {str(session): whole_ms(ms, f"{what}[{session!r}]") for session, ms in value.items()}
