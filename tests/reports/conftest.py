"""Fixtures of the report tests: bindings, and rows of every section inserted over a fixed day.

The period is 2030-01-07 (a Monday) 00:00 to 2030-01-08 00:00 UTC. Each section gets rows
inside the period, just outside it, and on a binding or cluster the report does not
cover, so the tests can assert exact numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from auditor.canary.models import CanaryPoint
from auditor.lint.models import LintResultRow, LintScan
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.vocabulary import STUCK_VERDICTS
from tests.accounts.fixtures import client_as, role_users

__all__ = ["client_as", "role_users"]

START = datetime(2030, 1, 7, tzinfo=UTC)
END = START + timedelta(days=1)
HOSTILE = '<img src=x onerror="window.__xss=1">'
FORMULA_KEY = '=HYPERLINK("http://evil.example/","click")'
CANARY_TOPIC = "_audit.canary"


def at(hours: float) -> datetime:
    return START + timedelta(hours=hours)


def make_binding(name: str, cluster: str = "main", topic: str | None = None) -> Binding:
    cluster_obj, _ = Cluster.objects.get_or_create(name=cluster, defaults={"bootstrap_servers": "127.0.0.1:9"})
    source, _ = SourceDatabase.objects.get_or_create(name="src", defaults={"url": "postgresql://app@127.0.0.1/app"})
    return Binding.objects.create(
        name=name, cluster=cluster_obj, topic=topic or name, source=source, table=f"public.{name}", key_column="id"
    )


def reconcile_run(binding: Binding, hours: float, status: str = "ok", **fields: Any) -> ReconcileRun:
    run = ReconcileRun.objects.create(
        binding=binding, status=status, trigger="schedule", finished_at=at(hours) + timedelta(minutes=2), **fields
    )
    ReconcileRun.objects.filter(pk=run.pk).update(created_at=at(hours))  # auto_now_add
    run.refresh_from_db()
    return run


def diagnosis(
    rule: StuckRule, hours: float, status: str = "ok", counts: dict[str, int] | None = None, **f: Any
) -> DiagnosisRun:
    return DiagnosisRun.objects.create(
        rule=rule,
        trigger="schedule",
        status=status,
        started_at=at(hours),
        finished_at=at(hours) + timedelta(seconds=30),
        counts=dict.fromkeys(STUCK_VERDICTS, 0) | (counts or {}),
        **f,
    )


def stuck_item(
    rule: StuckRule, key: str, verdict: str, first: float, last: float, resolved: float | None = None
) -> StuckItem:
    return StuckItem.objects.create(
        rule=rule,
        key=key,
        status="NEW",
        age_seconds=600.0,
        verdict=verdict,
        reason=f"because {verdict}",
        first_seen=at(first),
        last_seen=at(last),
        verdict_since=at(first),
        resolved_at=at(resolved) if resolved is not None else None,
    )


def lint_scan(hours: float, results: list[tuple[str, str, str, str]], trigger: str = "schedule") -> LintScan:
    """results: (severity, cluster, subject, rule)."""
    scan = LintScan.objects.create(
        started_at=at(hours) - timedelta(seconds=5),
        finished_at=at(hours),
        trigger=trigger,
        error_count=sum(r[0] == "error" for r in results),
        warning_count=sum(r[0] == "warning" for r in results),
        info_count=sum(r[0] == "info" for r in results),
        summary="1 cluster",
    )
    for severity, cluster, subject, rule in results:
        LintResultRow.objects.create(
            scan=scan,
            rule=rule,
            title=f"title of {rule}",
            severity=severity,
            target_kind="topic",
            cluster=cluster,
            subject=subject,
            config_key="unclean.leader.election.enable",
            value=True,
            expected="false",
            message="m",
            guarantee="at-least-once",
            source="explicit",
        )
    return scan


def canary_point(hours: float, partition: int, **counts: Any) -> CanaryPoint:
    return CanaryPoint.objects.create(
        session="s1", topic=counts.pop("topic", CANARY_TOPIC), minute=at(hours), partition=partition, **counts
    )


@dataclass
class ReportData:
    tickets: Binding
    orders: Binding
    other: Binding
    runs: dict[str, ReconcileRun] = field(default_factory=dict)
    rule: StuckRule | None = None


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
