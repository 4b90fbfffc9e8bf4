"""A beat PeriodicTask for every stuck rule that existed before this app (schedules.py keeps them in step)."""

import json

from django.db import migrations
from django.utils import timezone

TASK = "auditor.stuck.tasks.diagnose_rule_task"


def add_schedules(apps, schema_editor):
    StuckRule = apps.get_model("pipelines", "StuckRule")
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    for rule in StuckRule.objects.all():
        seconds = int(rule.schedule_seconds or 0)
        every, _ = IntervalSchedule.objects.get_or_create(every=max(seconds, 1), period="seconds")
        PeriodicTask.objects.update_or_create(
            name=f"stuck: {rule.name}",
            defaults={
                "task": TASK,
                "interval": every,
                "kwargs": json.dumps({"rule_id": rule.pk}),
                "enabled": seconds > 0,
                "description": f"Diagnose the stuck items of rule {rule.name} (every {seconds} s; from the rule).",
            },
        )
    PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def remove_schedules(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("stuck", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(add_schedules, remove_schedules)]
