"""Fixtures of the report tests: bindings, and rows of every section inserted over a fixed day.

The period is 2030-01-07 (a Monday) 00:00 to 2030-01-08 00:00 UTC. Each section gets rows
inside the period, just outside it, and on a binding or cluster the report does not
cover, so the tests can assert exact numbers.
"""

from __future__ import annotations

import pytest

from auditor.pipelines.models import StuckRule
from auditor.reconcile.models import Finding
from tests.support.reports import (
    FORMULA_KEY,
    HOSTILE,
    ReportData,
    canary_point,
    diagnosis,
    lint_scan,
    make_binding,
    reconcile_run,
    stuck_item,
)


@pytest.fixture
def report_data(db: None) -> ReportData:
    tickets, orders = make_binding("tickets"), make_binding("orders")
    other = make_binding("other", cluster="elsewhere")
    data = ReportData(tickets, orders, other)

    # Reconciliation: tickets has 2 ok runs and 1 failed in the period (the latest ok one
    # holds the findings at the end), and one ok run the day before; orders one failed run.
    reconcile_run(tickets, -1, counts={"missing": 9}, new_findings=9)
    data.runs["first"] = reconcile_run(
        tickets, 1, counts={"missing": 2, "duplicate": 1}, new_findings=3, findings_pruned=True
    )
    reconcile_run(tickets, 2, status="failed", error="spark died")
    last = data.runs["last"] = reconcile_run(tickets, 3, counts={"missing": 1, "gap": 1}, new_findings=1)
    Finding.objects.create(run=last, binding=tickets, kind="missing", key=FORMULA_KEY)
    Finding.objects.create(
        run=last, binding=tickets, kind="gap", key="k2", cause="broker-lost", partition=0, offset=5, session="p1", seq=7
    )
    reconcile_run(orders, 4, status="failed", error="no source")
    other_run = reconcile_run(other, 5, counts={"orphan": 4}, new_findings=4)
    Finding.objects.create(run=other_run, binding=other, kind="orphan", cause="no-key")

    # Stuck items: the latest ok diagnosis in the period has waiting 1, skipped 1.
    rule = data.rule = StuckRule.objects.create(
        name="tickets-new", binding=tickets, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )
    diagnosis(rule, 1, counts={"waiting": 2, "skipped": 1}, became_stuck=3, total=3)
    diagnosis(rule, 5, counts={"waiting": 1, "skipped": 1}, got_unstuck=1, total=2)
    diagnosis(rule, 6, status="failed", error="source down")
    diagnosis(rule, 30, counts={"waiting": 7}, became_stuck=7)  # the next day
    stuck_item(rule, "A", "waiting", 1, 5)
    stuck_item(rule, HOSTILE, "skipped", 1, 5)
    stuck_item(rule, "C", "waiting", 1, 1, resolved=5)  # got unstuck in the period
    stuck_item(rule, "D", "waiting", 30, 30)  # stuck only the next day
    other_rule = StuckRule.objects.create(
        name="other-new", binding=other, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )
    diagnosis(other_rule, 1, counts={"expired": 5}, became_stuck=5)

    # Lint: the latest scan of the live system in the period is at 04:00.
    lint_scan(1, [("error", "main", "topic tickets", "T001"), ("error", "main", "topic orders", "T001")])
    lint_scan(
        4,
        [
            ("error", "main", "topic tickets", "T001"),
            ("warning", "main", "topic orders", "T002"),
            ("error", "main", "brokers 1", "B001"),
            ("warning", "main", f"topic {HOSTILE}", "T002"),
            ("info", "main", "topic tickets", "T003"),
            ("error", "elsewhere", "topic other", "T001"),
        ],
    )
    lint_scan(5, [("error", "main", "topic tickets", "T009")], trigger="paste")
    lint_scan(25, [])  # the next day

    # Canary: two minutes in the period, one the day before.
    canary_point(0.5, 0, sent=100, received=98, lost=2, duplicated=1, p99_ms=40.0, max_ms=60.0)
    canary_point(0.5, 1, sent=100, received=100, p99_ms=55.5, max_ms=70.0)
    canary_point(0.6, 0, sent=50, received=49, lost=1, p99_ms=30.0, max_ms=31.0)
    canary_point(-2, 0, sent=10, lost=10, p99_ms=999.0)
    return data
