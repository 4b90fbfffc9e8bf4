"""Acknowledging and muting stuck items: the page and the API for each role, who/when/why shown
(also after a live redraw's JSON), and muted items left out of the alerts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from auditor.accounts.acknowledgements import acknowledge
from auditor.accounts.models import Acknowledgement
from auditor.alerts.models import Alert, Channel
from auditor.pipelines.models import StuckRule
from auditor.stuck.models import StuckItem
from auditor.stuck.service import record_diagnosis, start_run
from auditor.vocabulary import STUCK_VERDICTS
from tests.support.stuck import fake_result

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "none", "viewer", "operator", "admin"]
ALLOWED = {"operator", "admin"}
REASON = "ticket <OPS-7> & retried by hand"
ESCAPED_REASON = "ticket &lt;OPS-7&gt; &amp; retried by hand"


@pytest.fixture
def items(plain_rule: StuckRule) -> dict[str, StuckItem]:
    record_diagnosis(
        start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "skipped", "B": "skipped", "C": "waiting"})
    )
    return {item.key: item for item in StuckItem.objects.filter(rule=plain_rule)}


def refused(response: Any, role: str) -> None:
    if role == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    else:
        assert response.status_code == 403


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_acknowledge_an_item_from_the_page_and_shows_who_when_why(
    client_as: Callable[[str], Client], items: dict[str, StuckItem], role: str
) -> None:
    item = items["A"]
    client = client_as(role)
    response = client.post(f"/stuck/items/{item.pk}/acknowledge/", {"action": "ack", "reason": REASON})
    if role not in ALLOWED:
        refused(response, role)
        assert not Acknowledgement.objects.exists()
        return
    assert response.status_code == 302 and response["Location"] == "/stuck/"
    ack = Acknowledgement.objects.get()
    assert (ack.kind, ack.key, ack.action, ack.username, ack.reason) == (
        "stuck-item",
        str(item.pk),
        "ack",
        f"user-{role}",
        REASON,
    )
    html = client.get("/stuck/").content.decode()
    assert ESCAPED_REASON in html and REASON not in html
    assert f'<span class="ack-by">user-{role}</span>' in html and f"{ack.created_at:%Y-%m-%d %H:%M} UTC" in html
    assert f'data-item="{item.pk}" data-ack="ack"' in html
    # The live redraw's data carries the same who, when and why.
    data = client.get("/stuck/api/items/").json()
    acks = {i["key"]: i["acknowledgement"] for i in data["items"]}
    assert acks["B"] is None and acks["C"] is None
    assert (acks["A"]["by"], acks["A"]["reason"], acks["A"]["at"]) == (
        f"user-{role}",
        REASON,
        ack.created_at.isoformat(),
    )


def test_it_shows_a_viewer_the_acknowledgement_but_no_form(client_as, items, role_users) -> None:
    acknowledge(role_users["operator"], "stuck-item", str(items["A"].pk), action="mute", reason="deploy")
    html = client_as("viewer").get("/stuck/").content.decode()
    assert '<span class="ack-by">user-operator</span>' in html and "muted</span>" in html
    assert 'id="bulk-ack"' not in html and 'class="ack-select"' not in html and "Withdraw" not in html
    operator_html = client_as("operator").get("/stuck/").content.decode()
    assert operator_html.count('id="bulk-ack"') == 1  # one form for the selection
    assert operator_html.count('class="ack-select"') == 2  # B and C can be ticked; A is muted


def test_it_mutes_an_item_for_some_hours(client_as, items) -> None:
    item = items["B"]
    client_as("operator").post(
        f"/stuck/items/{item.pk}/acknowledge/", {"action": "mute", "reason": "deploy", "mute_hours": "2"}
    )
    ack = Acknowledgement.objects.get()
    assert ack.action == "mute" and round((ack.mute_until - ack.created_at).total_seconds() / 3600) == 2
    assert f"until {ack.mute_until:%Y-%m-%d %H:%M} UTC" in client_as("viewer").get("/stuck/").content.decode()


def test_it_needs_the_csrf_token_to_acknowledge(role_users, items) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    assert (
        client.post(f"/stuck/items/{items['A'].pk}/acknowledge/", {"action": "ack", "reason": "x"}).status_code == 403
    )
    assert not Acknowledgement.objects.exists()


def test_it_refuses_to_acknowledge_a_resolved_item(client_as, plain_rule, items) -> None:
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "skipped"}))  # A got unstuck
    response = client_as("operator").post(
        f"/stuck/items/{items['A'].pk}/acknowledge/", {"action": "ack", "reason": "x"}
    )
    assert response.status_code == 404
    assert not Acknowledgement.objects.exists()


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_withdraw_an_item_acknowledgement(client_as, items, role_users, role: str) -> None:
    item = items["A"]
    ack = acknowledge(role_users["admin"], "stuck-item", str(item.pk), action="mute", reason="x")
    response = client_as(role).post(f"/stuck/items/{item.pk}/withdraw/")
    ack.refresh_from_db()
    if role not in ALLOWED:
        refused(response, role)
        assert ack.withdrawn_at is None
        return
    assert response.status_code == 302
    assert ack.withdrawn_by == f"user-{role}" and ack.withdrawn_at is not None


# --- the API -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "scope", "status"),
    [
        ("none", "write", 403),
        ("viewer", "write", 403),
        ("operator", "read", 403),
        ("operator", "write", 200),
        ("admin", "write", 200),
    ],
)
def test_it_lets_operators_with_a_write_token_acknowledge_an_item(bearer, items, role, scope, status) -> None:
    item = items["C"]
    response = Client().post(
        f"/api/stuck/items/{item.pk}/acknowledge/",
        {"action": "ack", "reason": REASON},
        content_type="application/json",
        headers=bearer(role, scope),
    )
    assert response.status_code == status
    assert Acknowledgement.objects.exists() == (status == 200)
    if status != 200:
        return
    body = response.json()
    assert (body["action"], body["by"], body["reason"], body["mute_until"]) == ("ack", f"user-{role}", REASON, None)
    read = bearer("viewer")
    detail = Client().get(f"/api/stuck/items/{item.pk}/", headers=read).json()
    assert detail["key"] == "C" and detail["acknowledgement"] == body
    listed = Client().get("/api/stuck/items/", headers=read).json()["results"]
    assert {i["key"]: (i["acknowledgement"] or {}).get("by") for i in listed} == {
        "A": None,
        "B": None,
        "C": f"user-{role}",
    }


def test_it_answers_401_to_anonymous_item_acknowledgements(items) -> None:
    item = items["A"]
    response = Client().post(
        f"/api/stuck/items/{item.pk}/acknowledge/", {"action": "ack", "reason": "x"}, content_type="application/json"
    )
    assert response.status_code == 401
    assert Client().get(f"/api/stuck/items/{item.pk}/").status_code == 401
    assert not Acknowledgement.objects.exists()


def test_it_answers_409_for_a_resolved_item_and_404_for_an_unknown_one(bearer, plain_rule, items) -> None:
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "skipped"}))  # A got unstuck
    write = bearer("operator", "write")
    body = {"action": "ack", "reason": "x"}
    resolved = Client().post(
        f"/api/stuck/items/{items['A'].pk}/acknowledge/", body, content_type="application/json", headers=write
    )
    assert resolved.status_code == 409 and "was resolved" in resolved.json()["error"]
    unknown = Client().post(
        "/api/stuck/items/999999/acknowledge/", body, content_type="application/json", headers=write
    )
    assert unknown.status_code == 404
    assert (
        Client().get(f"/api/stuck/items/{items['A'].pk}/", headers=bearer("viewer")).json()["resolved_at"] is not None
    )
    assert not Acknowledgement.objects.exists()


def test_it_describes_the_item_endpoints_in_openapi(bearer) -> None:
    paths = Client().get("/api/openapi.json", headers=bearer("viewer")).json()["paths"]
    ack = paths["/api/stuck/items/{item_id}/acknowledge/"]["post"]
    assert (ack["x-required-role"], ack["x-token-scope"]) == ("operator", "write")
    assert "/api/stuck/items/{item_id}/" in paths


# --- alerts ------------------------------------------------------------------------------------


def test_it_leaves_muted_items_out_of_the_alerts(plain_rule, items, role_users) -> None:
    Channel.objects.create(
        name="oncall",
        url="https://hooks.example.invalid/x",
        secret="${X}",
        events={"stuck_verdicts": list(STUCK_VERDICTS)},
    )
    operator = role_users["operator"]
    acknowledge(operator, "stuck-item", str(items["A"].pk), action="mute", reason="retrying")
    acknowledge(operator, "stuck-item", str(items["C"].pk), action="mute", reason="slow consumer, known")
    acknowledge(operator, "stuck-item", str(items["B"].pk), action="ack", reason="looking")
    record_diagnosis(
        start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "skipped", "B": "skipped", "C": "waiting"})
    )
    # skipped: A muted, B acknowledged (still alerting); waiting: its only item muted.
    [alert] = Alert.objects.all()
    assert alert.fingerprint == f"stuck:{plain_rule.name}:skipped"
    assert (alert.details["count"], alert.details["keys"], alert.details["muted"]) == (1, ["B"], 1)
    assert alert.summary == f"1 item(s) of stuck rule {plain_rule.name} are skipped (1 more muted)"
