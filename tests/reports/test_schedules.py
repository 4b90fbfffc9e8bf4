"""Report schedules and beat's PeriodicTasks stay in step: created, updated, renamed, disabled, deleted."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django_celery_beat.models import PeriodicTask

from auditor.reports.models import ReportSchedule
from auditor.reports.periods import last_full_period
from auditor.reports.schedules import TASK, crontab_for, sync_all_schedules

pytestmark = pytest.mark.django_db


def task_of(schedule: ReportSchedule) -> PeriodicTask:
    return PeriodicTask.objects.get(task=TASK, kwargs=json.dumps({"schedule_id": schedule.pk}))


def crontab(task: PeriodicTask) -> tuple[str, str, str, str, str, str]:
    c = task.crontab
    return (c.minute, c.hour, c.day_of_week, c.day_of_month, c.month_of_year, str(c.timezone))


def test_it_creates_a_daily_crontab_task_with_the_schedule() -> None:
    schedule = ReportSchedule.objects.create(name="ops", period="daily")
    task = task_of(schedule)
    assert task.name == "report: ops" and task.enabled and task.interval is None
    assert crontab(task) == ("0", "6", "*", "*", "*", "UTC")


def test_it_follows_period_name_and_enabled_changes() -> None:
    schedule = ReportSchedule.objects.create(name="ops", period="daily")
    schedule.period, schedule.name, schedule.enabled = "weekly", "ops-weekly", False
    schedule.save()
    task = task_of(schedule)
    assert (task.name, task.enabled) == ("report: ops-weekly", False)
    assert crontab(task) == ("0", "6", "1", "*", "*", "UTC")  # Mondays
    assert PeriodicTask.objects.filter(task=TASK).count() == 1  # the old name is gone


def test_it_deletes_the_task_with_the_schedule() -> None:
    schedule = ReportSchedule.objects.create(name="ops")
    schedule.delete()
    assert not PeriodicTask.objects.filter(task=TASK).exists()


def test_it_repairs_drift() -> None:
    kept = ReportSchedule.objects.create(name="kept")
    PeriodicTask.objects.filter(task=TASK).delete()
    PeriodicTask.objects.create(
        name="report: gone", task=TASK, kwargs='{"schedule_id": 999}', crontab=crontab_for("daily")
    )
    assert sync_all_schedules() == 1
    assert list(PeriodicTask.objects.filter(task=TASK).values_list("name", flat=True)) == ["report: kept"]
    assert task_of(kept).crontab is not None


def test_it_reports_on_the_last_whole_day_or_week() -> None:
    wednesday = datetime(2030, 1, 9, 6, 0, 3, tzinfo=UTC)
    assert last_full_period("daily", wednesday) == (datetime(2030, 1, 8, tzinfo=UTC), datetime(2030, 1, 9, tzinfo=UTC))
    assert last_full_period("weekly", wednesday) == (
        datetime(2029, 12, 31, tzinfo=UTC),
        datetime(2030, 1, 7, tzinfo=UTC),
    )
    monday = datetime(2030, 1, 7, 6, tzinfo=UTC)
    assert last_full_period("weekly", monday) == (datetime(2029, 12, 31, tzinfo=UTC), monday.replace(hour=0))
    with pytest.raises(ValueError, match="unknown report period 'hourly'"):
        last_full_period("hourly", monday)
