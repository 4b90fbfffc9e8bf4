"""Reconciliation: runs per binding in the period, and the findings they left.

A run reports the whole current set of findings of its binding (a snapshot), so the
findings "at the end of the period" are those of the binding's latest successful run
in the period; ``new_findings`` adds up what each successful run saw for the first
time. Causes are the counts per (kind, cause) stored on the run when it was published
(``cause_counts``): reconciliation prunes the finding rows of all but the newest
RECONCILE_KEEP_FINDING_RUNS runs, which at the default settings has happened to a
period's latest run by the time a daily report is built. A run published before those
counts were stored has its causes from its finding rows, or, those pruned, reports them
as unavailable rather than guessed (nor "no findings"). The CSV lists the finding rows
kept; for a run whose rows were pruned, one row per (kind, cause) with its count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import Count

from auditor.pipelines.models import Binding
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reports import charts, conf
from auditor.reports.sections import SectionResult, Table, shown_count, shown_time
from auditor.vocabulary import FINDING_KINDS

CAUSES_UNAVAILABLE = "causes unavailable: the run's findings were pruned (RECONCILE_KEEP_FINDING_RUNS)"


def _latest_ok(runs: list[ReconcileRun]) -> ReconcileRun | None:
    ok = [r for r in runs if r.status == ReconcileRun.OK]
    return max(ok, key=lambda r: (r.finished_at or r.created_at, r.pk)) if ok else None


def _finding_rows(latest: dict[str, ReconcileRun], limit: int) -> tuple[list[dict[str, Any]], bool]:
    run_ids = [run.pk for run in latest.values() if not run.findings_pruned]
    if not run_ids or limit <= 0:
        return [], bool(run_ids)
    names = {run.pk: name for name, run in latest.items()}
    findings = (
        Finding.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "kind", "cause", "key", "partition", "offset", "id")
        .values("run_id", "kind", "cause", "key", "partition", "offset", "timestamp", "group", "session", "seq")[
            : limit + 1
        ]
    )
    rows = [
        {
            "section": "reconcile",
            "binding": names[f["run_id"]],
            "run": f["run_id"],
            "kind": f["kind"],
            "cause": f["cause"] or "",
            "key": f["key"],
            "partition": f["partition"],
            "offset": f["offset"],
            "timestamp": f["timestamp"].isoformat() if f["timestamp"] else "",
            "group": f["group"] or "",
            "detail": f"producer session {f['session']} seq {f['seq']}" if f["session"] else "",
        }
        for f in findings
    ]
    return rows[:limit], len(rows) > limit


def _with_pruned_cause_rows(
    rows: list[dict[str, Any]], truncated: bool, latest: dict[str, ReconcileRun], limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """One CSV row per (kind, cause) of each latest run whose finding rows were pruned: its
    findings are known by count only."""
    counted = [
        {
            "section": "reconcile",
            "binding": name,
            "run": run.pk,
            "kind": c["kind"],
            "cause": c["cause"] or "",
            "key": "",
            "partition": "",
            "offset": "",
            "timestamp": "",
            "group": "",
            "detail": f"{c['count']} finding(s); their rows were pruned (RECONCILE_KEEP_FINDING_RUNS)",
        }
        for name, run in sorted(latest.items())
        if run.findings_pruned
        for c in (run.cause_counts or [])
    ]
    room = max(0, limit - len(rows))
    return rows + counted[:room], truncated or len(counted) > room


def reconcile_section(bindings: Sequence[Binding], start: datetime, end: datetime) -> SectionResult:
    runs_by_binding: dict[str, list[ReconcileRun]] = defaultdict(list)
    runs = (
        ReconcileRun.objects.filter(binding__in=list(bindings), created_at__gte=start, created_at__lt=end)
        .select_related("binding")
        .order_by("created_at", "id")
    )
    for run in runs:
        runs_by_binding[run.binding.name].append(run)

    latest: dict[str, ReconcileRun] = {}
    for name, binding_runs in runs_by_binding.items():
        found = _latest_ok(binding_runs)
        if found is not None:
            latest[name] = found
    causes: dict[int, list[dict[str, Any]]] = {
        run.pk: list(run.cause_counts) for run in latest.values() if run.cause_counts is not None
    }
    for row in (
        Finding.objects.filter(
            run_id__in=[r.pk for r in latest.values() if r.cause_counts is None and not r.findings_pruned]
        )
        .values("run_id", "kind", "cause")
        .annotate(count=Count("id"))
        .order_by("run_id", "kind", "cause")
    ):
        causes.setdefault(row["run_id"], []).append({"kind": row["kind"], "cause": row["cause"], "count": row["count"]})

    per_binding: dict[str, dict[str, Any]] = {}
    # A binding without a successful run in the period: its findings at the end are not known
    # (None, shown "unknown"), never 0; `findings_unknown` counts such bindings.
    totals: dict[str, Any] = {"runs": 0, "failed_runs": 0, "findings": 0, "new_findings": 0, "findings_unknown": 0}
    for binding in bindings:
        binding_runs = runs_by_binding.get(binding.name, [])
        last = latest.get(binding.name)
        findings = dict(last.kind_counts()) if last else None
        entry: dict[str, Any] = {
            "runs": len(binding_runs),
            "ok": sum(r.status == ReconcileRun.OK for r in binding_runs),
            "failed": sum(r.status == ReconcileRun.FAILED for r in binding_runs),
            "latest_run": last.pk if last else None,
            "latest_run_finished": last.finished_at.isoformat() if last and last.finished_at else None,
            "findings": findings,
            "findings_total": sum(findings.values()) if findings is not None else None,
            "new_findings": sum(r.new_findings for r in binding_runs if r.status == ReconcileRun.OK),
            "by_cause": causes.get(last.pk, []) if last else [],
            "causes_available": last is not None and (last.cause_counts is not None or not last.findings_pruned),
        }
        per_binding[binding.name] = entry
        totals["runs"] += entry["runs"]
        totals["failed_runs"] += entry["failed"]
        if entry["findings_total"] is None:
            totals["findings_unknown"] += 1
        else:
            totals["findings"] += entry["findings_total"]
        totals["new_findings"] += entry["new_findings"]
    if bindings and totals["findings_unknown"] == len(bindings):
        totals["findings"] = None  # nothing known: not 0

    csv_rows, truncated = _finding_rows(latest, conf.max_csv_rows())
    csv_rows, truncated = _with_pruned_cause_rows(csv_rows, truncated, latest, conf.max_csv_rows())
    notes = [
        f"Findings at the end of the period are those of each binding's latest successful run in it; "
        f"{len(latest)} of {len(bindings)} binding(s) had one."
    ]
    if totals["findings_unknown"]:
        notes.append(
            f"{totals['findings_unknown']} binding(s) had no successful run in the period: their findings at the "
            "end are unknown, not 0."
        )
    pruned = sorted(name for name, run in latest.items() if run.findings_pruned and run.cause_counts is not None)
    if pruned:
        notes.append(
            "The finding rows of the latest run of "
            + ", ".join(pruned)
            + " were pruned (RECONCILE_KEEP_FINDING_RUNS): the CSV lists its findings per kind and cause, "
            "not one by one."
        )
    unavailable = sorted(name for name, e in per_binding.items() if e["latest_run"] and not e["causes_available"])
    if unavailable:
        notes.append(
            "The causes of the latest run of "
            + ", ".join(unavailable)
            + " are unavailable: its findings were pruned (RECONCILE_KEEP_FINDING_RUNS) before causes were kept on "
            "the run (counts per kind kept)."
        )

    runs_table: Table = {
        "title": "Runs and findings per binding",
        "columns": [
            "Binding",
            "Runs",
            "Failed",
            "Latest successful run",
            "Findings at end",
            "New in period",
            *FINDING_KINDS,
        ],
        "rows": [
            [
                name,
                e["runs"],
                e["failed"],
                shown_time(latest[name].finished_at) if name in latest else "none",
                shown_count(e["findings_total"]),
                e["new_findings"],
                *[shown_count(None if e["findings"] is None else e["findings"].get(kind, 0)) for kind in FINDING_KINDS],
            ]
            for name, e in per_binding.items()
        ],
        "empty": "no binding in this report",
    }
    cause_table: Table = {
        "title": "Findings per kind and cause at the end of the period",
        "columns": ["Binding", "Kind", "Cause", "Findings"],
        "rows": [
            row
            for name, e in per_binding.items()
            for row in (
                [[name, c["kind"], c["cause"] or "—", c["count"]] for c in e["by_cause"]]
                if e["causes_available"] or not e["findings_total"]
                else [[name, "all", CAUSES_UNAVAILABLE, e["findings_total"]]]
            )
        ],
        "empty": "no findings",
    }
    series = {
        name: [(r.finished_at or r.created_at, r.total_findings) for r in binding_runs if r.status == ReconcileRun.OK]
        for name, binding_runs in runs_by_binding.items()
    }
    figure = charts.time_series("Findings per run", "findings", series)
    return {
        "summary": {"bindings": per_binding, "totals": totals},
        "tables": [runs_table, cause_table],
        "figures": [figure] if any(series.values()) else [],
        "csv_rows": csv_rows,
        "csv_truncated": truncated,
        "notes": notes,
    }
