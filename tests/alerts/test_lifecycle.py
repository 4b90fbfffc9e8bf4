"""An alert's deliveries over its life: an opening that failed is sent again, a resolved goes
only where the opening was delivered, after it, and a mute never holds back a resolved."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from auditor.accounts.acknowledgements import acknowledge
from auditor.alerts import tasks
from auditor.alerts.delivery import deliver
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.problems import raise_problem, resolve_problem
from auditor.alerts.tasks import requeue_stale_deliveries
from tests.support.webhooks import SECRET_ENV, Receiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def deliver_pending() -> list[Delivery | None]:
    """What the Celery task does for each delivery once the transaction commits."""
    ids = Delivery.objects.filter(status=Delivery.PENDING).order_by("pk").values_list("pk", flat=True)
    return [deliver(pk) for pk in list(ids)]


def log_of(fingerprint: str) -> list[tuple[str, str]]:
    return list(Delivery.objects.filter(alert__fingerprint=fingerprint).order_by("pk").values_list("event", "status"))


async def _receive(layer: Any, browser: str) -> dict[str, Any]:
    return await asyncio.wait_for(layer.receive(browser), timeout=5)


def answered(receiver: Receiver) -> list[tuple[str, str]]:
    return [(r.json()["event"], r.json()["summary"]) for r in receiver.received]


def test_it_sends_again_an_opening_whose_delivery_failed(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_MAX_ATTEMPTS = 2
    make_channel()
    receiver.statuses.extend([503, 503])
    raise_problem("finding:missing", "fp", None, "missing")
    [failed] = deliver_pending()
    assert failed is not None and (failed.status, failed.permanent_error) == ("failed", False)
    assert not Alert.objects.get(fingerprint="fp").notified  # only a delivered opening counts

    [alert] = raise_problem("finding:missing", "fp", None, "still missing")
    assert log_of("fp") == [("opened", "failed"), ("opened", "pending")]
    deliver_pending()
    alert.refresh_from_db()
    assert alert.notified
    raise_problem("finding:missing", "fp", None, "missing a third time")  # delivered: folds, sends nothing
    resolve_problem("fp")
    deliver_pending()
    assert answered(receiver) == [
        ("opened", "missing"),
        ("opened", "missing"),
        ("opened", "still missing"),
        ("resolved", "missing a third time"),
    ]
    assert log_of("fp") == [("opened", "failed"), ("opened", "delivered"), ("resolved", "delivered")]


def test_it_sends_again_an_opening_that_failed_for_good_only_once_the_channel_is_fixed(
    webhook_settings, make_channel, receiver
):
    channel = make_channel(secret="${AUDITOR_TEST_NOT_SET_ANYWHERE}")
    raise_problem("finding:missing", "fp", None, "missing")
    [failed] = deliver_pending()
    assert failed is not None and (failed.status, failed.permanent_error) == ("failed", True)
    raise_problem("finding:missing", "fp", None, "still missing")  # nothing changed: no new attempt
    assert log_of("fp") == [("opened", "failed")]

    channel.secret = "${" + SECRET_ENV + "}"
    channel.save()
    raise_problem("finding:missing", "fp", None, "missing after the fix")
    deliver_pending()
    assert answered(receiver) == [("opened", "missing after the fix")]
    assert log_of("fp") == [("opened", "failed"), ("opened", "delivered")]


def test_it_sends_no_resolved_for_an_opening_that_failed(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_MAX_ATTEMPTS = 2
    make_channel()
    receiver.statuses.extend([503, 503])
    raise_problem("finding:missing", "fp", None, "missing")
    deliver_pending()
    resolve_problem("fp")
    deliver_pending()
    assert [event for event, _ in answered(receiver)] == ["opened", "opened"]
    assert log_of("fp") == [("opened", "failed")]


def test_it_sends_a_resolved_only_after_its_pending_opening(webhook_settings, make_channel, receiver):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    [opening] = Delivery.objects.all()
    resolve_problem("fp")  # before the worker got to the opening
    resolved = Delivery.objects.get(event="resolved")
    assert deliver(resolved.pk) is None  # waits for the opening
    assert receiver.received == []
    assert Delivery.objects.get(pk=resolved.pk).status == "pending"
    deliver(opening.pk)
    deliver(resolved.pk)
    assert [(r.json()["event"], r.json()["sequence"]) for r in receiver.received] == [("opened", 1), ("resolved", 2)]
    assert log_of("fp") == [("opened", "delivered"), ("resolved", "delivered")]


def test_it_keeps_the_order_when_a_lost_opening_is_requeued_after_the_resolve(webhook_settings, make_channel, receiver):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    hour_ago = timezone.now() - timedelta(hours=1)
    Delivery.objects.update(status=Delivery.SENDING, claimed_at=hour_ago)  # its worker died mid-send
    resolve_problem("fp")
    Delivery.objects.update(created_at=hour_ago)
    assert requeue_stale_deliveries() == 2
    resolved, opening = Delivery.objects.order_by("-pk")  # their tasks may run in any order
    assert deliver(resolved.pk) is None  # it waits for the opening
    deliver(opening.pk)
    deliver_pending()
    assert [(r.json()["event"], r.json()["alert"]["state"]) for r in receiver.received] == [
        ("opened", "open"),
        ("resolved", "resolved"),
    ]


def test_it_suppresses_a_waiting_resolved_whose_opening_then_failed(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_MAX_ATTEMPTS = 2
    make_channel()
    receiver.statuses.extend([503, 503])
    raise_problem("finding:missing", "fp", None, "missing")
    resolve_problem("fp")
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "opened"]
    assert log_of("fp") == [("opened", "failed"), ("resolved", "suppressed")]
    assert "opening was not delivered" in Delivery.objects.get(event="resolved").last_error


def test_it_pushes_a_suppressed_waiting_resolved_to_the_alerts_page(
    webhook_settings, make_channel, receiver, django_capture_on_commit_callbacks: Callable[..., Any]
):
    webhook_settings.AUDITOR_WEBHOOK_MAX_ATTEMPTS = 1
    make_channel()
    receiver.statuses.append(503)
    raise_problem("finding:missing", "fp", None, "missing")
    resolve_problem("fp")
    opening, resolved = Delivery.objects.order_by("pk")
    deliver(opening.pk)
    layer = get_channel_layer()
    browser = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("alerts", browser)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            deliver(resolved.pk)
        while True:
            message = async_to_sync(_receive)(layer, browser)
            if message["event"] == "delivery" and message["payload"]["id"] == resolved.pk:
                break
    finally:
        async_to_sync(layer.group_discard)("alerts", browser)
    assert message["payload"]["status"] == "suppressed"
    assert message["payload"]["last_error"] == "its opening was not delivered"


def test_it_hands_the_waiting_resolved_to_a_worker_when_the_opening_is_done(
    webhook_settings, make_channel, receiver, monkeypatch: pytest.MonkeyPatch
):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    resolve_problem("fp")
    opening, resolved = Delivery.objects.order_by("pk")
    queued: list[int] = []
    monkeypatch.setattr(tasks.deliver_webhook, "delay", lambda delivery_id: queued.append(delivery_id))
    tasks.deliver_webhook(resolved.pk)
    assert queued == []
    tasks.deliver_webhook(opening.pk)
    assert queued == [resolved.pk]


@pytest.mark.parametrize(
    "silence",
    [
        pytest.param(
            lambda users, channel: acknowledge(users["operator"], "problem", "fp", action="mute", reason="noisy"),
            id="muted",
        ),
        pytest.param(lambda users, channel: Channel.objects.filter(pk=channel.pk).update(enabled=False), id="disabled"),
    ],
)
def test_it_sends_the_resolved_of_a_delivered_opening_after_a_mute(
    webhook_settings, make_channel, receiver, role_users, silence: Callable[[Any, Any], Any]
):
    channel = make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    deliver_pending()
    silence(role_users, channel)
    raise_problem("finding:missing", "fp", None, "still missing")
    resolve_problem("fp")
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "resolved"]
    assert log_of("fp") == [("opened", "delivered"), ("resolved", "delivered")]
