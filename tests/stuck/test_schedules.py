"""One beat PeriodicTask per stuck rule, kept in step with the rule; the task itself."""

from __future__ import annotations

import json

import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from auditor.pipelines.models import StuckRule
from auditor.stuck.models import DiagnosisRun
from auditor.stuck.schedules import TASK, sync_all_schedules, task_name
from auditor.stuck.tasks import diagnose_rule_task

pytestmark = pytest.mark.django_db


def test_it_keeps_a_periodic_task_in_step_with_each_rule(plain_rule: StuckRule) -> None:
    from auditor.celery import app

    app.loader.import_default_modules()
    task = PeriodicTask.objects.get(name=task_name(plain_rule.name))
    assert task.task == TASK and task.task in app.tasks
    assert json.loads(task.kwargs) == {"rule_id": plain_rule.pk}
    assert (task.interval.every, task.interval.period, task.enabled) == (300, "seconds", True)

    plain_rule.schedule_seconds = 60
    plain_rule.save()
    task.refresh_from_db()
    assert task.interval.every == 60

    old_name = plain_rule.name
    plain_rule.name = f"{old_name}-renamed"
    plain_rule.save()
    assert not PeriodicTask.objects.filter(name=task_name(old_name)).exists()
    assert PeriodicTask.objects.get(name=task_name(plain_rule.name)).kwargs == task.kwargs

    plain_rule.schedule_seconds = 0
    plain_rule.save()
    assert PeriodicTask.objects.get(name=task_name(plain_rule.name)).enabled is False

    plain_rule.delete()
    assert not PeriodicTask.objects.filter(task=TASK, kwargs=task.kwargs).exists()


def test_it_repairs_drift(plain_rule: StuckRule) -> None:
    PeriodicTask.objects.filter(name=task_name(plain_rule.name)).delete()
    every, _ = IntervalSchedule.objects.get_or_create(every=300, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="stuck: gone", task=TASK, kwargs=json.dumps({"rule_id": 0}), interval=every)

    assert sync_all_schedules() == StuckRule.objects.count()

    assert PeriodicTask.objects.filter(name=task_name(plain_rule.name)).exists()
    assert not PeriodicTask.objects.filter(name="stuck: gone").exists()


def test_the_task_skips_a_rule_that_is_gone_and_stores_failed_runs(plain_rule: StuckRule) -> None:
    assert diagnose_rule_task(999_999_999) is None
    run_id = diagnose_rule_task(plain_rule.pk, "manual")
    run = DiagnosisRun.objects.get(pk=run_id)
    assert (run.trigger, run.status) == ("manual", "failed")  # its table does not exist
