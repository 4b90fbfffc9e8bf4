"""Beat's schedule of each report schedule, kept in step with it.

One django-celery-beat PeriodicTask per ReportSchedule, named ``report: <name>``, runs
``build_scheduled_report_task(schedule_id)`` on a crontab: 06:00 UTC every day (daily)
or on Mondays (weekly). Saving a schedule (the page, the admin, the ORM: a post_save
signal) creates or updates its task, renames it with the schedule, and disables it with
the schedule; deleting the schedule deletes it (post_delete). ``sync_all_schedules()``
repairs drift (``audit report --sync-schedules``). Each change tells a running beat
(DatabaseScheduler) to reload. The schedule wins: a hand edit of the task in the admin
lasts until the schedule is saved again.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models.signals import post_delete, post_save
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from auditor.lib.beat import prune_tasks, remove_task, upsert_task
from auditor.reports.models import ReportSchedule
from auditor.reports.periods import BUILD_HOUR_UTC, WEEKLY

TASK = "auditor.reports.tasks.build_scheduled_report_task"
NAME_PREFIX = "report: "
MONDAY = "1"  # crontab's day_of_week: 0 is Sunday


def task_name(schedule_name: str) -> str:
    return f"{NAME_PREFIX}{schedule_name}"


def task_kwargs(schedule_id: int) -> str:
    return json.dumps({"schedule_id": schedule_id})


def crontab_for(period: str) -> CrontabSchedule:
    crontab, _ = CrontabSchedule.objects.get_or_create(
        minute="0",
        hour=str(BUILD_HOUR_UTC),
        day_of_week=MONDAY if period == WEEKLY else "*",
        day_of_month="*",
        month_of_year="*",
        timezone="UTC",
    )
    return crontab


def sync_schedule(schedule: ReportSchedule) -> PeriodicTask:
    """Create or update the schedule's PeriodicTask; writes only when something changed."""
    return upsert_task(
        name=task_name(schedule.name),
        task=TASK,
        kwargs=task_kwargs(schedule.pk),
        schedule={"crontab": crontab_for(schedule.period), "interval": None},
        enabled=schedule.enabled,
        description=f"Build the {schedule.period} report {schedule.name} (from the report schedule).",
    )


def remove_schedule(schedule_id: int) -> None:
    remove_task(TASK, task_kwargs(schedule_id))


def sync_all_schedules() -> int:
    """A task for every report schedule and none for schedules that are gone; returns how many."""
    schedules = list(ReportSchedule.objects.all())
    for schedule in schedules:
        sync_schedule(schedule)
    prune_tasks(TASK, {task_name(s.name) for s in schedules})
    return len(schedules)


def _saved(sender: type[ReportSchedule], instance: ReportSchedule, raw: bool = False, **kwargs: Any) -> None:
    if not raw:  # fixtures loading (raw) keep their own schedules
        sync_schedule(instance)


def _deleted(sender: type[ReportSchedule], instance: ReportSchedule, **kwargs: Any) -> None:
    remove_schedule(instance.pk)


def connect_signals() -> None:
    post_save.connect(_saved, sender=ReportSchedule, dispatch_uid="reports-schedule-saved")
    post_delete.connect(_deleted, sender=ReportSchedule, dispatch_uid="reports-schedule-deleted")
