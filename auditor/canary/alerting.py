"""Canary problems for the webhook channels, judged on each stored minute, per cluster and topic partition.

Canaries on different clusters (they all default to the same topic) never raise or
resolve each other's problems: the fingerprint names the cluster (see ``scope.cluster_scope``).

- ``canary:loss``: raised when the minute lost records (acknowledged by the broker and not
  read within the SLA: records the broker rejected or has not acknowledged never count), or
  saw records it had read cut from the log (``truncated``: another record read later at their
  offset); resolved by a later minute that received records and lost and saw cut none.
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
from django.db.models import QuerySet

from auditor.alerts.models import Alert
from auditor.alerts.owners import watch_owner
from auditor.alerts.problems import MAX_FINGERPRINT, raise_problem, resolve_problem
from auditor.canary.models import CanaryPoint
from auditor.canary.scope import cluster_scope
from auditor.pipelines.models import Cluster

log = logging.getLogger(__name__)

DEFAULT_LATENCY_ALERT_MS = 5000


def latency_alert_ms() -> float:
    return float(getattr(settings, "AUDITOR_CANARY_LATENCY_ALERT_MS", DEFAULT_LATENCY_ALERT_MS))


def fingerprint(kind: str, topic: str, partition: int, scope: str = "") -> str:
    """``canary:<kind>:<topic>/<partition>``, or ``canary:<kind>:<scope>:<topic>/<partition>``
    for another cluster (topics hold no ':'); too long for that, shortened with a hash."""
    where = f"{scope}:{topic}" if scope else topic
    text = f"canary:{kind}:{where}/{partition}"
    if len(text) <= MAX_FINGERPRINT:
        return text
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return f"canary:{kind}:{where[:120]}~{digest}/{partition}"


def _cluster_text(point: CanaryPoint) -> str:
    if point.cluster:
        return f"cluster {point.cluster}"
    if point.bootstrap_servers:
        return point.bootstrap_servers
    return "an unrecorded cluster"


def _where(point: CanaryPoint, with_leader: bool = True) -> str:
    leader = f", leader broker {point.leader}" if with_leader and point.leader is not None else ""
    return (
        f"{point.topic}/{point.partition} of {_cluster_text(point)} in minute {point.minute:%Y-%m-%d %H:%M} UTC{leader}"
    )


def _sent_to(point: CanaryPoint) -> str:
    """Which leader brokers the lost records were sent to (not who leads now: a failover's successor)."""
    if not point.lost_leaders:
        return ""
    brokers = sorted(point.lost_leaders.items(), key=lambda item: int(item[0]))
    if len(brokers) == 1:
        return f" sent to leader broker {brokers[0][0]}"
    return " sent to leader brokers " + ", ".join(f"{broker} ({n})" for broker, n in brokers)


def _details(point: CanaryPoint) -> dict[str, object]:
    return {
        "cluster": point.cluster,
        "bootstrap_servers": point.bootstrap_servers,
        "topic": point.topic,
        "partition": point.partition,
        "minute": point.minute.isoformat(),
        "session": point.session,
        "leader": point.leader,
        "sent": point.sent,
        "received": point.received,
        "lost": point.lost,
        "lost_leaders": point.lost_leaders,
        "truncated": point.truncated,
        "p99_ms": point.p99_ms,
    }


def judge_point(point: CanaryPoint, latency_threshold_ms: float) -> None:
    scope = cluster_scope(point.cluster, point.bootstrap_servers)
    loss = fingerprint("loss", point.topic, point.partition, scope)
    if point.lost > 0 or point.truncated > 0:
        what = []
        if point.lost:
            what.append(f"lost {point.lost} record(s){_sent_to(point)}")
        if point.truncated:
            what.append(f"saw {point.truncated} record(s) it had read cut from the log")
        raise_problem(
            "canary:loss",
            loss,
            None,
            # The leader when the minute closed is named only when the senders' leader is unknown.
            f"canary {' and '.join(what)} on {_where(point, not point.lost_leaders)}",
            _details(point),
        )
    elif point.received > 0:
        resolve_problem(loss)

    latency = fingerprint("latency", point.topic, point.partition, scope)
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


def cluster_alerts(cluster_name: str) -> QuerySet[Alert]:
    """The canary alerts of the configured cluster named so (``audit canary --cluster``): no
    canary can start on it under that name once it is deleted or renamed."""
    return Alert.objects.filter(kind__startswith="canary:", details__cluster=cluster_name)


def connect_signals() -> None:
    """A deleted or renamed cluster's canary problems are resolved (auditor.alerts.owners)."""
    watch_owner(Cluster, "cluster", cluster_alerts)


def alert_on_minute(points: Iterable[CanaryPoint]) -> None:
    """Raise or resolve the canary problems of a stored minute; failures are logged, never raised
    (the canary keeps measuring when alerting is broken)."""
    threshold = latency_alert_ms()
    for point in points:
        try:
            judge_point(point, threshold)
        except Exception:
            log.exception("could not raise or resolve the canary alerts of %s/%d", point.topic, point.partition)
