"""The auditor's Celery app: Redis broker, django-celery-beat's database scheduler."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor.settings")

app = Celery("auditor")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
