"""Beat's schedule of each binding, kept in step with the binding.

One django-celery-beat PeriodicTask per binding, named ``reconcile: <binding>``, runs
``reconcile_binding_task(binding_id)`` every ``schedule_seconds`` (0 disables it). It is
created or updated whenever a binding is saved (``audit apply``, the admin, the ORM: a
post_save signal) and deleted with the binding (post_delete). A migration creates the
schedules of bindings that existed before this app. The DatabaseScheduler notices the
change (PeriodicTask.save bumps its change marker) without a restart.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models.signals import post_delete, post_save
from django_celery_beat.models import PeriodicTask

from auditor.lib.beat import every_seconds, remove_task, upsert_task
from auditor.pipelines.models import Binding

TASK = "auditor.reconcile.tasks.reconcile_binding_task"


def task_name(binding: Binding) -> str:
    return f"reconcile: {binding.name}"


def task_kwargs(binding_id: int) -> str:
    return json.dumps({"binding_id": binding_id, "trigger": "schedule"})


def sync_binding_schedule(binding: Binding) -> PeriodicTask:
    """Create or update the binding's PeriodicTask; only writes when something changed."""
    every = max(1, int(binding.schedule_seconds))
    return upsert_task(
        name=task_name(binding),
        task=TASK,
        kwargs=task_kwargs(binding.pk),
        schedule=every_seconds(every),
        enabled=binding.schedule_seconds > 0,
        description=f"Reconcile topic {binding.topic} with {binding.table} (binding {binding.name}).",
        # A run that waited a whole interval in the queue is superseded by the next one.
        expire_seconds=every,
    )


def remove_binding_schedule(binding_id: int) -> None:
    remove_task(TASK, task_kwargs(binding_id))


def _saved(sender: type[Binding], instance: Binding, raw: bool = False, **kwargs: Any) -> None:
    if not raw:  # fixtures loading (raw) keep their own schedules
        sync_binding_schedule(instance)


def _deleted(sender: type[Binding], instance: Binding, **kwargs: Any) -> None:
    remove_binding_schedule(instance.pk)


def connect_signals() -> None:
    post_save.connect(_saved, sender=Binding, dispatch_uid="reconcile-schedule-saved")
    post_delete.connect(_deleted, sender=Binding, dispatch_uid="reconcile-schedule-deleted")
