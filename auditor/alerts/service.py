"""Open, fold and resolve problems; create deliveries; deliver them.

Public API for the other apps::

    raise_problem("finding:missing", "finding:tickets:missing", binding, "12 tickets missing", {"count": 12})
    resolve_problem("finding:tickets:missing")

``fingerprint`` identifies one problem (the caller chooses its granularity); it opens at
most one alert per channel. Detections of an open problem fold into it (count, last
seen, latest summary and details) without a delivery. Resolving sends ``resolved`` to
the channels that were told about the opening (``Alert.notified``: its opened delivery
was queued, not suppressed). A problem muted by an operator (acknowledgement kind
``problem``, key = fingerprint) keeps being tracked, but its deliveries are recorded as
suppressed. Each channel sends at most ``rate_limit_per_minute()`` opened/notice
deliveries a minute; the rest are recorded as suppressed (resolved events are exempt,
so no receiver is left with a problem that looks open forever).

An opening held back (rate limited, or muted) is not lost: a later detection of the
still-open problem sends it once the channel is under its limit and the problem is not
muted, and from then on the alert counts as notified. While it is still held back, a
detection adds no delivery row (the log shows the one suppressed opening).
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from auditor.accounts.acknowledgements import is_muted
from auditor.accounts.models import Acknowledgement
from auditor.alerts import conf
from auditor.alerts.destinations import check_destination, post_json
from auditor.alerts.events import validate_problem_kind
from auditor.alerts.formats import Message, build_payload
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.retry import TransportError, call_with_retries
from auditor.alerts.signing import signature_headers
from auditor.lib.live import publish
from auditor.lib.secrets import MissingEnvError
from auditor.pipelines.models import Binding

log = logging.getLogger(__name__)

PROBLEM_ACK_KIND = "problem"
MAX_FINGERPRINT = 200
MAX_SUMMARY = 500


def _binding(binding: Binding | str | None) -> Binding | None:
    if binding is None or isinstance(binding, Binding):
        return binding
    try:
        return Binding.objects.get(name=binding)
    except Binding.DoesNotExist:
        raise ValueError(f"binding {binding!r} does not exist") from None


def _check_fingerprint(fingerprint: str) -> None:
    if not isinstance(fingerprint, str) or not fingerprint.strip() or len(fingerprint) > MAX_FINGERPRINT:
        raise ValueError(f"fingerprint must be a non-empty string of at most {MAX_FINGERPRINT} characters")


def _wants(channel: Channel, kind: str, binding: Binding | None, details: dict[str, Any]) -> bool:
    if not channel.event_filter.wants(kind, details):
        return False
    # A binding filter narrows binding problems; cluster-wide ones (no binding) pass it.
    selected = {b.pk for b in channel.bindings.all()}
    return not selected or binding is None or binding.pk in selected


def _message(channel: Channel, event: str, alert: Alert) -> Message:
    return Message(
        event=event,
        channel=channel.name,
        kind=alert.kind,
        summary=alert.summary,
        fingerprint=alert.fingerprint,
        binding=alert.binding.name if alert.binding else None,
        details=alert.details,
        alert=alert.as_dict(),
    )


def _mute_reason(mute: Acknowledgement) -> str:
    until = mute.mute_until.isoformat() if mute.mute_until else "it is withdrawn"
    return f"muted by {mute.username} until {until}: {mute.reason}"


def _rate_limit_reason(channel: Channel, now: datetime) -> str | None:
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


def _schedule(
    channel: Channel,
    event: str,
    message: Message,
    *,
    alert: Alert | None = None,
    suppress: str | None = None,
    rate_limited: bool = True,
) -> Delivery:
    """Record a delivery; enqueue it after commit unless it is suppressed."""
    now = timezone.now()
    if suppress is None and rate_limited:
        suppress = _rate_limit_reason(channel, now)
    delivery = Delivery.objects.create(
        channel=channel,
        alert=alert,
        event=event,
        payload=build_payload(channel.format, message),
        status=Delivery.SUPPRESSED if suppress else Delivery.PENDING,
        last_error=suppress or "",
        finished_at=now if suppress else None,
    )
    if suppress is None:
        enqueue(delivery.pk)
    return delivery


def enqueue(delivery_id: int) -> None:
    """Hand the delivery to a Celery worker once the transaction that created it commits."""
    from auditor.alerts.tasks import deliver_webhook

    transaction.on_commit(lambda: deliver_webhook.delay(delivery_id))


def _publish_alert(alert: Alert, channel: Channel) -> None:
    publish("alerts", "alert", {**alert.as_dict(), "channel": channel.name})


def _open_or_fold(
    channel: Channel,
    kind: str,
    fingerprint: str,
    binding: Binding | None,
    summary: str,
    details: dict[str, Any],
    now: datetime,
) -> tuple[Alert, bool]:
    for _ in range(2):
        existing = (
            Alert.objects.select_for_update().filter(channel=channel, fingerprint=fingerprint, state=Alert.OPEN).first()
        )
        if existing is not None:
            Alert.objects.filter(pk=existing.pk).update(
                count=F("count") + 1, last_seen=now, summary=summary, details=details
            )
            existing.refresh_from_db()
            return existing, False
        try:
            with transaction.atomic():  # a savepoint: a concurrent opener may win the unique constraint
                alert = Alert.objects.create(
                    channel=channel,
                    fingerprint=fingerprint,
                    kind=kind,
                    binding=binding,
                    summary=summary,
                    details=details,
                    first_seen=now,
                    last_seen=now,
                )
            return alert, True
        except IntegrityError:
            continue  # fold into the alert the other detection just opened
    raise RuntimeError(f"could not open or fold alert {fingerprint!r} on channel {channel.name}")


def raise_problem(
    kind: str,
    fingerprint: str,
    binding: Binding | str | None,
    summary: str,
    details: dict[str, Any] | None = None,
) -> list[Alert]:
    """Report a detection of a problem; returns the open alert of each channel that wants it."""
    validate_problem_kind(kind)
    _check_fingerprint(fingerprint)
    details = dict(details or {})
    json.dumps(details)  # fail here, naming the caller, rather than in the worker
    summary = (summary or kind).strip()[:MAX_SUMMARY]
    with transaction.atomic():
        binding_obj = _binding(binding)
        now = timezone.now()
        mute = is_muted(PROBLEM_ACK_KIND, fingerprint, now)
        channels = [
            c
            for c in Channel.objects.filter(enabled=True).prefetch_related("bindings")
            if _wants(c, kind, binding_obj, details)
        ]
        alerts = []
        for channel in channels:
            alert, opened = _open_or_fold(channel, kind, fingerprint, binding_obj, summary, details, now)
            if opened:
                _announce_opening(channel, alert, suppress=_mute_reason(mute) if mute else None)
                _publish_alert(alert, channel)
            elif not alert.notified and mute is None and _rate_limit_reason(channel, now) is None:
                _announce_opening(channel, alert)  # the opening held back at first goes out now
            alerts.append(alert)
    return alerts


def _announce_opening(channel: Channel, alert: Alert, suppress: str | None = None) -> None:
    """Schedule the alert's opened delivery; the alert is notified unless it was suppressed."""
    delivery = _schedule(
        channel, Delivery.OPENED, _message(channel, Delivery.OPENED, alert), alert=alert, suppress=suppress
    )
    alert.notified = delivery.status != Delivery.SUPPRESSED
    alert.save(update_fields=["notified"])


def resolve_problem(fingerprint: str) -> list[Alert]:
    """The problem cleared: resolve its open alerts and tell the channels that heard of it."""
    _check_fingerprint(fingerprint)
    with transaction.atomic():
        now = timezone.now()
        mute = is_muted(PROBLEM_ACK_KIND, fingerprint, now)
        alerts = list(
            Alert.objects.select_for_update(of=("self",))
            .select_related("channel", "binding")
            .filter(fingerprint=fingerprint, state=Alert.OPEN)
        )
        for alert in alerts:
            alert.state, alert.resolved_at = Alert.RESOLVED, now
            alert.save(update_fields=["state", "resolved_at"])
            if alert.notified and alert.channel.enabled:
                _schedule(
                    alert.channel,
                    Delivery.RESOLVED,
                    _message(alert.channel, Delivery.RESOLVED, alert),
                    alert=alert,
                    suppress=_mute_reason(mute) if mute else None,
                    rate_limited=False,
                )
            _publish_alert(alert, alert.channel)
    return alerts


def send_test(channel: Channel, user: User) -> Delivery:
    """A test delivery (not rate limited), e.g. from the channel page's button."""
    message = Message(
        event=Delivery.TEST,
        channel=channel.name,
        kind="test",
        summary=f"Test delivery from the Kafka delivery auditor, requested by {user.get_username()}",
    )
    with transaction.atomic():
        return _schedule(channel, Delivery.TEST, message, rate_limited=False)


def send_notice(kind: str, summary: str, details: dict[str, Any] | None = None) -> list[Delivery]:
    """A one-off notice (e.g. a finished report) to every enabled channel with ``reports`` on."""
    with transaction.atomic():
        return [
            _schedule(
                channel,
                Delivery.NOTICE,
                Message(event=Delivery.NOTICE, channel=channel.name, kind=kind, summary=summary, details=details or {}),
            )
            for channel in Channel.objects.filter(enabled=True)
            if channel.event_filter.reports
        ]


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


def requeue_stale_deliveries(older_than: timedelta = timedelta(minutes=10)) -> int:
    """Hand again to workers the deliveries whose task was lost (broker down at commit time,
    worker killed mid-send). Returns how many were queued again."""
    cutoff = timezone.now() - older_than
    with transaction.atomic():
        Delivery.objects.filter(status=Delivery.SENDING, claimed_at__lt=cutoff).update(status=Delivery.PENDING)
        stale = list(
            Delivery.objects.filter(status=Delivery.PENDING, created_at__lt=cutoff).values_list("pk", flat=True)
        )
        for delivery_id in stale:
            enqueue(delivery_id)
    return len(stale)
