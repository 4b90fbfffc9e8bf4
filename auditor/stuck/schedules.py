"""One beat schedule per stuck rule, kept in step with the rule.

Beat runs django-celery-beat's DatabaseScheduler, so each rule gets a PeriodicTask named
``stuck: <rule>`` running ``auditor.stuck.tasks.diagnose_rule_task`` with
``{"rule_id": <pk>}`` every ``schedule_seconds``:

- saving a StuckRule (the admin, ``audit apply``, the ORM) creates or updates its task
  (post_save signal); renaming a rule renames its task; ``schedule_seconds = 0`` disables it;
- deleting a rule deletes its task (post_delete);
- ``sync_all_schedules()`` (also run by migration 0002 and by ``audit stuck --sync-schedules``)
  repairs drift: a task for every rule, none for rules that are gone.

Each change bumps PeriodicTasks so a running beat reloads its schedule. Editing the
PeriodicTask by hand in the admin works until the rule is saved again: the rule wins.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models.signals import post_delete, post_save

from auditor.lib.beat import every_seconds, prune_tasks, remove_task, upsert_task
from auditor.pipelines.models import StuckRule

TASK = "auditor.stuck.tasks.diagnose_rule_task"
NAME_PREFIX = "stuck: "


def task_name(rule_name: str) -> str:
    return f"{NAME_PREFIX}{rule_name}"


def task_kwargs(rule_id: int) -> str:
    return json.dumps({"rule_id": rule_id})


def sync_schedule(rule: Any) -> Any:
    """Create or update the rule's PeriodicTask; returns it."""
    seconds = int(rule.schedule_seconds or 0)
    return upsert_task(
        name=task_name(rule.name),
        task=TASK,
        kwargs=task_kwargs(rule.pk),
        schedule=every_seconds(seconds),
        enabled=seconds > 0,
        description=f"Diagnose the stuck items of rule {rule.name} (every {seconds} s; from the rule).",
    )


def remove_schedule(rule: Any) -> None:
    remove_task(TASK, task_kwargs(rule.pk))


def sync_all_schedules() -> int:
    """A task for every rule and none for rules that are gone; returns the rules scheduled."""
    rules = list(StuckRule.objects.all())
    for rule in rules:
        sync_schedule(rule)
    prune_tasks(TASK, {task_name(rule.name) for rule in rules})
    return len(rules)


def _saved(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    if not raw:  # loaddata: the fixture carries its own PeriodicTasks
        sync_schedule(instance)


def _deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    remove_schedule(instance)


def connect_signals() -> None:
    post_save.connect(_saved, sender=StuckRule, dispatch_uid="stuck-schedule-saved")
    post_delete.connect(_deleted, sender=StuckRule, dispatch_uid="stuck-schedule-deleted")
