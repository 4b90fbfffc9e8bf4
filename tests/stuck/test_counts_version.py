"""stuck.counts: the cached open counts are of the state the database is in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from auditor.pipelines.models import StuckRule
from auditor.stuck import counts
from auditor.stuck.models import DiagnosisRun, StuckItem

pytestmark = pytest.mark.integration

T = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _finished(rule: StuckRule, at: datetime) -> DiagnosisRun:
    return DiagnosisRun.objects.create(
        rule=rule, status=DiagnosisRun.OK, started_at=at - timedelta(seconds=5), finished_at=at
    )


@pytest.mark.django_db
def test_a_diagnosis_that_commits_after_a_later_one_is_counted(plain_rule: StuckRule) -> None:
    """Diagnosis A takes its finish time (T) before its transaction, diagnosis B of another rule
    takes T + 1 s and commits first, and a page caches the counts. A then commits its items with
    a finish time older than B's, and no item id above B's: before stop 71 the counts stayed
    B's for up to an hour. Ground truth: the items in the database."""
    other = StuckRule.objects.create(
        name=f"{plain_rule.name}-b",
        binding=plain_rule.binding,
        status_column="status",
        stuck_values=["NEW"],
        age_column="created_at",
    )
    first_item = StuckItem.objects.create(
        rule=plain_rule,
        key="k1",
        status="NEW",
        age_seconds=60,
        verdict="unknown",
        first_seen=T,
        last_seen=T,
        verdict_since=T,
    )
    _finished(other, T + timedelta(seconds=1))
    assert counts.open_counts().get((plain_rule.id, "unknown")) == 1  # cached

    first_item.verdict = "never-produced"  # A's transaction: an item changed, none created
    first_item.save()
    _finished(plain_rule, T)

    seen = counts.open_counts()
    assert seen.get((plain_rule.id, "never-produced")) == 1, seen
    assert (plain_rule.id, "unknown") not in seen
