from __future__ import annotations

import time
from typing import Any

from celery import shared_task
from django.core.cache import cache

from auditor.status.checks import BEAT_HEARTBEAT_KEY
from auditor.status.service import refresh_status


@shared_task(time_limit=60, ignore_result=True)
def beat_heartbeat() -> None:
    """Scheduled by beat every few seconds: proves beat is alive."""
    cache.set(BEAT_HEARTBEAT_KEY, time.time(), timeout=None)


@shared_task(time_limit=60)
def refresh_status_task() -> dict[str, Any]:
    return refresh_status()


@shared_task(time_limit=30)
def echo(value: str) -> str:
    """A trivial round trip through the broker and a worker, for tests and checks."""
    return value
