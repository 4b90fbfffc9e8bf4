"""Lint numbers for /metrics/ (see auditor/metrics/registry.py), from the latest scan of the
live system (pasted configs are not part of it).

``auditor_lint_results`` has one series per linted target that has any result and
severity error or warning (0 when the target has none of that severity), so an alert on
``> 0`` clears when a target is fixed. A failed scan still reports what it did lint;
``auditor_lint_last_scan_success`` says that a part could not be linted.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count

from auditor.lint.models import LintScan
from auditor.lint.service import latest_scan
from auditor.metrics.registry import Sample

PER_TARGET_SEVERITIES = ("error", "warning")


def collect() -> Iterator[Sample]:
    scan = latest_scan()
    if scan is None:
        return
    yield Sample(
        "auditor_lint_last_scan_timestamp_seconds",
        scan.finished_at.timestamp(),
        help="When the latest lint scan finished",
    )
    yield Sample(
        "auditor_lint_last_scan_success",
        int(scan.status == LintScan.OK),
        help="1 when the latest lint scan linted everything, 0 when a part could not be linted",
    )
    for severity, count in scan.counts().items():
        yield Sample(
            "auditor_lint_last_scan_results",
            count,
            {"severity": severity},
            help="Results of the latest lint scan by severity",
        )
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    rows = (
        scan.results.values("cluster", "target_kind", "subject", "severity")
        .annotate(n=Count("id"))
        .order_by("cluster", "target_kind", "subject")
    )
    for row in rows:
        target = counts.setdefault((row["cluster"], row["target_kind"], row["subject"]), {})
        target[row["severity"]] = row["n"]
    for (cluster, kind, subject), by_severity in counts.items():
        for severity in PER_TARGET_SEVERITIES:
            yield Sample(
                "auditor_lint_results",
                by_severity.get(severity, 0),
                {"cluster": cluster, "target_kind": kind, "target": subject, "severity": severity},
                help="Error and warning results per target in the latest lint scan",
            )
