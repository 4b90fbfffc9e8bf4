"""Canary: loss, duplicates and latency of the synthetic records over the period.

The canary measures a cluster through its own topic, not a binding: the section covers
every canary topic that stored points in the period. The exact p99 of a period is not
known (a minute's records are not kept); the section reports the highest per-minute p99.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from django.db.models import Count, Max, Sum

from auditor.canary.models import CanaryPoint
from auditor.pipelines.models import Binding
from auditor.reports import charts
from auditor.reports.sections import SectionResult, Table

COUNTS = ("sent", "received", "lost", "duplicated", "out_of_order", "produce_errors")


def canary_section(bindings: Sequence[Binding], start: datetime, end: datetime) -> SectionResult:
    points = CanaryPoint.objects.filter(minute__gte=start, minute__lt=end)
    per_topic: dict[str, dict[str, Any]] = {}
    # cast: the Django plugin types values() rows from literal annotations only and
    # misses the sums the comprehension passes as **kwargs.
    for row in cast(
        "Iterable[dict[str, Any]]",
        points.values("topic")
        .annotate(**{name: Sum(name) for name in COUNTS}, p99_ms_max=Max("p99_ms"), max_ms=Max("max_ms"))
        .annotate(minutes=Count("minute", distinct=True))
        .order_by("topic"),
    ):
        sent = row["sent"] or 0
        per_topic[row["topic"]] = {
            **{name: int(row[name] or 0) for name in COUNTS},
            "loss_ratio": round((row["lost"] or 0) / sent, 6) if sent else None,
            "p99_ms_max": row["p99_ms_max"],
            "max_ms": row["max_ms"],
            "minutes": row["minutes"],
        }
    latency: dict[str, list[tuple[datetime, float | None]]] = defaultdict(list)
    for point in (
        points.filter(p99_ms__isnull=False)
        .values("topic", "minute")
        .annotate(p99=Max("p99_ms"))
        .order_by("topic", "minute")
    ):
        latency[point["topic"]].append((point["minute"], point["p99"]))
    p99s = [t["p99_ms_max"] for t in per_topic.values() if t["p99_ms_max"] is not None]
    totals = {
        "canary_sent": sum(t["sent"] for t in per_topic.values()),
        "canary_lost": sum(t["lost"] for t in per_topic.values()),
        "canary_duplicated": sum(t["duplicated"] for t in per_topic.values()),
        "canary_p99_ms_max": max(p99s) if p99s else None,
    }
    table: Table = {
        "title": "Canary topics",
        "columns": [
            "Topic",
            "Minutes",
            "Sent",
            "Received",
            "Lost",
            "Duplicated",
            "Out of order",
            "Produce errors",
            "Highest minute p99 (ms)",
        ],
        "rows": [
            [
                topic,
                t["minutes"],
                t["sent"],
                t["received"],
                t["lost"],
                t["duplicated"],
                t["out_of_order"],
                t["produce_errors"],
                round(t["p99_ms_max"], 1) if t["p99_ms_max"] is not None else "—",
            ]
            for topic, t in per_topic.items()
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
