"""Open findings, last successful run and stuck items by verdict on /metrics/."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.stuck.models import StuckItem
from tests.support.metrics import scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def binding() -> Binding:
    cluster = Cluster.objects.create(name="m-cluster", bootstrap_servers="127.0.0.1:1")
    source = SourceDatabase.objects.create(name="m-source", url="postgresql://u@127.0.0.1:1/db")
    return Binding.objects.create(
        name="m-tickets",
        cluster=cluster,
        topic="t",
        source=source,
        table="tickets",
        key_column="id",
        schedule_seconds=0,
    )


def run(binding: Binding, status: str, finished: datetime, kinds: list[str]) -> ReconcileRun:
    r = ReconcileRun.objects.create(binding=binding, status=status, trigger="cli", finished_at=finished)
    Finding.objects.bulk_create([Finding(run=r, binding=binding, kind=k, key=f"k{i}") for i, k in enumerate(kinds)])
    return r


def test_it_reports_open_findings_of_the_latest_successful_run_and_its_age(bearer, binding):
    run(binding, "ok", datetime(2026, 1, 1, tzinfo=UTC), ["missing", "missing", "orphan"])
    run(binding, "ok", datetime(2026, 1, 2, tzinfo=UTC), ["missing", "duplicate", "duplicate"])
    run(binding, "failed", datetime(2026, 1, 3, tzinfo=UTC), [])
    lines = scrape(bearer("viewer"))
    assert 'auditor_findings_open{binding="m-tickets",kind="duplicate"} 2' in lines
    assert 'auditor_findings_open{binding="m-tickets",kind="missing"} 1' in lines
    assert not any(line.startswith('auditor_findings_open{binding="m-tickets",kind="orphan"}') for line in lines)
    stamp = datetime(2026, 1, 2, tzinfo=UTC).timestamp()
    assert any(
        line.startswith('auditor_reconcile_last_success_timestamp_seconds{binding="m-tickets"} ')
        and float(line.rsplit(" ", 1)[1]) == stamp
        for line in lines
    )


def test_it_reports_open_stuck_items_by_rule_and_verdict(bearer, binding):
    rule = StuckRule.objects.create(
        name="m-new",
        binding=binding,
        status_column="status",
        stuck_values=["NEW"],
        age_column="created_at",
        schedule_seconds=0,
    )
    now = datetime(2026, 1, 2, tzinfo=UTC)
    common = {
        "rule": rule,
        "status": "NEW",
        "age_seconds": 700,
        "first_seen": now,
        "last_seen": now,
        "verdict_since": now,
    }
    StuckItem.objects.create(key="a", verdict="skipped", **common)
    StuckItem.objects.create(key="b", verdict="skipped", **common)
    StuckItem.objects.create(key="c", verdict="waiting", **common)
    StuckItem.objects.create(key="d", verdict="waiting", resolved_at=now, **common)
    lines = scrape(bearer("viewer"))
    assert 'auditor_stuck_items{rule="m-new",verdict="skipped"} 2' in lines
    assert 'auditor_stuck_items{rule="m-new",verdict="waiting"} 1' in lines
