"""Alert endpoints of the JSON API, per role and scope."""

from __future__ import annotations

import pytest
from django.test import Client

from auditor.accounts.models import Acknowledgement
from auditor.alerts.models import Alert
from auditor.alerts.problems import raise_problem, resolve_problem
from auditor.api.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def token_for(role_users):
    def make(role: str, scope: str = "read") -> dict[str, str]:
        _, raw = create_token(role_users[role], "t", scope)
        return {"Authorization": f"Bearer {raw}"}

    return make


@pytest.fixture
def alerts(make_channel, webhook_settings):
    make_channel("one")
    make_channel("two", events={"lint_severity": "error"})
    raise_problem("finding:missing", "f1", None, "missing")
    raise_problem("lint:error", "l1", None, "lint")
    resolve_problem("l1")


def test_it_lists_alerts_with_filters_and_acknowledgements(token_for, alerts, role_users):
    from auditor.accounts.acknowledgements import acknowledge

    acknowledge(role_users["operator"], "problem", "f1", action="ack", reason="on it")
    body = Client().get("/api/alerts/?state=open", headers=token_for("viewer")).json()
    assert [(a["fingerprint"], a["channel"]) for a in body["results"]] == [("f1", "one")]
    assert body["results"][0]["acknowledgement"]["reason"] == "on it"
    two = Client().get("/api/alerts/?channel=two", headers=token_for("viewer")).json()
    assert [(a["fingerprint"], a["state"], a["acknowledgement"]) for a in two["results"]] == [("l1", "resolved", None)]
    bad = Client().get("/api/alerts/?state=closed", headers=token_for("viewer"))
    assert bad.status_code == 400 and "open, resolved" in bad.json()["error"]


def test_it_lists_channels_without_secrets(token_for, alerts):
    body = Client().get("/api/alerts/channels/", headers=token_for("viewer")).json()
    assert [c["name"] for c in body["results"]] == ["one", "two"]
    assert "secret" not in str(body)


def test_it_lists_a_literal_webhook_url_without_the_token_in_its_path(token_for, make_channel, webhook_settings):
    make_channel("slack-hook", url="https://hooks.slack.com/services/T0/B0/XXXXSECRET?sig=abc")
    body = Client().get("/api/alerts/channels/", headers=token_for("viewer")).json()
    assert [c["url"] for c in body["results"]] == ["https://hooks.slack.com/****"]
    assert "XXXXSECRET" not in str(body) and "abc" not in str(body)


@pytest.mark.parametrize(
    "role,scope,status",
    [
        ("viewer", "write", 403),
        ("operator", "read", 403),
        ("operator", "write", 200),
        ("admin", "write", 200),
        ("none", "write", 403),
    ],
)
def test_it_lets_operators_with_write_tokens_acknowledge(token_for, alerts, role, scope, status):
    alert = Alert.objects.get(fingerprint="f1")
    response = Client().post(
        f"/api/alerts/{alert.pk}/acknowledge/",
        {"action": "mute", "reason": "deploy", "mute_until": "2999-01-01T00:00:00Z"},
        content_type="application/json",
        headers=token_for(role, scope),
    )
    assert response.status_code == status
    if status == 200:
        body = response.json()
        assert (body["action"], body["by"], body["mute_until"]) == ("mute", f"user-{role}", "2999-01-01T00:00:00+00:00")
    assert Acknowledgement.objects.exists() == (status == 200)


def test_it_answers_401_to_anonymous_acknowledgements(alerts):
    alert = Alert.objects.get(fingerprint="f1")
    response = Client().post(
        f"/api/alerts/{alert.pk}/acknowledge/", {"action": "ack", "reason": "x"}, content_type="application/json"
    )
    assert response.status_code == 401


@pytest.mark.parametrize(
    "body,message",
    [
        ({"action": "ack"}, "field 'reason' is required"),
        ({"action": "snooze", "reason": "x"}, "field 'action' must be one of ack, mute"),
        ({"action": "mute", "reason": "x", "mute_until": "tomorrow"}, "ISO 8601"),
        ({"action": "mute", "reason": "x", "mute_until": "2999-01-01T00:00:00"}, "time zone"),
        ({"action": "ack", "reason": "x", "mute_until": "2999-01-01T00:00:00Z"}, "only applies to action 'mute'"),
        ({"action": "ack", "reason": "x", "by": "someone else"}, "unknown field(s) by"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_it_rejects_bad_bodies_with_a_clear_error(token_for, alerts, body, message):
    alert = Alert.objects.get(fingerprint="f1")
    response = Client().post(
        f"/api/alerts/{alert.pk}/acknowledge/",
        body,
        content_type="application/json",
        headers=token_for("operator", "write"),
    )
    assert response.status_code == 400
    assert message in response.json()["error"]
