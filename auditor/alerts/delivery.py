"""Sending one recorded delivery: sign it, POST it, retry transient failures, record the outcome.

The deliveries of one alert (one problem on one channel) go out in the order they were recorded:
one waits while an earlier one is pending or being sent, and the worker that finishes the earlier
one hands it over (``next_waiting``). A ``resolved`` whose opening ended up not delivered is
suppressed: the receiver never heard of the problem.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

from django.db.models import Exists, OuterRef
from django.utils import timezone

from auditor.alerts import conf
from auditor.alerts.destinations import check_destination, post_json
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.retry import TransportError, call_with_retries
from auditor.alerts.signing import signature_headers
from auditor.lib.live import publish
from auditor.lib.secrets import MissingEnvError

log = logging.getLogger(__name__)


def _body(delivery: Delivery) -> bytes:
    return json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode()


IN_FLIGHT = (Delivery.PENDING, Delivery.SENDING)


def _waits(delivery_id: int) -> bool:
    """Whether an earlier delivery of the same alert is still pending or being sent."""
    delivery = Delivery.objects.filter(pk=delivery_id).values("alert_id", "status").first()
    if delivery is None or delivery["status"] != Delivery.PENDING or delivery["alert_id"] is None:
        return False
    return Delivery.objects.filter(alert_id=delivery["alert_id"], pk__lt=delivery_id, status__in=IN_FLIGHT).exists()


def _suppress_unannounced_resolved(delivery_id: int, now: datetime) -> bool:
    """Suppress a pending ``resolved`` whose opening was not delivered (every earlier delivery
    of its alert is done by now); True if it was."""
    opening_delivered = Delivery.objects.filter(
        alert_id=OuterRef("alert_id"), event=Delivery.OPENED, status=Delivery.DELIVERED
    )
    return (
        Delivery.objects.filter(pk=delivery_id, status=Delivery.PENDING, event=Delivery.RESOLVED)
        .exclude(Exists(opening_delivered))
        .update(status=Delivery.SUPPRESSED, last_error="its opening was not delivered", finished_at=now)
        == 1
    )


def next_waiting(delivery: Delivery) -> int | None:
    """The pending delivery of the same alert that waited for this finished one, if any."""
    if delivery.alert_id is None or delivery.status in IN_FLIGHT:
        return None
    return (
        Delivery.objects.filter(alert_id=delivery.alert_id, pk__gt=delivery.pk, status=Delivery.PENDING)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )


def deliver(delivery_id: int) -> Delivery | None:
    """Send a pending delivery, retrying transient failures; None if another worker has it or it
    waits for an earlier delivery of its alert."""
    now = timezone.now()
    if _waits(delivery_id):
        return None
    if _suppress_unannounced_resolved(delivery_id, now):
        suppressed = Delivery.objects.select_related("channel").get(pk=delivery_id)
        _publish_delivery(suppressed, suppressed.channel.name)
        return suppressed
    claimed = Delivery.objects.filter(pk=delivery_id, status=Delivery.PENDING).update(
        status=Delivery.SENDING, claimed_at=now
    )
    if claimed != 1:
        return None
    delivery = Delivery.objects.select_related("channel").get(pk=delivery_id)
    channel = delivery.channel
    body = _body(delivery)
    timeout = conf.timeout_seconds()
    last_duration = {"ms": 0}

    def attempt(number: int) -> int:
        started = time.monotonic()
        try:
            try:
                url, secret = channel.resolved_url(), channel.resolved_secret()
            except MissingEnvError as exc:
                raise TransportError(f"channel {channel.name}: {exc}", permanent=True) from None
            if not secret:
                raise TransportError(f"channel {channel.name} has no signing secret", permanent=True)
            headers = {
                **signature_headers(secret, body),
                "X-Auditor-Event": delivery.event,
                "X-Auditor-Delivery": str(delivery.pk),
            }
            try:
                destination = check_destination(url, allow_private=conf.allow_private())
                status = post_json(destination, body, headers, timeout)
            except TransportError as error:
                # whatever of the (resolved) URL viewers may not see stays out of last_error
                raise error.hiding(url) from None
        finally:
            last_duration["ms"] = int((time.monotonic() - started) * 1000)
        Delivery.objects.filter(pk=delivery.pk).update(
            attempts=number, status_code=status, duration_ms=last_duration["ms"]
        )
        return status

    def record_failure(number: int, error: TransportError) -> None:
        Delivery.objects.filter(pk=delivery.pk).update(
            attempts=number,
            status_code=error.status_code,
            last_error=error.message,
            permanent_error=error.permanent,
            duration_ms=last_duration["ms"],
        )

    try:
        call_with_retries(
            attempt,
            max_attempts=conf.max_attempts(),
            backoff_seconds=conf.backoff_seconds(),
            on_failure=record_failure,
        )
    except TransportError as error:
        finished = timezone.now()
        Delivery.objects.filter(pk=delivery.pk).update(status=Delivery.FAILED, finished_at=finished)
        Channel.objects.filter(pk=channel.pk).update(
            last_error=f"{delivery.event} delivery #{delivery.pk}: {error.message}", last_error_at=finished
        )
        log.warning("webhook delivery %s to channel %s failed: %s", delivery.pk, channel.name, error.message)
    else:
        finished = timezone.now()
        Delivery.objects.filter(pk=delivery.pk).update(status=Delivery.DELIVERED, finished_at=finished)
        Channel.objects.filter(pk=channel.pk).update(last_delivery_at=finished)
        if delivery.event == Delivery.OPENED and delivery.alert_id is not None:
            Alert.objects.filter(pk=delivery.alert_id).update(notified=True)
    delivery.refresh_from_db()
    _publish_delivery(delivery, channel.name)
    return delivery


def _publish_delivery(delivery: Delivery, channel_name: str) -> None:
    publish(
        "alerts",
        "delivery",
        {
            "id": delivery.pk,
            "channel": channel_name,
            "event": delivery.event,
            "status": delivery.status,
            "attempts": delivery.attempts,
            "last_error": delivery.last_error,
        },
    )
