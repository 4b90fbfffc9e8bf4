"""How long after a send its outcome can stay open, from the producers' own settings.

A producer retries a send, through leader failovers, until its message timeout: a record sent
that recently may still be written, and a failure may be reported that long after the broker
wrote the record. The auditor judges a send it never saw confirmed only once that time has
passed. librdkafka's defaults give SEND_OUTCOME_MS; the probes report each producer's own
settings in the clients topic (docs/contracts.md, `_audit.clients`), and a producer that
retries longer widens the bound for every send (never narrows it: a producer whose report is
gone may use the defaults). message.timeout.ms=0 retries without limit: then no unconfirmed
send is ever judged. No Spark here: the stuck diagnosis and the job's driver both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_MESSAGE_TIMEOUT_MS = 300_000  # librdkafka's message.timeout.ms (delivery.timeout.ms)
DEFAULT_SOCKET_TIMEOUT_MS = 60_000  # librdkafka's socket.timeout.ms
REPORT_BOUND_MS = 5_000  # auditor.probes.producer's bound on handing a delivery report over
# librdkafka's defaults: message.timeout.ms 300 s + socket.timeout.ms 60 s + the report bound.
SEND_OUTCOME_MS = DEFAULT_MESSAGE_TIMEOUT_MS + DEFAULT_SOCKET_TIMEOUT_MS + REPORT_BOUND_MS
UNBOUNDED = 0  # a producer that retries without limit (message.timeout.ms=0)
# A bound before any send: nothing unconfirmed is judged.
NOTHING_JUDGED_MS = -(1 << 62)


def _ms(config: Mapping[str, Any], names: tuple[str, ...], default: int) -> int:
    """The setting spelt `names` (aliases) as the producer ran with it: the later alias wins, a
    nested `default.topic.config` last (what the probes read too, stop 72)."""
    # Imported here: executors import this module from the spark_jobs zip, without auditor;
    # only the driver and the stuck diagnosis read producers' configs.
    from auditor.probes.config import applied_setting

    value = applied_setting(config, names)
    if value in (None, ""):
        return default
    try:
        return int(str(value))
    except ValueError:
        return default


def producer_outcome_ms(config: Mapping[str, Any]) -> int:
    """How long one producer's send can stay open (UNBOUNDED: without limit)."""
    timeout = _ms(config, ("message.timeout.ms", "delivery.timeout.ms"), DEFAULT_MESSAGE_TIMEOUT_MS)
    if timeout <= 0:
        return UNBOUNDED
    request = max(
        _ms(config, ("socket.timeout.ms",), DEFAULT_SOCKET_TIMEOUT_MS),
        _ms(config, ("request.timeout.ms",), 0),
    )
    return timeout + request + REPORT_BOUND_MS


def send_outcome_ms(configs: Iterable[Mapping[str, Any]]) -> int:
    """The bound for every send: the longest of the producers', never below the defaults'
    (UNBOUNDED when one of them retries without limit)."""
    bound = SEND_OUTCOME_MS
    for config in configs:
        outcome = producer_outcome_ms(config)
        if outcome == UNBOUNDED:
            return UNBOUNDED
        bound = max(bound, outcome)
    return bound


def judged_until_ms(now_ms: int, outcome_ms: int) -> int:
    """Sends last made up to this instant (epoch ms) are judged at `now_ms`."""
    return NOTHING_JUDGED_MS if outcome_ms == UNBOUNDED else now_ms - outcome_ms


def judging(outcome_ms: int) -> str | None:
    """What a run or a diagnosis says of a bound other than librdkafka's defaults'."""
    if outcome_ms == UNBOUNDED:
        return f"{describe(UNBOUNDED)}: no send never confirmed is judged"
    if outcome_ms == SEND_OUTCOME_MS:
        return None
    return f"a send never confirmed is judged {describe(outcome_ms)} after it was sent"


def describe(outcome_ms: int) -> str:
    if outcome_ms == UNBOUNDED:
        return "a producer retries sends without a time limit (message.timeout.ms=0)"
    if outcome_ms == SEND_OUTCOME_MS:
        return f"{SEND_OUTCOME_MS // 1000} s (librdkafka's defaults)"
    return f"{outcome_ms // 1000} s (the longest message timeout a producer reported)"
