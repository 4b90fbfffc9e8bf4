"""Kafka delivery auditor: a Django project with one sub-app per concern.

Nothing is imported here, so applications can embed ``auditor.probes`` without Django
or Celery installed. Django processes load the Celery app in StatusConfig.ready().
"""
