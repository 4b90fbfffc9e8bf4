"""Push events to browsers over Channels, only after the database transaction commits."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

# Groups a browser may join; each page subscribes to the ones it shows.
LIVE_GROUPS = frozenset({"status", "canary", "reconcile", "stuck", "lint", "alerts"})


def publish_now(group: str, event: str, payload: dict[str, Any]) -> None:
    """Send ``payload`` as event ``audit.<event>`` to every browser in ``group``."""
    if group not in LIVE_GROUPS:
        raise ValueError(f"unknown live group {group!r}")
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            group, {"type": "audit.event", "group": group, "event": event, "payload": payload}
        )
    except Exception:
        log.exception("could not publish %s to live group %s", event, group)


def publish(group: str, event: str, payload: dict[str, Any]) -> None:
    """Like publish_now, deferred until the current transaction commits."""
    transaction.on_commit(lambda: publish_now(group, event, payload))
