"""Webhook delivery to a real HTTP receiver on loopback: signatures, retries, folding, resolve."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from auditor.accounts.acknowledgements import acknowledge, withdraw
from auditor.alerts.delivery import deliver
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.outbox import send_test
from auditor.alerts.problems import raise_problem, resolve_problem
from auditor.alerts.tasks import requeue_stale_deliveries
from tests.support.webhooks import SECRET_ENV

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def deliver_pending() -> list[Delivery]:
    """What the Celery task does for each delivery once the transaction commits."""
    ids = Delivery.objects.filter(status=Delivery.PENDING).order_by("pk").values_list("pk", flat=True)
    return [deliver(pk) for pk in list(ids)]


def test_it_sends_a_signed_generic_payload(webhook_settings, make_channel, receiver):
    channel = make_channel()
    raise_problem("finding:missing", "finding:tickets:missing", None, "12 tickets missing", {"count": 12})
    [delivery] = deliver_pending()
    [request] = receiver.received
    assert request.signature_valid
    assert request.headers["X-Auditor-Signature"].startswith("v1=")
    assert request.headers["X-Auditor-Event"] == "opened"
    assert request.headers["X-Auditor-Delivery"] == str(delivery.pk)
    body = request.json()
    assert body["event"] == "opened" and body["kind"] == "finding:missing"
    assert body["fingerprint"] == "finding:tickets:missing" and body["details"] == {"count": 12}
    assert body["alert"]["count"] == 1 and body["channel"] == "ops"
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("delivered", 1, 200)
    assert delivery.duration_ms is not None and delivery.last_error == ""
    channel.refresh_from_db()
    assert channel.last_delivery_at is not None


def test_it_signs_the_delivery_id_event_and_sequence_in_the_body(webhook_settings, make_channel, receiver):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    resolve_problem("fp")
    deliveries = deliver_pending()
    assert len(receiver.received) == 2
    for request, delivery in zip(receiver.received, deliveries, strict=True):
        body = request.json()
        assert request.signature_valid  # receivers may deduplicate on what the signature covers
        assert body["delivery_id"] == delivery.pk and request.headers["X-Auditor-Delivery"] == str(delivery.pk)
        assert body["event"] == delivery.event == request.headers["X-Auditor-Event"]
    assert [(r.json()["event"], r.json()["sequence"]) for r in receiver.received] == [("opened", 1), ("resolved", 2)]


def test_it_names_the_delivery_in_a_slack_payload(webhook_settings, make_channel, receiver):
    make_channel(format=Channel.SLACK)
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    context = receiver.received[0].json()["blocks"][2]["elements"][0]["text"]
    assert f"delivery #{delivery.pk}" in context


def test_it_retries_5xx_and_records_exactly_three_attempts(webhook_settings, make_channel, receiver):
    make_channel()
    receiver.statuses.extend([500, 500])
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("delivered", 3, 200)
    assert len(receiver.received) == 3
    assert all(r.signature_valid for r in receiver.received)
    assert len({r.body for r in receiver.received}) == 1  # the same body on every attempt


def test_it_stops_at_a_4xx_and_records_a_permanent_error(webhook_settings, make_channel, receiver):
    channel = make_channel()
    receiver.statuses.append(400)
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("failed", 1, 400)
    assert delivery.permanent_error
    assert delivery.last_error == "HTTP 400 Bad Request: bad request: missing field"
    assert len(receiver.received) == 1
    channel.refresh_from_db()
    assert "HTTP 400" in channel.last_error and channel.last_error_at is not None


def test_it_retries_timeouts(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_TIMEOUT_SECONDS = 0.3
    make_channel()
    receiver.delays.extend([1.0, 1.0])
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert (delivery.status, delivery.attempts) == ("delivered", 3)


def test_it_gives_up_after_the_last_attempt(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_MAX_ATTEMPTS = 3
    make_channel()
    receiver.statuses.extend([503, 503, 503, 503])
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("failed", 3, 503)
    assert not delivery.permanent_error and delivery.last_error.startswith("HTTP 503")


def test_it_folds_repeated_detections_and_sends_resolved(webhook_settings, make_channel, receiver):
    make_channel()
    for i in range(5):
        alerts = raise_problem("finding:missing", "fp", None, f"{i + 1} missing", {"count": i + 1})
    [alert] = alerts
    assert (alert.count, alert.state, alert.summary) == (5, "open", "5 missing")
    assert Delivery.objects.count() == 1
    deliver_pending()
    [resolved] = resolve_problem("fp")
    assert resolved.state == "resolved" and resolved.resolved_at is not None
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "resolved"]
    assert receiver.received[1].json()["alert"]["count"] == 5
    assert receiver.received[1].signature_valid
    assert resolve_problem("fp") == []  # nothing open any more: no second resolved event
    assert Delivery.objects.count() == 2


def test_it_opens_a_new_alert_when_a_resolved_problem_returns(webhook_settings, make_channel, receiver):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    resolve_problem("fp")
    raise_problem("finding:missing", "fp", None, "missing again")
    assert Alert.objects.filter(fingerprint="fp").count() == 2
    assert list(Delivery.objects.order_by("pk").values_list("event", flat=True)) == ["opened", "resolved", "opened"]


def test_it_refuses_a_loopback_destination_by_default(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_ALLOW_PRIVATE = False
    channel = make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert (delivery.status, delivery.attempts, delivery.permanent_error) == ("failed", 1, True)
    assert "resolves to 127.0.0.1, a loopback address" in delivery.last_error
    assert "AUDITOR_WEBHOOK_ALLOW_PRIVATE" in delivery.last_error
    assert receiver.received == []
    channel.refresh_from_db()
    assert "loopback" in channel.last_error


def test_it_rate_limits_each_channel(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_RATE_LIMIT_PER_MINUTE = 2
    make_channel()
    for fp in ("a", "b", "c"):
        raise_problem("finding:missing", fp, None, fp)
    statuses = dict(Delivery.objects.values_list("alert__fingerprint", "status"))
    assert statuses == {"a": "pending", "b": "pending", "c": "suppressed"}
    assert "rate limit: 2 deliveries per minute" in Delivery.objects.get(alert__fingerprint="c").last_error
    resolve_problem("c")  # never announced: no resolved event either
    resolve_problem("a")  # resolved events are exempt from the limit
    assert Delivery.objects.filter(event="resolved", status="pending").count() == 1
    assert Delivery.objects.filter(event="resolved").count() == 1


def test_it_sends_a_rate_limited_opening_once_the_channel_is_under_its_limit(webhook_settings, make_channel, receiver):
    webhook_settings.AUDITOR_WEBHOOK_RATE_LIMIT_PER_MINUTE = 2
    make_channel()
    for fp in ("a", "b", "c"):
        raise_problem("finding:missing", fp, None, fp)
    raise_problem("finding:missing", "c", None, "c again")  # still over the limit: held back, nothing recorded
    assert Delivery.objects.filter(alert__fingerprint="c").count() == 1
    assert not Alert.objects.get(fingerprint="c").notified
    deliver_pending()
    assert len(receiver.received) == 2

    Delivery.objects.update(created_at=timezone.now() - timedelta(minutes=2))  # the minute has passed
    [alert] = raise_problem("finding:missing", "c", None, "c a third time")
    assert not alert.notified and alert.count == 3  # notified once delivered, not when queued
    deliver_pending()
    alert.refresh_from_db()
    assert alert.notified
    raise_problem("finding:missing", "c", None, "c a fourth time")  # announced now: folds without a delivery
    resolve_problem("c")
    deliver_pending()
    assert [(r.json()["fingerprint"], r.json()["event"]) for r in receiver.received] == [
        ("a", "opened"),
        ("b", "opened"),
        ("c", "opened"),
        ("c", "resolved"),
    ]
    assert receiver.received[2].json()["summary"] == "c a third time"
    assert receiver.received[3].json()["alert"]["count"] == 4
    assert all(r.signature_valid for r in receiver.received)
    assert list(Delivery.objects.filter(alert__fingerprint="c").order_by("pk").values_list("event", "status")) == [
        ("opened", "suppressed"),
        ("opened", "delivered"),
        ("resolved", "delivered"),
    ]


def test_it_sends_a_muted_opening_once_the_mute_is_withdrawn(webhook_settings, make_channel, receiver, role_users):
    make_channel()
    mute = acknowledge(role_users["operator"], "problem", "fp", action="mute", reason="deploy")
    raise_problem("finding:missing", "fp", None, "missing")
    raise_problem("finding:missing", "fp", None, "still missing")  # still muted: held back
    assert list(Delivery.objects.values_list("event", "status")) == [("opened", "suppressed")]
    withdraw(role_users["operator"], mute)
    [alert] = raise_problem("finding:missing", "fp", None, "missing after the deploy")
    deliver_pending()
    alert.refresh_from_db()
    assert alert.notified
    resolve_problem("fp")
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "resolved"]
    assert receiver.received[0].json()["summary"] == "missing after the deploy"
    assert Delivery.objects.count() == 3


def test_it_never_sends_resolved_for_an_opening_that_was_never_sent(
    webhook_settings, make_channel, receiver, role_users
):
    make_channel()
    acknowledge(role_users["operator"], "problem", "fp", action="mute", reason="known")
    raise_problem("finding:missing", "fp", None, "missing")
    raise_problem("finding:missing", "fp", None, "missing")
    resolve_problem("fp")
    deliver_pending()
    assert receiver.received == []
    assert list(Delivery.objects.values_list("event", "status")) == [("opened", "suppressed")]


def test_it_suppresses_deliveries_of_a_muted_problem(webhook_settings, make_channel, receiver, role_users):
    make_channel()
    acknowledge(
        role_users["operator"],
        "problem",
        "fp",
        action="mute",
        reason="maintenance window",
        mute_until=timezone.now() + timedelta(hours=1),
    )
    [alert] = raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = Delivery.objects.all()
    assert delivery.status == "suppressed"
    assert "muted by user-operator" in delivery.last_error and "maintenance window" in delivery.last_error
    assert alert.state == "open" and not alert.notified


def test_it_sends_slack_compatible_payloads(webhook_settings, make_channel, receiver):
    make_channel(format=Channel.SLACK)
    raise_problem("stuck:skipped", "stuck:tickets:skipped", None, "3 tickets <skipped> & lost")
    deliver_pending()
    body = receiver.received[0].json()
    assert set(body) == {"text", "blocks"}
    assert body["text"] == "[Problem] stuck:skipped: 3 tickets &lt;skipped&gt; &amp; lost"
    assert [block["type"] for block in body["blocks"]] == ["header", "section", "context"]
    assert receiver.received[0].signature_valid


def test_it_sends_a_test_delivery(webhook_settings, make_channel, receiver, role_users):
    channel = make_channel()
    delivery = send_test(channel, role_users["operator"])
    deliver(delivery.pk)
    assert receiver.received[0].json()["event"] == "test"
    assert "requested by user-operator" in receiver.received[0].json()["summary"]


def test_it_fails_permanently_when_the_secret_variable_is_missing(webhook_settings, make_channel, receiver):
    make_channel(secret="${AUDITOR_TEST_NOT_SET_ANYWHERE}")
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert (delivery.status, delivery.attempts, delivery.permanent_error) == ("failed", 1, True)
    assert "AUDITOR_TEST_NOT_SET_ANYWHERE is not set" in delivery.last_error
    assert receiver.received == []


def test_it_claims_a_delivery_only_once(webhook_settings, make_channel, receiver):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert deliver(delivery.pk) is None
    assert len(receiver.received) == 1


def test_it_requeues_deliveries_whose_task_was_lost(webhook_settings, make_channel, receiver):
    make_channel()
    raise_problem("finding:missing", "fp", None, "missing")
    Delivery.objects.update(created_at=timezone.now() - timedelta(hours=1))
    assert requeue_stale_deliveries() == 1
    assert requeue_stale_deliveries(older_than=timedelta(days=1)) == 0


def test_it_uses_the_secret_from_the_environment(make_channel):
    channel = make_channel()
    assert channel.secret == "${" + SECRET_ENV + "}"
    assert channel.secret_state() == "set" and channel.masked_secret() == "****"


@pytest.mark.parametrize("by_reference", [False, True], ids=["literal", "env-reference"])
def test_it_keeps_a_hook_path_quoted_back_in_a_404_out_of_every_error_viewers_see(
    webhook_settings, make_channel, receiver, client_as, monkeypatch, by_reference
):
    """A receiver answering 404 with `Cannot POST /services/T0/B0/<token>` (Express's default)
    must not hand viewers the token that mask_webhook_url hides."""
    token = "XXXXSECRET42"
    url = f"{receiver.base_url}/services/T0/B0/{token}?key=QUERYSECRET7"
    if by_reference:
        monkeypatch.setenv("AUDITOR_TEST_HOOK_URL", url)
    channel = make_channel(url="${AUDITOR_TEST_HOOK_URL}" if by_reference else url)
    receiver.echo_404 = True
    pushed: list[object] = []
    monkeypatch.setattr("auditor.alerts.delivery.publish", lambda *args: pushed.append(args))
    raise_problem("finding:missing", "fp", None, "missing")
    [delivery] = deliver_pending()
    assert [r.path for r in receiver.received] == [f"/services/T0/B0/{token}?key=QUERYSECRET7"]
    assert (delivery.status, delivery.status_code) == ("failed", 404)
    assert delivery.last_error.startswith("HTTP 404 Not Found: <pre>Cannot POST ****")
    channel.refresh_from_db()
    for text in (delivery.last_error, channel.last_error, repr(pushed)):
        assert token not in text and "QUERYSECRET7" not in text
    viewer = client_as("viewer")
    for page in ("/alerts/", f"/alerts/channels/{channel.pk}/", "/api/alerts/channels/"):
        response = viewer.get(page)
        assert response.status_code == 200, page
        content = response.content.decode()
        assert "Cannot POST" in content or page == "/alerts/", page  # the error is shown, masked
        assert token not in content and "QUERYSECRET7" not in content, page
