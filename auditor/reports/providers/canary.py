"""Canary: loss, duplicates and latency of the synthetic records over the period.

The canary measures a cluster through its own topic, not a binding: the section covers
every canary topic that stored points in the period, per cluster (canaries on several
clusters default to the same topic; a canary is keyed "<topic>" on the default cluster and
"<topic> on <cluster>" elsewhere, the cluster as the alerts and metrics name it). The exact p99 of a period is not
known (a minute's records are not kept); the section reports the highest per-minute p99.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from django.db.models import Max, Sum

from auditor.canary.models import CanaryPoint
from auditor.canary.scope import cluster_scope
from auditor.pipelines.models import Binding
from auditor.reports import charts
from auditor.reports.sections import SectionResult, Table

COUNTS = ("sent", "received", "lost", "truncated", "duplicated", "out_of_order", "produce_errors")


def canary_name(topic: str, scope: str) -> str:
    return f"{topic} on {scope}" if scope else topic


def canary_section(bindings: Sequence[Binding], start: datetime, end: datetime) -> SectionResult:
    points = CanaryPoint.objects.filter(minute__gte=start, minute__lt=end)
    per_topic: dict[str, dict[str, Any]] = {}
    minutes: dict[str, set[datetime]] = defaultdict(set)
    latency_by_minute: dict[str, dict[datetime, float]] = defaultdict(dict)
    # One row per topic, cluster, servers and minute (the sums of a minute's partitions and
    # sessions), added up per canary below: points that recorded one cluster differently
    # (its servers, or nothing for the default one) fall under the same scope.
    # cast: the Django plugin types values() rows from literal annotations only and
    # misses the sums the comprehension passes as **kwargs.
    for row in cast(
        "Iterable[dict[str, Any]]",
        points.values("topic", "cluster", "bootstrap_servers", "minute")
        .annotate(**{name: Sum(name) for name in COUNTS}, p99_ms_max=Max("p99_ms"), max_ms=Max("max_ms"))
        .order_by("topic", "minute"),
    ):
        scope = cluster_scope(row["cluster"], row["bootstrap_servers"])
        name = canary_name(row["topic"], scope)
        entry = per_topic.setdefault(
            name,
            {"topic": row["topic"], "cluster": scope, **dict.fromkeys(COUNTS, 0), "p99_ms_max": None, "max_ms": None},
        )
        for count in COUNTS:
            entry[count] += int(row[count] or 0)
        for peak in ("p99_ms_max", "max_ms"):
            if row[peak] is not None:
                entry[peak] = row[peak] if entry[peak] is None else max(entry[peak], row[peak])
        minutes[name].add(row["minute"])
        if row["p99_ms_max"] is not None:
            before = latency_by_minute[name].get(row["minute"])
            p99 = row["p99_ms_max"] if before is None else max(before, row["p99_ms_max"])
            latency_by_minute[name][row["minute"]] = p99
    per_topic = dict(sorted(per_topic.items()))
    for name, entry in per_topic.items():
        entry["minutes"] = len(minutes[name])
        # records the cluster lost: acked and never read, or read and cut from the log since
        gone = entry["lost"] + entry["truncated"]
        entry["loss_ratio"] = round(gone / entry["sent"], 6) if entry["sent"] else None
    latency: dict[str, list[tuple[datetime, float | None]]] = {
        name: [(minute, p99) for minute, p99 in sorted(latency_by_minute[name].items())]
        for name in per_topic
        if latency_by_minute[name]
    }
    p99s = [t["p99_ms_max"] for t in per_topic.values() if t["p99_ms_max"] is not None]
    # No canary point in the period: nothing measured loss or duplicates, so they are unknown
    # (None, shown so), never 0.
    measured = bool(per_topic)
    totals = {
        "canary_sent": sum(t["sent"] for t in per_topic.values()),
        "canary_lost": sum(t["lost"] for t in per_topic.values()) if measured else None,
        "canary_truncated": sum(t["truncated"] for t in per_topic.values()) if measured else None,
        "canary_duplicated": sum(t["duplicated"] for t in per_topic.values()) if measured else None,
        "canary_p99_ms_max": max(p99s) if p99s else None,
    }
    table: Table = {
        "title": "Canary topics",
        "columns": [
            "Topic",
            "Cluster",
            "Minutes",
            "Sent",
            "Received",
            "Lost",
            "Truncated",
            "Duplicated",
            "Out of order",
            "Produce errors",
            "Highest minute p99 (ms)",
        ],
        "rows": [
            [
                t["topic"],
                t["cluster"] or "default",
                t["minutes"],
                t["sent"],
                t["received"],
                t["lost"],
                t["truncated"],
                t["duplicated"],
                t["out_of_order"],
                t["produce_errors"],
                round(t["p99_ms_max"], 1) if t["p99_ms_max"] is not None else "—",
            ]
            for t in per_topic.values()
        ],
        "empty": "the canary stored nothing in this period",
    }
    figure = charts.time_series("Canary latency (p99 per minute)", "milliseconds", latency)
    return {
        "summary": {"topics": per_topic, "totals": totals},
        "tables": [table],
        "figures": [figure] if latency else [],
        "notes": ["The canary measures the cluster with synthetic records on its own topic, not a binding."],
    }
