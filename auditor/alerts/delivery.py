"""Sending one recorded delivery: sign it, POST it, retry transient failures, record the outcome."""

from __future__ import annotations

import json
import logging
import time

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


def deliver(delivery_id: int) -> Delivery | None:
    """Send a pending delivery, retrying transient failures; None if another worker has it."""
    now = timezone.now()
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
            destination = check_destination(url, allow_private=conf.allow_private())
            headers = {
                **signature_headers(secret, body),
                "X-Auditor-Event": delivery.event,
                "X-Auditor-Delivery": str(delivery.pk),
            }
            status = post_json(destination, body, headers, timeout)
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
    publish(
        "alerts",
        "delivery",
        {
            "id": delivery.pk,
            "channel": channel.name,
            "event": delivery.event,
            "status": delivery.status,
            "attempts": delivery.attempts,
            "last_error": delivery.last_error,
        },
    )
    return delivery
