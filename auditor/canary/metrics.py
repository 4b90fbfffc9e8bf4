"""Canary numbers for /metrics/ (see auditor/metrics/registry.py): per topic partition over
the last ``AUDITOR_METRICS_CANARY_WINDOW_MINUTES`` (default 15) minutes of stored points.

Counts are sums over the window (all sessions), so they are gauges, not counters: a
restart of the canary does not reset them. Canaries on different clusters (which default to
the same topic) are separate series: a ``cluster`` label carries the cluster's name (``audit
canary --cluster``) or ``servers=<hosts>`` for other bootstrap servers, as in the alerts'
fingerprints (``cluster_scope``); the default cluster's series have no such label. Summed,
a stopped canary on one cluster would be hidden by another's fresh minutes. The latency is the highest per-minute p99
of the window (the minutes' records are gone, so the window's exact p99 is not known);
partitions that received nothing in the window have no latency sample.

The newest stored minute per cluster and topic is taken over the points of the last
``AUDITOR_CANARY_STOPPED_HORIZON_S`` (default 7 days), not the window: a canary that stopped
within the horizon keeps reporting the minute it stopped at; one stopped longer ago leaves the
metric (see ``_newest_minutes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.db.models import Max, Sum
from django.utils import timezone

from auditor.canary.models import CanaryPoint
from auditor.canary.scope import cluster_scope
from auditor.metrics.registry import Sample

DEFAULT_WINDOW_MINUTES = 15
DEFAULT_STOPPED_HORIZON_S = 7 * 24 * 3600
COUNTS = {
    "sent": "auditor_canary_sent_records",
    "received": "auditor_canary_received_records",
    "lost": "auditor_canary_lost_records",
    "duplicated": "auditor_canary_duplicated_records",
    "out_of_order": "auditor_canary_out_of_order_records",
    "produce_errors": "auditor_canary_produce_errors",
    "unacked": "auditor_canary_unacked_records",
    "truncated": "auditor_canary_truncated_records",
}
HELP = {
    "sent": "Canary records sent in the window",
    "received": "Canary records received within the SLA in the window",
    "lost": "Canary records the broker acknowledged and that were not received within the SLA in the window",
    "duplicated": "Canary records received more than once in the window",
    "out_of_order": "Canary records received after a later one of the same partition in the window",
    "produce_errors": "Canary records the producer reported as failed (never counted lost) in the window",
    "unacked": "Canary records without a delivery report when their SLA ran out (not a loss) in the window",
    "truncated": "Canary records read, then cut from the log (another record read later at their offset) in the window",
}


def window_minutes() -> int:
    return int(getattr(settings, "AUDITOR_METRICS_CANARY_WINDOW_MINUTES", DEFAULT_WINDOW_MINUTES))


def stopped_horizon_seconds() -> int:
    return int(getattr(settings, "AUDITOR_CANARY_STOPPED_HORIZON_S", DEFAULT_STOPPED_HORIZON_S))


def collect() -> Iterator[Sample]:
    minutes = window_minutes()
    yield Sample("auditor_canary_window_seconds", minutes * 60, help="The window the canary metrics cover, in seconds")
    since = timezone.now() - timedelta(minutes=minutes)
    # cast: the Django plugin types values() rows from literal annotations only and
    # misses the sums the comprehension passes as **kwargs.
    rows = cast(
        "list[dict[str, Any]]",
        list(
            CanaryPoint.objects.filter(minute__gte=since)
            .values("cluster", "bootstrap_servers", "topic", "partition")
            .annotate(**{name: Sum(name) for name in COUNTS}, p99_ms=Max("p99_ms"))
        ),
    )
    series = _per_cluster(rows)
    for name, metric in COUNTS.items():
        for (scope, topic, partition), row in series.items():
            yield Sample(metric, row[name], _labels(scope, topic, partition), help=HELP[name])
    for (scope, topic, partition), row in series.items():
        if row["p99_ms"] is not None:
            yield Sample(
                "auditor_canary_latency_p99_seconds",
                row["p99_ms"] / 1000,
                _labels(scope, topic, partition),
                help="Highest per-minute p99 of the produce-to-consume latency in the window",
            )
    for (scope, topic), timestamp in _newest_minutes().items():
        yield Sample(
            "auditor_canary_last_minute_timestamp_seconds",
            timestamp,
            _labels(scope, topic),
            help="Start of the newest minute the canary stored (a stopped canary stops advancing it)",
        )


def _newest_minutes() -> dict[tuple[str, str], float]:
    """Start of the newest stored minute per (cluster scope, topic), over the points of the
    stopped horizon, not just the window: a canary stopped longer than the window ago keeps its
    last minute, so ``time() - auditor_canary_last_minute_timestamp_seconds`` keeps growing and
    the CanaryStopped alert stays firing instead of resolving when the series would vanish.
    Past the horizon it does vanish: a canary removed on purpose stops alerting, and a scrape
    groups the horizon's points (a range of index canary_point_minute), not every point ever stored."""
    since = timezone.now() - timedelta(seconds=stopped_horizon_seconds())
    rows = (
        CanaryPoint.objects.filter(minute__gte=since)
        .values("cluster", "bootstrap_servers", "topic")
        .annotate(newest=Max("minute"))
    )
    newest: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (cluster_scope(row["cluster"], row["bootstrap_servers"]), row["topic"])
        newest[key] = max(newest.get(key, 0.0), row["newest"].timestamp())
    return dict(sorted(newest.items(), key=lambda item: (item[0][1], item[0][0])))


def _per_cluster(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Rows per (cluster scope, topic, partition), sorted: points that recorded the same cluster
    differently (name, servers, nothing for the default) add up under one scope."""
    series: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in rows:
        key = (cluster_scope(row["cluster"], row["bootstrap_servers"]), row["topic"], row["partition"])
        merged = series.get(key)
        if merged is None:
            series[key] = dict(row)
            continue
        for name in COUNTS:
            merged[name] += row[name]
        values = [v for v in (merged["p99_ms"], row["p99_ms"]) if v is not None]
        merged["p99_ms"] = max(values) if values else None
    return dict(sorted(series.items(), key=lambda item: (item[0][1], item[0][2], item[0][0])))


def _labels(scope: str, topic: str, partition: int | None = None) -> dict[str, str]:
    labels = {"cluster": scope} if scope else {}
    labels["topic"] = topic
    if partition is not None:
        labels["partition"] = str(partition)
    return labels
