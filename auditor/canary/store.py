"""Writing a closed minute: all partitions in one transaction, pushed to browsers after commit;
and deleting the minutes past their retention (AUDITOR_CANARY_RETENTION_DAYS), once an hour."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from auditor.canary.accounting import DeliveryCounts
from auditor.canary.models import CanaryPoint
from auditor.lib.live import publish

log = logging.getLogger(__name__)

LIVE_GROUP = "canary"
LIVE_EVENT = "points"
PRUNE_EVERY_S = 3600.0
PRUNE_BATCH = 5000
PRUNE_BUDGET_S = 2.0
_pruned_at: float | None = None  # this process's last pruning (time.monotonic())


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
    global _pruned_at
    if _pruned_at is None or time.monotonic() - _pruned_at >= PRUNE_EVERY_S:
        _pruned_at = time.monotonic()
        prune_points(timezone.now(), keep_from=minute)
    return points


def retention_cutoff(now: datetime) -> datetime | None:
    """Minutes before this are deleted; None keeps them all (AUDITOR_CANARY_RETENTION_DAYS=0).
    Never later than the horizon /metrics reads for the newest minute (a canary stopped within it
    keeps its CanaryStopped alert firing): a shorter retention is taken as that horizon."""
    days = int(getattr(settings, "AUDITOR_CANARY_RETENTION_DAYS", 90))
    if days <= 0:
        return None
    horizon_s = int(getattr(settings, "AUDITOR_CANARY_STOPPED_HORIZON_S", 7 * 24 * 3600))
    return now - max(timedelta(days=days), timedelta(seconds=horizon_s))


def prune_points(now: datetime, keep_from: datetime | None = None) -> int:
    """Delete every canary minute, of every session and cluster, past the retention (never one
    from `keep_from` on: the minute just stored, by a clock far behind); returns how many rows
    went."""
    cutoff = retention_cutoff(now)
    if cutoff is None:
        return 0
    if keep_from is not None:
        cutoff = min(cutoff, keep_from)
    # The canary's measuring thread stores the minutes: a long backlog (the first pruning of a
    # long-running install) is deleted a batch at a time for at most PRUNE_BUDGET_S a call, the
    # rest at the next; a failed delete is logged, never taken for a minute not stored.
    deleted, started = 0, time.monotonic()
    try:
        while time.monotonic() - started < PRUNE_BUDGET_S:
            batch = list(CanaryPoint.objects.filter(minute__lt=cutoff).values_list("pk", flat=True)[:PRUNE_BATCH])
            if not batch:
                break
            deleted += CanaryPoint.objects.filter(pk__in=batch).delete()[0]
    except DatabaseError as exc:
        log.warning("canary: deleting the minutes stored before %s failed (%s); tried again in an hour", cutoff, exc)
    if deleted:
        log.info("canary: deleted %d minute(s) stored before %s (AUDITOR_CANARY_RETENTION_DAYS)", deleted, cutoff)
    return deleted


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
