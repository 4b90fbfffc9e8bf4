"""Stuck items for /metrics/ (contract: auditor/metrics/registry.py): open items per rule and verdict."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count

from auditor.metrics.registry import Sample
from auditor.stuck.models import StuckItem


def collect() -> Iterator[Sample]:
    rows = (
        StuckItem.objects.open()
        .values("rule__name", "verdict")
        .annotate(n=Count("id"))
        .order_by("rule__name", "verdict")
    )
    for row in rows:
        yield Sample(
            "auditor_stuck_items",
            row["n"],
            {"rule": row["rule__name"], "verdict": row["verdict"]},
            help="Items stuck now, by rule and verdict",
        )
