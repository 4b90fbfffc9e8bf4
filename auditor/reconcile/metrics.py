"""Reconciliation numbers for /metrics/ (contract: auditor/metrics/registry.py).

Open findings are those of each binding's latest successful run (the auditor's current
view); the age of that run tells Prometheus when reconciliation stopped succeeding.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Max

from auditor.metrics.registry import Sample
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reconcile.service import current_run_ids


def collect() -> Iterator[Sample]:
    last_ok = (
        ReconcileRun.objects.filter(status=ReconcileRun.OK)
        .values("binding__name")
        .annotate(last=Max("finished_at"))
        .order_by("binding__name")
    )
    for row in last_ok:
        if row["last"] is not None:
            yield Sample(
                "auditor_reconcile_last_success_timestamp_seconds",
                row["last"].timestamp(),
                {"binding": row["binding__name"]},
                help="When the binding's last successful reconciliation finished",
            )
    open_counts = (
        Finding.objects.filter(run_id__in=current_run_ids())
        .values("binding__name", "kind")
        .annotate(n=Count("id"))
        .order_by("binding__name", "kind")
    )
    for count in open_counts:
        yield Sample(
            "auditor_findings_open",
            count["n"],
            {"binding": count["binding__name"], "kind": count["kind"]},
            help="Findings of the binding's latest successful reconciliation, by kind",
        )
