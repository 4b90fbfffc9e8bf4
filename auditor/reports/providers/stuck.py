"""Stuck items: diagnoses per binding in the period, and the stuck items per verdict.

The counts per verdict "at the end of the period" are the stuck items open at the end of
the period, with their latest verdict, of the binding's rules that had a successful
diagnosis in the period (the others' are unknown). A diagnosis truncated by --max-items
examines the oldest rows only and leaves the items beyond them open while the source
says they are still stuck: its own verdict counts would undercount. Became-stuck and
got-unstuck add up the period's successful diagnoses. The CSV lists the same items (none
of a rule whose items at the end are unknown).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet

from auditor.pipelines.models import Binding, StuckRule
from auditor.reports import charts, conf
from auditor.reports.sections import UNKNOWN, SectionResult, Table, shown_count
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.vocabulary import STUCK_VERDICTS


def _open_at(rules: list[StuckRule], end: datetime) -> QuerySet[StuckItem]:
    """The items open at `end`: seen first before it, resolved (if ever) at or after it. An item
    a truncated run left open is not seen again while it stays beyond the rows examined: its
    last_seen says nothing of whether it was stuck."""
    return StuckItem.objects.filter(rule__in=rules, first_seen__lt=end).filter(
        Q(resolved_at__isnull=True) | Q(resolved_at__gte=end)
    )


def _items_stuck_at(rules: list[StuckRule], end: datetime, limit: int) -> tuple[list[dict[str, Any]], bool]:
    items = (
        _open_at(rules, end)
        .select_related("rule__binding")
        .order_by("rule__binding__name", "rule__name", "verdict", "key", "id")[: limit + 1]
    )
    rows = [
        {
            "section": "stuck",
            "binding": item.rule.binding.name,
            "run": item.last_run_id or "",
            "kind": "stuck",
            "cause": item.verdict,
            "key": item.key,
            "partition": "",
            "offset": "",
            "timestamp": item.first_seen.isoformat(),
            "group": "",
            "detail": f"rule {item.rule.name}; status {item.status}; {item.reason}".strip("; "),
        }
        for item in items
    ]
    return rows[:limit], len(rows) > limit


def stuck_section(bindings: Sequence[Binding], start: datetime, end: datetime) -> SectionResult:
    rules = list(StuckRule.objects.filter(binding__in=list(bindings)).select_related("binding").order_by("name"))
    runs_by_rule: dict[int, list[DiagnosisRun]] = defaultdict(list)
    for run in DiagnosisRun.objects.filter(rule__in=rules, started_at__gte=start, started_at__lt=end).order_by(
        "started_at", "id"
    ):
        runs_by_rule[run.rule_id].append(run)

    open_at_end = {
        (rule_id, verdict): n
        for rule_id, verdict, n in _open_at(rules, end)
        .order_by()
        .values_list("rule_id", "verdict")
        .annotate(n=Count("id"))
    }
    known_rules: list[StuckRule] = []  # with a successful diagnosis in the period
    per_binding: dict[str, dict[str, Any]] = {
        b.name: {
            "rules": [],
            "diagnoses": 0,
            "failed": 0,
            "verdicts": dict.fromkeys(STUCK_VERDICTS, 0),
            "stuck_at_end": 0,
            "became_stuck": 0,
            "got_unstuck": 0,
            # rules with no successful diagnosis in the period: their items at the end are unknown
            "unknown_rules": [],
        }
        for b in bindings
    }
    for rule in rules:
        entry = per_binding[rule.binding.name]
        entry["rules"].append(rule.name)
        runs = runs_by_rule.get(rule.pk, [])
        ok = [r for r in runs if r.status == DiagnosisRun.OK]
        entry["diagnoses"] += len(runs)
        entry["failed"] += sum(r.status == DiagnosisRun.FAILED for r in runs)
        entry["became_stuck"] += sum(r.became_stuck for r in ok)
        entry["got_unstuck"] += sum(r.got_unstuck for r in ok)
        if ok:
            known_rules.append(rule)
            for verdict in STUCK_VERDICTS:
                entry["verdicts"][verdict] += open_at_end.get((rule.pk, verdict), 0)
        else:
            entry["unknown_rules"].append(rule.name)
    totals: dict[str, Any] = {
        "diagnoses": 0,
        "failed_diagnoses": 0,
        "stuck": 0,
        "became_stuck": 0,
        "got_unstuck": 0,
        "stuck_unknown": 0,  # rules without a successful diagnosis in the period
    }
    for entry in per_binding.values():
        known = len(entry["rules"]) > len(entry["unknown_rules"]) or not entry["rules"]
        # the known rules' items; None (unknown, never 0) when no rule of the binding is known
        entry["stuck_at_end"] = sum(entry["verdicts"].values()) if known else None
        totals["diagnoses"] += entry["diagnoses"]
        totals["failed_diagnoses"] += entry["failed"]
        totals["stuck"] += entry["stuck_at_end"] or 0
        totals["stuck_unknown"] += len(entry["unknown_rules"])
        totals["became_stuck"] += entry["became_stuck"]
        totals["got_unstuck"] += entry["got_unstuck"]
    if rules and totals["stuck_unknown"] == len(rules):
        totals["stuck"] = None  # nothing known: not 0

    csv_rows, truncated = _items_stuck_at(known_rules, end, conf.max_csv_rows())
    runs_table: Table = {
        "title": "Diagnoses per binding",
        "columns": ["Binding", "Stuck rules", "Diagnoses", "Failed", "Stuck at end", "Became stuck", "Got unstuck"],
        "rows": [
            [
                name,
                ", ".join(e["rules"]) or "none",
                e["diagnoses"],
                e["failed"],
                _shown_stuck(e),
                e["became_stuck"],
                e["got_unstuck"],
            ]
            for name, e in per_binding.items()
        ],
        "empty": "no binding in this report",
    }
    verdict_table: Table = {
        "title": "Stuck items per verdict at the end of the period",
        "columns": ["Binding", "Verdict", "Items"],
        "rows": [[name, v, n] for name, e in per_binding.items() for v, n in e["verdicts"].items() if n],
        "empty": "no stuck items",
    }
    with_items = {name: e for name, e in per_binding.items() if e["stuck_at_end"]}
    figure = charts.bars(
        "Stuck items per verdict",
        "items",
        STUCK_VERDICTS,
        {name: [e["verdicts"][v] for v in STUCK_VERDICTS] for name, e in with_items.items()},
    )
    return {
        "summary": {"bindings": per_binding, "totals": totals},
        "tables": [runs_table, verdict_table],
        "figures": [figure] if with_items else [],
        "csv_rows": csv_rows,
        "csv_truncated": truncated,
        "notes": [
            "Counts per verdict are the items stuck at the end of the period, with their latest verdict, "
            "of the stuck rules with a successful diagnosis in the period; the CSV lists them.",
            *(
                [
                    f"{totals['stuck_unknown']} stuck rule(s) had no successful diagnosis in the period: "
                    "their items at the end are unknown, not 0."
                ]
                if totals["stuck_unknown"]
                else []
            ),
        ],
    }


def _shown_stuck(entry: dict[str, Any]) -> int | str:
    """Items stuck at the end as the table shows them: the known rules' count, and the rules
    whose items are unknown (no successful diagnosis in the period)."""
    if not entry["unknown_rules"]:
        return shown_count(entry["stuck_at_end"])
    unknown = f"{UNKNOWN} for {', '.join(entry['unknown_rules'])}"
    return unknown if entry["stuck_at_end"] is None else f"{entry['stuck_at_end']} ({unknown})"
