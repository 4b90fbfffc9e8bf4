"""Beat's per-binding schedule follows the binding: created, changed, renamed, disabled, deleted."""

from __future__ import annotations

import json

import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from auditor.pipelines.config import apply_config, parse_config_text
from auditor.pipelines.models import Binding
from auditor.reconcile.models import ReconcileRun
from auditor.reconcile.schedules import TASK
from auditor.reconcile.tasks import reconcile_binding_task

pytestmark = pytest.mark.django_db


def schedule_of(binding: Binding) -> PeriodicTask:
    return PeriodicTask.objects.get(task=TASK, kwargs=json.dumps({"binding_id": binding.pk, "trigger": "schedule"}))


def test_it_schedules_a_binding_when_it_is_saved(make_binding) -> None:
    binding = make_binding("tickets", "tickets", "public.tickets", schedule_seconds=120)
    task = schedule_of(binding)
    assert task.name == "reconcile: tickets" and task.enabled
    assert (task.interval.every, task.interval.period) == (120, IntervalSchedule.SECONDS)
    assert task.expire_seconds == 120

    binding.schedule_seconds = 600
    binding.save()
    assert schedule_of(binding).interval.every == 600

    binding.name = "tickets-v2"
    binding.save()
    assert schedule_of(binding).name == "reconcile: tickets-v2"
    assert PeriodicTask.objects.filter(task=TASK).count() == 1

    binding.schedule_seconds = 0
    binding.save()
    assert schedule_of(binding).enabled is False

    binding.delete()
    assert not PeriodicTask.objects.filter(task=TASK).exists()


def test_it_schedules_the_bindings_of_an_applied_config(db) -> None:
    config = parse_config_text(
        """
clusters: {local: {bootstrap_servers: 127.0.0.1:9092}}
sources: {db: {url: "postgresql://app:${APP_DB_PASSWORD}@127.0.0.1/app"}}
bindings:
  orders: {cluster: local, topic: orders, source: db, table: public.orders, key_column: id, schedule: 5m}
"""
    )
    apply_config(config)
    assert schedule_of(Binding.objects.get(name="orders")).interval.every == 300


def test_it_skips_a_scheduled_run_while_one_is_in_progress(make_binding) -> None:
    binding = make_binding("busy", "t", "public.t")
    ReconcileRun.objects.create(binding=binding, trigger=ReconcileRun.MANUAL, status=ReconcileRun.RUNNING)
    assert reconcile_binding_task.run(binding.pk) is None
    assert ReconcileRun.objects.count() == 1
    assert reconcile_binding_task.run(binding.pk + 1000) is None  # a deleted binding's stale schedule
