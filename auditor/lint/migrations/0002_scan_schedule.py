"""Beat's schedule for lint scans: every 15 minutes, editable in the admin (Periodic tasks)."""

from django.db import migrations
from django.utils import timezone

TASK_NAME = "lint: scan all clusters"


def add_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every, _ = IntervalSchedule.objects.get_or_create(every=15, period="minutes")
    PeriodicTask.objects.get_or_create(
        name=TASK_NAME,
        defaults={
            "task": "auditor.lint.tasks.scan_all_task",
            "interval": every,
            "kwargs": '{"trigger": "schedule"}',
            "description": "Config lint of every configured cluster's brokers, bound topics and probe clients.",
        },
    )
    # tells a running beat (DatabaseScheduler) to reload its schedule
    PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("lint", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
