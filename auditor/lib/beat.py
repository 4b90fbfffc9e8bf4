"""django-celery-beat PeriodicTasks kept in step with the objects that own them.

Bindings (reconciliation), stuck rules (diagnosis) and report schedules each own one
PeriodicTask, identified by (task, kwargs) and named after the owner. These helpers
create, update (writing only on change), rename and delete them; every write bumps
PeriodicTasks so a running beat reloads its schedule without a restart.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks


def every_seconds(seconds: int) -> dict[str, Any]:
    """The schedule part of upsert_task() for an interval (at least one second)."""
    interval, _ = IntervalSchedule.objects.get_or_create(every=max(1, int(seconds)), period=IntervalSchedule.SECONDS)
    return {"interval": interval, "crontab": None}


def upsert_task(
    *, name: str, task: str, kwargs: str, schedule: dict[str, Any], enabled: bool, description: str, **extra: Any
) -> PeriodicTask:
    """Create or update PeriodicTask ``name``; the owner's task under an old name (a rename) goes."""
    with transaction.atomic():
        renamed = PeriodicTask.objects.filter(task=task, kwargs=kwargs).exclude(name=name)
        if renamed.exists():
            renamed.delete()
            PeriodicTasks.update_changed()
        wanted: dict[str, Any] = {
            "task": task,
            "kwargs": kwargs,
            "enabled": enabled,
            "description": description,
            "interval": None,
            "crontab": None,
            **schedule,
            **extra,
        }
        existing = PeriodicTask.objects.filter(name=name).first()
        if existing is None:
            return PeriodicTask.objects.create(name=name, **wanted)
        changed = [field for field, value in wanted.items() if getattr(existing, field) != value]
        if changed:
            for field in changed:
                setattr(existing, field, wanted[field])
            existing.save()  # bumps PeriodicTasks: beat reloads
        return existing


def remove_task(task: str, kwargs: str) -> None:
    deleted, _ = PeriodicTask.objects.filter(task=task, kwargs=kwargs).delete()
    if deleted:
        PeriodicTasks.update_changed()


def prune_tasks(task: str, keep_names: Collection[str]) -> None:
    """Delete the PeriodicTasks of ``task`` whose owner is gone."""
    deleted, _ = PeriodicTask.objects.filter(task=task).exclude(name__in=list(keep_names)).delete()
    if deleted:
        PeriodicTasks.update_changed()
