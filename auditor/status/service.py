"""The system status snapshot: computed by a task, cached, pushed when it changes."""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import cache

from auditor.lib.live import publish_now
from auditor.status.checks import run_all_checks

SNAPSHOT_KEY = "status:snapshot"


def current_snapshot() -> dict[str, Any] | None:
    return cache.get(SNAPSHOT_KEY)


def refresh_status() -> dict[str, Any]:
    """Run every check; store the snapshot and push it to browsers if anything changed."""
    components = [status.as_dict() for status in run_all_checks()]
    previous = current_snapshot()
    snapshot = {"checked_at": time.time(), "components": components}
    cache.set(SNAPSHOT_KEY, snapshot, timeout=None)
    if previous is None or previous["components"] != components:
        publish_now("status", "status", snapshot)
    return snapshot
