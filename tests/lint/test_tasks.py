"""The scan task: one scan at a time, who asked for it, and beat's schedule for it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django_celery_beat.models import PeriodicTask

from auditor.accounts.roles import grant_role
from auditor.lint.models import LintScan
from auditor.lint.tasks import SCAN_LOCK_KEY, scan_all_task, scan_running

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_scan_running() -> Iterator[None]:
    cache.delete(SCAN_LOCK_KEY)
    yield
    cache.delete(SCAN_LOCK_KEY)


def test_it_runs_one_scan_at_a_time(no_scan_running, monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.lint import service, tasks

    # no cluster I/O: the test is about the lock and the scan's requester
    monkeypatch.setattr(
        tasks,
        "scan_all",
        lambda trigger, requested_by=None: service.scan_all(trigger, requested_by=requested_by, clusters=[]),
    )
    user = get_user_model().objects.create_user(username=f"u-{uuid.uuid4().hex[:6]}", password="pw-long-enough")
    grant_role(user, "operator")  # roles gate every page

    cache.add(SCAN_LOCK_KEY, "schedule", timeout=60)
    assert scan_running()
    assert scan_all_task("manual", user.pk) is None
    assert not LintScan.objects.filter(trigger="manual").exists()

    cache.delete(SCAN_LOCK_KEY)
    scan_id = scan_all_task("manual", user.pk)
    scan = LintScan.objects.get(pk=scan_id)
    assert (scan.trigger, scan.requested_by, scan.status) == ("manual", user, "ok")
    assert not scan_running()  # released when the scan is stored


def test_it_is_scheduled_by_beat_every_15_minutes() -> None:
    from auditor.celery import app

    app.loader.import_default_modules()
    task = PeriodicTask.objects.get(name="lint: scan all clusters")
    assert task.task == "auditor.lint.tasks.scan_all_task" and task.task in app.tasks
    assert (task.interval.every, task.interval.period, task.enabled) == (15, "minutes", True)
    assert json.loads(task.kwargs) == {"trigger": "schedule"}
