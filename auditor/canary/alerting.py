"""Canary problems for the webhook channels, judged on each stored minute, per topic partition.

- ``canary:loss``: raised when the minute lost records (acknowledged by the broker and not
  read within the SLA: records the broker rejected or has not acknowledged never count);
  resolved by a later minute that received records and lost none.
- ``canary:latency``: raised when the minute's p99 is above ``AUDITOR_CANARY_LATENCY_ALERT_MS``
  (default 5000); resolved by a later minute whose p99 is at or below it.

A minute in which the canary observed nothing on a partition (nothing received, nothing
lost: the cluster did not take records, only produce errors or unacked ones, or the
canary just started) is no evidence either way and changes nothing. Each channel applies its own thresholds on top
(``canary_loss``, ``canary_latency`` in its events).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from django.conf import settings

from auditor.alerts.problems import MAX_FINGERPRINT, raise_problem, resolve_problem
from auditor.canary.models import CanaryPoint

log = logging.getLogger(__name__)

DEFAULT_LATENCY_ALERT_MS = 5000


def latency_alert_ms() -> float:
    return float(getattr(settings, "AUDITOR_CANARY_LATENCY_ALERT_MS", DEFAULT_LATENCY_ALERT_MS))


def fingerprint(kind: str, topic: str, partition: int) -> str:
    """``canary:<kind>:<topic>/<partition>``; a topic too long for that is shortened with its hash."""
    text = f"canary:{kind}:{topic}/{partition}"
    if len(text) <= MAX_FINGERPRINT:
        return text
    digest = hashlib.sha256(topic.encode()).hexdigest()[:16]
    return f"canary:{kind}:{topic[:120]}~{digest}/{partition}"


def _where(point: CanaryPoint) -> str:
    leader = f", leader broker {point.leader}" if point.leader is not None else ""
    return f"{point.topic}/{point.partition} in minute {point.minute:%Y-%m-%d %H:%M} UTC{leader}"


def _details(point: CanaryPoint) -> dict[str, object]:
    return {
        "topic": point.topic,
        "partition": point.partition,
        "minute": point.minute.isoformat(),
        "session": point.session,
        "leader": point.leader,
        "sent": point.sent,
        "received": point.received,
        "lost": point.lost,
        "p99_ms": point.p99_ms,
    }


def judge_point(point: CanaryPoint, latency_threshold_ms: float) -> None:
    loss = fingerprint("loss", point.topic, point.partition)
    if point.lost > 0:
        raise_problem(
            "canary:loss",
            loss,
            None,
            f"canary lost {point.lost} record(s) on {_where(point)}",
            _details(point),
        )
    elif point.received > 0:
        resolve_problem(loss)

    latency = fingerprint("latency", point.topic, point.partition)
    if point.p99_ms is None:
        return
    if point.p99_ms > latency_threshold_ms:
        raise_problem(
            "canary:latency",
            latency,
            None,
            f"canary p99 latency {point.p99_ms:g} ms (over {latency_threshold_ms:g} ms) on {_where(point)}",
            {**_details(point), "latency_ms": point.p99_ms, "threshold_ms": latency_threshold_ms},
        )
    else:
        resolve_problem(latency)


def alert_on_minute(points: Iterable[CanaryPoint]) -> None:
    """Raise or resolve the canary problems of a stored minute; failures are logged, never raised
    (the canary keeps measuring when alerting is broken)."""
    threshold = latency_alert_ms()
    for point in points:
        try:
            judge_point(point, threshold)
        except Exception:
            log.exception("could not raise or resolve the canary alerts of %s/%d", point.topic, point.partition)
