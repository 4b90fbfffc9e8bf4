"""Kafka delivery auditor: a Django project with one sub-app per concern."""

from auditor.celery import app as celery_app

__all__ = ["celery_app"]
