"""Acknowledging and muting findings: pages and API for each role, who/when/why shown, carried over
to later runs, and muted findings left out of the alerts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from auditor.accounts.acknowledgements import acknowledge
from auditor.accounts.models import Acknowledgement
from auditor.alerts.models import Alert, Channel
from auditor.reconcile.alerting import sync_problems
from auditor.reconcile.models import FINDING_IDENTITY, Finding
from tests.support.reconcile import ok_run

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "none", "viewer", "operator", "admin"]
ALLOWED = {"operator", "admin"}
REASON = "known replay <OPS-12> & co"
ESCAPED_REASON = "known replay &lt;OPS-12&gt; &amp; co"


@pytest.fixture
def findings(make_binding) -> dict[str, Any]:
    tickets = make_binding("tickets", "tickets", "public.tickets")
    run = ok_run(
        tickets,
        [
            {"kind": "missing", "key": "4", "is_new": True},
            {"kind": "missing", "key": "5"},
            {"kind": "duplicate", "key": "1", "cause": "producer-retry", "partition": 0, "offset": 3},
        ],
    )
    by_key = {f.key: f for f in Finding.objects.filter(run=run)}
    return {"binding": tickets, "run": run, "missing": by_key["4"], "other": by_key["5"], "duplicate": by_key["1"]}


def refused(response: Any, role: str) -> None:
    if role == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    else:
        assert response.status_code == 403


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_acknowledge_a_finding_from_its_page_and_shows_who_when_why(
    client_as: Callable[[str], Client], findings, role: str
) -> None:
    finding = findings["missing"]
    client = client_as(role)
    response = client.post(
        f"/reconcile/findings/{finding.pk}/acknowledge/", {"action": "ack", "reason": REASON, "next": "finding"}
    )
    if role not in ALLOWED:
        refused(response, role)
        assert not Acknowledgement.objects.exists()
        return
    assert response.status_code == 302 and response["Location"] == f"/reconcile/findings/{finding.pk}/"
    ack = Acknowledgement.objects.get()
    assert (ack.kind, ack.key, ack.action, ack.username, ack.reason) == (
        "finding",
        finding.acknowledgement_key,
        "ack",
        f"user-{role}",
        REASON,
    )
    when = ack.created_at.strftime("%Y-%m-%d %H:%M")
    detail = client.get(f"/reconcile/findings/{finding.pk}/").content.decode()
    listing = client.get("/reconcile/findings/").content.decode()
    for html in (detail, listing):
        assert ESCAPED_REASON in html and REASON not in html
        assert f'<span class="ack-by">user-{role}</span>' in html and f"{when} UTC" in html
    # Only the acknowledged finding is marked; the others can still be ticked for the page's one form.
    assert listing.count('data-ack="ack"') == 1
    assert listing.count('class="ack-select"') == 2


def test_it_shows_a_viewer_the_acknowledgement_but_no_form(client_as, findings, role_users) -> None:
    acknowledge(role_users["operator"], "finding", findings["missing"].acknowledgement_key, action="ack", reason="x")
    html = client_as("viewer").get("/reconcile/findings/").content.decode()
    assert '<span class="ack-by">user-operator</span>' in html
    assert 'class="ack-form"' not in html and "Withdraw" not in html


def test_it_mutes_a_finding_for_some_hours_from_the_list(client_as, findings) -> None:
    finding = findings["duplicate"]
    response = client_as("operator").post(
        f"/reconcile/findings/{finding.pk}/acknowledge/", {"action": "mute", "reason": "deploy", "mute_hours": "3"}
    )
    assert response["Location"] == "/reconcile/findings/"
    ack = Acknowledgement.objects.get()
    assert ack.action == "mute" and ack.mute_until is not None
    assert round((ack.mute_until - ack.created_at).total_seconds() / 3600) == 3
    html = client_as("viewer").get(f"/reconcile/findings/{finding.pk}/").content.decode()
    assert "muted</span>" in html and f"until {ack.mute_until:%Y-%m-%d %H:%M} UTC" in html


def test_it_explains_a_refused_acknowledgement(client_as, findings) -> None:
    finding = findings["missing"]
    response = client_as("operator").post(
        f"/reconcile/findings/{finding.pk}/acknowledge/", {"action": "ack", "next": "finding"}, follow=True
    )
    assert "Not acknowledged: reason" in response.content.decode()
    assert not Acknowledgement.objects.exists()


def test_it_needs_the_csrf_token_to_acknowledge(role_users, findings) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    response = client.post(
        f"/reconcile/findings/{findings['missing'].pk}/acknowledge/", {"action": "ack", "reason": "x"}
    )
    assert response.status_code == 403
    assert not Acknowledgement.objects.exists()


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_withdraw_a_finding_acknowledgement(client_as, findings, role_users, role: str) -> None:
    finding = findings["missing"]
    ack = acknowledge(role_users["admin"], "finding", finding.acknowledgement_key, action="mute", reason="x")
    response = client_as(role).post(f"/reconcile/findings/{finding.pk}/withdraw/")
    ack.refresh_from_db()
    if role not in ALLOWED:
        refused(response, role)
        assert ack.withdrawn_at is None
        return
    assert response.status_code == 302
    assert ack.withdrawn_by == f"user-{role}" and ack.withdrawn_at is not None
    assert 'data-ack="mute"' not in client_as(role).get("/reconcile/findings/").content.decode()


def test_it_carries_an_acknowledgement_over_to_the_same_finding_of_a_later_run(client_as, findings, role_users) -> None:
    acknowledge(role_users["operator"], "finding", findings["missing"].acknowledgement_key, action="ack", reason="r1")
    later = ok_run(findings["binding"], [{"kind": "missing", "key": "4"}, {"kind": "missing", "key": "6"}])
    same, other = Finding.objects.filter(run=later).order_by("key")
    assert same.pk != findings["missing"].pk
    html = client_as("viewer").get("/reconcile/findings/").content.decode()
    assert f'<tr data-finding="{same.pk}" data-kind="missing" data-ack="ack"' in html
    assert f'<tr data-finding="{other.pk}" data-kind="missing" data-cause' in html


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
def test_it_lets_operators_with_a_write_token_acknowledge_a_finding(bearer, findings, role, scope, status) -> None:
    finding = findings["missing"]
    response = Client().post(
        f"/api/reconcile/findings/{finding.pk}/acknowledge/",
        {"action": "mute", "reason": REASON, "mute_until": "2999-01-01T00:00:00Z"},
        content_type="application/json",
        headers=bearer(role, scope),
    )
    assert response.status_code == status
    assert Acknowledgement.objects.exists() == (status == 200)
    if status != 200:
        return
    body = response.json()
    assert (body["action"], body["by"], body["reason"], body["mute_until"]) == (
        "mute",
        f"user-{role}",
        REASON,
        "2999-01-01T00:00:00+00:00",
    )
    read = bearer("viewer")
    detail = Client().get(f"/api/reconcile/findings/{finding.pk}/", headers=read).json()
    assert detail["key"] == "4" and detail["acknowledgement"] == body
    listed = Client().get("/api/reconcile/findings/", headers=read).json()["results"]
    assert {f["key"]: (f["acknowledgement"] or {}).get("by") for f in listed} == {
        "4": f"user-{role}",
        "5": None,
        "1": None,
    }


def test_it_answers_401_to_anonymous_finding_acknowledgements(findings) -> None:
    finding = findings["missing"]
    response = Client().post(
        f"/api/reconcile/findings/{finding.pk}/acknowledge/",
        {"action": "ack", "reason": "x"},
        content_type="application/json",
    )
    assert response.status_code == 401
    assert Client().get(f"/api/reconcile/findings/{finding.pk}/").status_code == 401
    assert not Acknowledgement.objects.exists()


def test_it_answers_404_for_an_unknown_finding(bearer, findings) -> None:
    assert Client().get("/api/reconcile/findings/999999/", headers=bearer("viewer")).status_code == 404
    response = Client().post(
        "/api/reconcile/findings/999999/acknowledge/",
        {"action": "ack", "reason": "x"},
        content_type="application/json",
        headers=bearer("operator", "write"),
    )
    assert response.status_code == 404


def test_it_describes_the_finding_endpoints_in_openapi(bearer) -> None:
    paths = Client().get("/api/openapi.json", headers=bearer("viewer")).json()["paths"]
    ack = paths["/api/reconcile/findings/{finding_id}/acknowledge/"]["post"]
    assert (ack["x-required-role"], ack["x-token-scope"]) == ("operator", "write")
    assert ack["requestBody"]["content"]["application/json"]["schema"]["required"] == ["action", "reason"]
    item = paths["/api/reconcile/findings/{finding_id}/"]["get"]["responses"]["200"]["content"]["application/json"]
    assert item["schema"]["properties"]["acknowledgement"]["properties"]["by"] == {"type": "string"}


# --- alerts ------------------------------------------------------------------------------------


@pytest.fixture
def channel(findings) -> Channel:
    # Never delivered here (deliveries are queued on commit, which a test never reaches).
    return Channel.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", secret="s", events={"finding_kinds": ["missing", "duplicate"]}
    )


def test_it_leaves_muted_findings_out_of_the_alerts(channel, findings, role_users) -> None:
    operator = role_users["operator"]
    acknowledge(operator, "finding", findings["missing"].acknowledgement_key, action="mute", reason="replayed")
    acknowledge(operator, "finding", findings["duplicate"].acknowledgement_key, action="mute", reason="known")
    acknowledge(operator, "finding", findings["other"].acknowledgement_key, action="ack", reason="looking")
    sync_problems(findings["run"])
    # missing: one muted, one acknowledged (still alerting); duplicate: its only finding muted.
    [alert] = Alert.objects.all()
    assert alert.fingerprint == "finding:tickets:missing"
    assert (alert.details["count"], alert.details["new"], alert.details["muted"]) == (1, 0, 1)
    assert alert.summary.endswith(", 1 more muted)")


def test_it_neither_raises_nor_resolves_a_problem_whose_findings_are_all_muted(channel, findings, role_users) -> None:
    sync_problems(findings["run"])
    assert set(Alert.objects.values_list("fingerprint", "state")) == {
        ("finding:tickets:missing", "open"),
        ("finding:tickets:duplicate:producer-retry", "open"),
    }
    key = findings["duplicate"].acknowledgement_key
    acknowledge(role_users["operator"], "finding", key, action="mute", reason="known")
    later = ok_run(
        findings["binding"], [{"kind": "duplicate", "key": "1", "cause": "producer-retry", "partition": 0, "offset": 3}]
    )
    sync_problems(later)
    duplicate = Alert.objects.get(fingerprint="finding:tickets:duplicate:producer-retry")
    assert (duplicate.state, duplicate.count) == ("open", 1)  # not folded into, not resolved: still there
    assert Alert.objects.get(fingerprint="finding:tickets:missing").state == "resolved"


def test_it_identifies_a_finding_across_runs_as_the_job_does() -> None:
    from spark_jobs.reconcile_report import IDENTITY  # imports pyspark: only for this test

    assert list(FINDING_IDENTITY) == list(IDENTITY)
