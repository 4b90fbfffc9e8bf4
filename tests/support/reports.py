"""Report test data: rows of every section over a fixed day.

The period is 2030-01-07 (a Monday) 00:00 to 2030-01-08 00:00 UTC; ``at_hour(h)`` is h hours
into it (negative: the day before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from auditor.canary.models import CanaryPoint
from auditor.lint.models import LintResultRow, LintScan
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.models import ReconcileRun
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.vocabulary import STUCK_VERDICTS

START = datetime(2030, 1, 7, tzinfo=UTC)
END = START + timedelta(days=1)
HOSTILE = '<img src=x onerror="window.__xss=1">'
FORMULA_KEY = '=HYPERLINK("http://evil.example/","click")'
CANARY_TOPIC = "_audit.canary"


def at_hour(hours: float) -> datetime:
    return START + timedelta(hours=hours)


def make_binding(name: str, cluster: str = "main", topic: str | None = None) -> Binding:
    cluster_obj, _ = Cluster.objects.get_or_create(name=cluster, defaults={"bootstrap_servers": "127.0.0.1:9"})
    source, _ = SourceDatabase.objects.get_or_create(name="src", defaults={"url": "postgresql://app@127.0.0.1/app"})
    return Binding.objects.create(
        name=name, cluster=cluster_obj, topic=topic or name, source=source, table=f"public.{name}", key_column="id"
    )


def reconcile_run(binding: Binding, hours: float, status: str = "ok", **fields: Any) -> ReconcileRun:
    run = ReconcileRun.objects.create(
        binding=binding, status=status, trigger="schedule", finished_at=at_hour(hours) + timedelta(minutes=2), **fields
    )
    ReconcileRun.objects.filter(pk=run.pk).update(created_at=at_hour(hours))  # auto_now_add
    run.refresh_from_db()
    return run


def diagnosis(
    rule: StuckRule, hours: float, status: str = "ok", counts: dict[str, int] | None = None, **f: Any
) -> DiagnosisRun:
    return DiagnosisRun.objects.create(
        rule=rule,
        trigger="schedule",
        status=status,
        started_at=at_hour(hours),
        finished_at=at_hour(hours) + timedelta(seconds=30),
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
        first_seen=at_hour(first),
        last_seen=at_hour(last),
        verdict_since=at_hour(first),
        resolved_at=at_hour(resolved) if resolved is not None else None,
    )


def lint_scan(hours: float, results: list[tuple[str, str, str, str]], trigger: str = "schedule") -> LintScan:
    """results: (severity, cluster, subject, rule)."""
    scan = LintScan.objects.create(
        started_at=at_hour(hours) - timedelta(seconds=5),
        finished_at=at_hour(hours),
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
        session=counts.pop("session", "s1"),
        topic=counts.pop("topic", CANARY_TOPIC),
        minute=at_hour(hours),
        partition=partition,
        **counts,
    )


@dataclass
class ReportData:
    tickets: Binding
    orders: Binding
    other: Binding
    runs: dict[str, ReconcileRun] = field(default_factory=dict)
    rule: StuckRule | None = None
