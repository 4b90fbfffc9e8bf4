"""Config lint: the latest scan of the live system that finished in the period.

Lint scans cover clusters, not bindings: a binding's own line counts the results on its
topic; the cluster line counts every result on the bindings' clusters (brokers, topics,
clients), which is what the headline numbers add up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from auditor.lint.alerting import TOPIC_SUBJECT
from auditor.lint.models import LintResultRow, LintScan
from auditor.pipelines.models import Binding
from auditor.reports.sections import SectionResult, Table, shown_time

LISTED_RESULTS = 200


def _shown(value: Any) -> str:
    """A config value as the client spells it (as LintResultRow.shown_value)."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _latest_scan(start: datetime, end: datetime) -> LintScan | None:
    return (
        LintScan.objects.exclude(trigger=LintScan.PASTE)
        .filter(finished_at__gte=start, finished_at__lt=end)
        .order_by("-finished_at", "-id")
        .first()
    )


def lint_section(bindings: Sequence[Binding], start: datetime, end: datetime) -> SectionResult:
    scan = _latest_scan(start, end)
    clusters = sorted({b.cluster.name for b in bindings})
    if scan is None:  # nothing linted: the counts are unknown (None, shown so), never 0
        return {
            "summary": {"scan": None, "totals": {"lint_errors": None, "lint_warnings": None, "lint_scanned": False}},
            "tables": [],
            "notes": ["No lint scan of the live system finished in this period."],
        }
    rows = list(
        LintResultRow.objects.filter(scan=scan, cluster__in=clusters)
        .in_report_order()
        .values("cluster", "subject", "severity", "rule", "title", "config_key", "value", "expected")
    )
    per_cluster: dict[str, Counter[str]] = {c: Counter() for c in clusters}
    per_subject: dict[tuple[str, str], Counter[str]] = {}
    for row in rows:
        per_cluster[row["cluster"]][row["severity"]] += 1
        per_subject.setdefault((row["cluster"], row["subject"]), Counter())[row["severity"]] += 1
    per_binding: dict[str, dict[str, Any]] = {}
    for b in bindings:
        found = per_subject.get((b.cluster.name, TOPIC_SUBJECT + b.topic), Counter())
        per_binding[b.name] = {
            "cluster": b.cluster.name,
            "topic": b.topic,
            "errors": found["error"],
            "warnings": found["warning"],
        }
    totals = {
        "lint_errors": sum(c["error"] for c in per_cluster.values()),
        "lint_warnings": sum(c["warning"] for c in per_cluster.values()),
        "lint_scanned": True,
    }
    scan_table: Table = {
        "title": "Latest scan in the period",
        "columns": ["Scan", "Finished", "Status", "Errors", "Warnings", "Info", "What was linted"],
        "rows": [
            [
                scan.pk,
                shown_time(scan.finished_at),
                scan.status,
                scan.error_count,
                scan.warning_count,
                scan.info_count,
                scan.summary,
            ]
        ],
    }
    binding_table: Table = {
        "title": "Results on each binding's topic",
        "columns": ["Binding", "Cluster", "Topic", "Errors", "Warnings"],
        "rows": [[n, e["cluster"], e["topic"], e["errors"], e["warnings"]] for n, e in per_binding.items()],
        "empty": "no binding in this report",
    }
    cluster_table: Table = {
        "title": "Results on the bindings' clusters (brokers, topics, clients)",
        "columns": ["Cluster", "Errors", "Warnings", "Info"],
        "rows": [[c, n["error"], n["warning"], n["info"]] for c, n in per_cluster.items()],
        "empty": "no cluster",
    }
    listed = [r for r in rows if r["severity"] in ("error", "warning")]
    results_table: Table = {
        "title": "Errors and warnings",
        "columns": ["Severity", "Rule", "Cluster", "Target", "Setting", "Value", "Expected"],
        "rows": [
            [
                r["severity"],
                f"{r['rule']} {r['title']}",
                r["cluster"],
                r["subject"],
                r["config_key"],
                _shown(r["value"]),
                r["expected"],
            ]
            for r in listed[:LISTED_RESULTS]
        ],
        "empty": "none",
    }
    if len(listed) > LISTED_RESULTS:
        results_table["note"] = f"the first {LISTED_RESULTS} of {len(listed)}"
    notes = [] if scan.status == LintScan.OK else [f"The scan could not lint everything: {scan.error}"]
    return {
        "summary": {
            "scan": scan.pk,
            "scan_finished": scan.finished_at.isoformat(),
            "scan_status": scan.status,
            "clusters": {c: dict(n) for c, n in per_cluster.items()},
            "bindings": per_binding,
            "totals": totals,
        },
        "tables": [scan_table, binding_table, cluster_table, results_table],
        "notes": notes,
    }
