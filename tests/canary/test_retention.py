"""Canary minutes past AUDITOR_CANARY_RETENTION_DAYS are deleted as the canary stores new ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from auditor.canary import store
from auditor.canary.accounting import DeliveryCounts
from auditor.canary.models import CanaryPoint

pytestmark = pytest.mark.django_db

SESSION = "a" * 32


def _point(topic: str, days_ago: float, cluster: str = "") -> int:
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(days=days_ago)
    return CanaryPoint.objects.create(session=SESSION, cluster=cluster, topic=topic, minute=minute, partition=0).pk


def _store_a_minute(topic: str) -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    store.record_minute(SESSION, topic, now, {0: DeliveryCounts()}, {0: 1})


def test_minutes_past_the_retention_are_deleted_as_a_minute_is_stored_once_an_hour(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AUDITOR_CANARY_RETENTION_DAYS = 30
    monkeypatch.setattr(store, "_pruned_at", None)
    old = [_point("canary-a", 31), _point("canary-b", 400, cluster="prod")]  # every topic and cluster
    kept = [_point("canary-a", 29), _point("canary-a", 1)]
    _store_a_minute("canary-a")
    remaining = set(CanaryPoint.objects.values_list("pk", flat=True))
    assert not remaining & set(old) and set(kept) <= remaining
    assert CanaryPoint.objects.filter(topic="canary-a", minute__gte=timezone.now() - timedelta(minutes=2)).exists()
    # within the hour the next minutes are stored without another DELETE
    later_old = _point("canary-a", 60)
    _store_a_minute("canary-a")
    assert CanaryPoint.objects.filter(pk=later_old).exists()
    assert store._pruned_at is not None
    monkeypatch.setattr(store, "_pruned_at", store._pruned_at - store.PRUNE_EVERY_S)  # an hour on
    _store_a_minute("canary-a")
    assert not CanaryPoint.objects.filter(pk=later_old).exists()


def test_a_retention_shorter_than_the_stopped_horizon_keeps_the_horizon_and_0_keeps_everything(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/metrics reads a canary's newest minute over AUDITOR_CANARY_STOPPED_HORIZON_S (7 days):
    deleting a stopped canary's minutes sooner would resolve its CanaryStopped alert."""
    settings.AUDITOR_CANARY_RETENTION_DAYS = 1
    settings.AUDITOR_CANARY_STOPPED_HORIZON_S = 7 * 24 * 3600
    within_horizon, past_it = _point("canary-h", 6), _point("canary-h", 8)
    assert store.prune_points(timezone.now()) == 1
    assert CanaryPoint.objects.filter(pk=within_horizon).exists()
    assert not CanaryPoint.objects.filter(pk=past_it).exists()
    settings.AUDITOR_CANARY_RETENTION_DAYS = 0
    ancient = _point("canary-h", 3650)
    assert store.prune_points(timezone.now()) == 0 and CanaryPoint.objects.filter(pk=ancient).exists()


def test_the_minute_just_stored_is_never_deleted_whatever_its_label(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A canary whose clock is far behind labels its minutes long ago: what it stores stays."""
    settings.AUDITOR_CANARY_RETENTION_DAYS = 30
    monkeypatch.setattr(store, "_pruned_at", None)
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(days=100)
    older = _point("canary-behind", 101)
    store.record_minute(SESSION, "canary-behind", minute, {0: DeliveryCounts()}, {0: 1})
    assert CanaryPoint.objects.filter(topic="canary-behind", minute=minute).exists()
    assert not CanaryPoint.objects.filter(pk=older).exists()


def test_a_backlog_is_deleted_a_batch_at_a_time(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.AUDITOR_CANARY_RETENTION_DAYS = 30
    monkeypatch.setattr(store, "PRUNE_BATCH", 2)
    old = {_point("canary-backlog", 40 + n) for n in range(5)}
    assert store.prune_points(timezone.now()) == 5
    assert not CanaryPoint.objects.filter(pk__in=old).exists()
