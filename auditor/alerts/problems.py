"""Open, fold and resolve problems: the API other apps report through (their alerting.py)::

    raise_problem("finding:missing", "finding:tickets:missing", binding, "12 tickets missing", {"count": 12})
    resolve_problem("finding:tickets:missing")
``fingerprint`` identifies one problem (the caller chooses its granularity); it opens at
most one alert per channel. Detections of an open problem fold into it (count, last
seen, latest summary and details) without a delivery once its opening was delivered
(``Alert.notified``, set by delivery.py). A problem muted by an operator (acknowledgement
kind ``problem``, key = fingerprint) keeps being tracked, but its openings are recorded as
suppressed. Each channel sends at most ``rate_limit_per_minute()`` opened/notice deliveries
a minute; the rest are recorded as suppressed.

An opening is not lost until the problem resolves: a later detection of the still-open
problem sends it again when it was held back (rate limited, or muted) and the channel is now
under its limit and the problem not muted, or when its delivery failed (a permanent failure,
such as a missing secret or a 4xx, only once the channel was saved since). While it is held
back or on its way, a detection adds no delivery row.

Resolving sends ``resolved`` to each channel whose opening was delivered or is still on its
way (delivery.py sends it after the opening, and suppresses it if the opening then fails).
It is never held back: not by a mute (a mute silences openings), nor by the rate limit, nor
by a channel disabled since the opening went out; no receiver is left with a problem that
looks open forever.

Deliveries are recorded by outbox.py and sent by delivery.py (through tasks.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from auditor.accounts.acknowledgements import is_muted
from auditor.accounts.models import Acknowledgement
from auditor.alerts.events import validate_problem_kind
from auditor.alerts.formats import Message
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.outbox import rate_limit_reason, schedule
from auditor.lib.live import publish
from auditor.pipelines.models import Binding

log = logging.getLogger(__name__)

PROBLEM_ACK_KIND = "problem"
MAX_FINGERPRINT = 200
MAX_SUMMARY = 500
# An opening in one of these states was delivered or is on its way: its resolved follows it.
# (Read from the deliveries, not Alert.notified, which delivery.py sets just after.)
ANNOUNCED_OPENING = (Delivery.PENDING, Delivery.SENDING, Delivery.DELIVERED)


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
            elif (
                not alert.notified
                and mute is None
                and _opening_to_send_again(alert, channel)
                and rate_limit_reason(channel, now) is None
            ):
                _announce_opening(channel, alert)  # held back or failed at first: it goes out now
            alerts.append(alert)
    return alerts


def _announce_opening(channel: Channel, alert: Alert, suppress: str | None = None) -> None:
    """Schedule the alert's opened delivery (the alert is notified once it is delivered)."""
    schedule(channel, Delivery.OPENED, _message(channel, Delivery.OPENED, alert), alert=alert, suppress=suppress)


def _opening_to_send_again(alert: Alert, channel: Channel) -> bool:
    """Whether the alert's opening should be sent again: it was only held back so far, or its
    last delivery failed (for good: only if the channel was saved since, e.g. its secret fixed)."""
    last = alert.deliveries.filter(event=Delivery.OPENED).exclude(status=Delivery.SUPPRESSED).order_by("-pk").first()
    if last is None:
        return True
    if last.status != Delivery.FAILED:
        return False  # delivered, or still on its way
    return not last.permanent_error or (last.finished_at is not None and channel.updated_at > last.finished_at)


def resolve_problem(fingerprint: str) -> list[Alert]:
    """The problem cleared: resolve its open alerts and tell the channels that heard (or are
    hearing) of it."""
    _check_fingerprint(fingerprint)
    with transaction.atomic():
        now = timezone.now()
        alerts = list(
            Alert.objects.select_for_update(of=("self",))
            .select_related("channel", "binding")
            .filter(fingerprint=fingerprint, state=Alert.OPEN)
        )
        if not alerts:
            return []  # most calls: every run resolves each problem it did not see
        announced = set(
            Delivery.objects.filter(alert__in=alerts, event=Delivery.OPENED, status__in=ANNOUNCED_OPENING).values_list(
                "alert_id", flat=True
            )
        )
        for alert in alerts:
            alert.state, alert.resolved_at = Alert.RESOLVED, now
            alert.save(update_fields=["state", "resolved_at"])
            if alert.pk in announced:
                # Never suppressed: the receiver heard of the opening (or will, first).
                schedule(
                    alert.channel,
                    Delivery.RESOLVED,
                    _message(alert.channel, Delivery.RESOLVED, alert),
                    alert=alert,
                    rate_limited=False,
                )
            _publish_alert(alert, alert.channel)
    return alerts


def in_savepoint(update: Callable[[], None], failure: str, *args: object) -> None:
    """Raise or resolve one problem in a savepoint of its own, its failure logged (`failure`,
    `args`: the log message): a caller updating several leaves the others raised or resolved,
    and its own transaction (a run, a diagnosis) intact."""
    try:
        with transaction.atomic():
            update()
    except Exception:
        log.exception(failure, *args)
