"""Lint scans on the worker: on beat's schedule, or when someone presses "scan now"."""

from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth import get_user_model
from django.core.cache import cache

from auditor.lint.models import LintScan
from auditor.lint.service import scan_all

log = logging.getLogger(__name__)

SCAN_LOCK_KEY = "lint:scan-running"
SCAN_TIME_LIMIT = 600


def scan_running() -> bool:
    return cache.get(SCAN_LOCK_KEY) is not None


@shared_task(time_limit=SCAN_TIME_LIMIT, soft_time_limit=SCAN_TIME_LIMIT - 30)
def scan_all_task(trigger: str = LintScan.SCHEDULE, requested_by_id: int | None = None) -> int | None:
    """Scan every configured cluster; returns the scan's id, or None when one was already running.

    One scan at a time: a second request while one runs is dropped, since the running
    scan's result reaches every open page anyway.
    """
    if not cache.add(SCAN_LOCK_KEY, trigger, timeout=SCAN_TIME_LIMIT):
        log.info("lint scan (%s) skipped: another scan is running", trigger)
        return None
    try:
        user = get_user_model().objects.filter(pk=requested_by_id).first() if requested_by_id else None
        return scan_all(trigger, requested_by=user).pk
    finally:
        cache.delete(SCAN_LOCK_KEY)
