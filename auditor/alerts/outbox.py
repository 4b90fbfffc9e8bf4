"""Recording deliveries: one row per message to a channel, handed to a worker after commit.

Each channel sends at most ``rate_limit_per_minute()`` opened/notice deliveries a minute; the
rest are recorded as suppressed (resolved events are exempt). Sending is delivery.py's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from auditor.alerts import conf
from auditor.alerts.formats import Message, build_payload
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.tasks import enqueue


def rate_limit_reason(channel: Channel, now: datetime) -> str | None:
    """Why the channel may send no more opened/notice deliveries this minute (None: it may).

    Locks the channel row, so concurrent detections count the limit one at a time; call
    it inside the transaction that records the delivery.
    """
    Channel.objects.select_for_update().filter(pk=channel.pk).first()
    limit = conf.rate_limit_per_minute()
    recent = (
        Delivery.objects.filter(channel=channel, created_at__gte=now - timedelta(minutes=1))
        .exclude(status=Delivery.SUPPRESSED)
        .exclude(event=Delivery.RESOLVED)
        .count()
    )
    return f"rate limit: {limit} deliveries per minute reached on this channel" if recent >= limit else None


def schedule(
    channel: Channel,
    event: str,
    message: Message,
    *,
    alert: Alert | None = None,
    suppress: str | None = None,
    rate_limited: bool = True,
) -> Delivery:
    """Record a delivery; enqueue it after commit unless it is suppressed.

    Its payload carries its id and, for an alert's delivery, its sequence number among the
    alert's deliveries (the callers hold the alert's row lock, so numbers are not shared).
    """
    now = timezone.now()
    if suppress is None and rate_limited:
        suppress = rate_limit_reason(channel, now)
    sequence = Delivery.objects.filter(alert=alert).count() + 1 if alert is not None else None
    delivery = Delivery.objects.create(
        channel=channel,
        alert=alert,
        event=event,
        payload=build_payload(channel.format, message),  # fails on a bad format before the id is taken
        status=Delivery.SUPPRESSED if suppress else Delivery.PENDING,
        last_error=suppress or "",
        finished_at=now if suppress else None,
    )
    delivery.payload = build_payload(channel.format, replace(message, delivery_id=delivery.pk, sequence=sequence))
    delivery.save(update_fields=["payload"])
    if suppress is None:
        enqueue(delivery.pk)
    return delivery


def send_test(channel: Channel, user: User) -> Delivery:
    """A test delivery (not rate limited), e.g. from the channel page's button."""
    message = Message(
        event=Delivery.TEST,
        channel=channel.name,
        kind="test",
        summary=f"Test delivery from the Kafka delivery auditor, requested by {user.get_username()}",
    )
    with transaction.atomic():
        return schedule(channel, Delivery.TEST, message, rate_limited=False)


def covers(channel: Channel, binding_names: Collection[str]) -> bool:
    """Whether a channel may hear of every binding named: one scoped to bindings (as alerts
    honour it) hears only of those; an unscoped one of all."""
    selected = {binding.name for binding in channel.bindings.all()}
    return not selected or set(binding_names) <= selected


def send_notice(
    kind: str, summary: str, details: dict[str, Any] | None = None, *, binding_names: Collection[str] = ()
) -> list[Delivery]:
    """A one-off notice (e.g. a finished report) to every enabled channel with ``reports`` on
    whose binding scope covers ``binding_names`` (the bindings the notice tells of); a channel
    scoped to some of them is skipped rather than told of the others."""
    with transaction.atomic():
        return [
            schedule(
                channel,
                Delivery.NOTICE,
                Message(event=Delivery.NOTICE, channel=channel.name, kind=kind, summary=summary, details=details or {}),
            )
            for channel in Channel.objects.filter(enabled=True).prefetch_related("bindings")
            if channel.event_filter.reports and covers(channel, binding_names)
        ]
