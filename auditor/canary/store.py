"""Writing a closed minute: all partitions in one transaction, pushed to browsers after commit."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from auditor.canary.accounting import DeliveryCounts
from auditor.canary.models import CanaryPoint
from auditor.lib.live import publish

LIVE_GROUP = "canary"
LIVE_EVENT = "points"


def record_minute(
    session: str,
    topic: str,
    minute: datetime,
    counts: dict[int, DeliveryCounts],
    leaders: dict[int, int],
    partial: bool = False,
    cluster: str = "",
    bootstrap_servers: str = "",
) -> list[CanaryPoint]:
    points = []
    for partition, c in sorted(counts.items()):
        latency = c.latency.summary()
        leader = leaders.get(partition)
        points.append(
            CanaryPoint(
                session=session,
                cluster=cluster,
                bootstrap_servers=bootstrap_servers,
                topic=topic,
                minute=minute,
                partition=partition,
                leader=leader if leader is not None and leader >= 0 else None,
                sent=c.sent,
                received=c.received,
                lost=c.lost,
                lost_leaders={str(broker): n for broker, n in sorted(c.lost_by_leader.items())},
                duplicated=c.duplicated,
                out_of_order=c.out_of_order,
                late=c.late,
                produce_errors=c.produce_errors,
                unacked=c.unacked,
                truncated=c.truncated,
                p50_ms=latency["p50_ms"],
                p99_ms=latency["p99_ms"],
                max_ms=latency["max_ms"],
                partial=partial,
            )
        )
    with transaction.atomic():
        stored = {
            p.partition: p
            for p in CanaryPoint.objects.select_for_update().filter(session=session, topic=topic, minute=minute)
        }
        if stored:  # the minute was closed before: the wall clock stepped back since (runner._minute_ends)
            points = [_summed(stored[p.partition], p) if p.partition in stored else p for p in points]
            for point in points:
                point.save()
        else:
            CanaryPoint.objects.bulk_create(points)
        publish(LIVE_GROUP, LIVE_EVENT, {"topic": topic, "points": [p.as_event() for p in points]})
    return points


SUMMED = ("sent", "received", "lost", "duplicated", "out_of_order", "late", "produce_errors", "unacked", "truncated")


def _summed(stored: CanaryPoint, later: CanaryPoint) -> CanaryPoint:
    """A minute labelled twice: the counts of both windows, their losses per leader, the later
    leader, and the larger of each latency figure (the percentiles of the union are not
    known: the larger one never understates)."""
    for name in SUMMED:
        setattr(stored, name, getattr(stored, name) + getattr(later, name))
    lost_leaders = dict(stored.lost_leaders or {})
    for broker, n in (later.lost_leaders or {}).items():
        lost_leaders[broker] = lost_leaders.get(broker, 0) + n
    stored.lost_leaders = dict(sorted(lost_leaders.items()))
    for name in ("p50_ms", "p99_ms", "max_ms"):
        figures = [v for v in (getattr(stored, name), getattr(later, name)) if v is not None]
        setattr(stored, name, max(figures) if figures else None)
    stored.leader = later.leader if later.leader is not None else stored.leader
    stored.partial = stored.partial or later.partial
    return stored
