"""Beat schedules of the bindings that existed before reconciliation was installed.

Later changes go through the post_save/post_delete signals (auditor/reconcile/schedules.py);
this migration repeats their logic on the historical models.
"""

import json

from django.db import migrations
from django.utils import timezone

TASK = "auditor.reconcile.tasks.reconcile_binding_task"


def add_schedules(apps, schema_editor):
    Binding = apps.get_model("pipelines", "Binding")
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    created = False
    for binding in Binding.objects.all():
        every = max(1, binding.schedule_seconds)
        interval, _ = IntervalSchedule.objects.get_or_create(every=every, period="seconds")
        _, new = PeriodicTask.objects.get_or_create(
            name=f"reconcile: {binding.name}",
            defaults={
                "task": TASK,
                "interval": interval,
                "kwargs": json.dumps({"binding_id": binding.pk, "trigger": "schedule"}),
                "enabled": binding.schedule_seconds > 0,
                "expire_seconds": every,
                "description": f"Reconcile topic {binding.topic} with {binding.table} (binding {binding.name}).",
            },
        )
        created = created or new
    if created:  # tells a running beat (DatabaseScheduler) to reload its schedule
        PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def remove_schedules(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reconcile", "0001_initial"),
        ("pipelines", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(add_schedules, remove_schedules)]
