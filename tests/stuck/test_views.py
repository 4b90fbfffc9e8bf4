"""The stuck-items page: counts per verdict, items with evidence, filters, escaping, and the
"diagnose now" button (operators only, POST with CSRF)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from auditor.pipelines.models import StuckRule
from auditor.stuck import tasks
from auditor.stuck.service import record_diagnosis, start_run
from tests.support.stuck import fake_result

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror="alert(1)">'


def keys_of(html: str) -> list[str]:
    return re.findall(r'<tr data-key="([^"]*)"', html)


@pytest.fixture
def stored(plain_rule: StuckRule) -> StuckRule:
    record_diagnosis(
        start_run(plain_rule, "cli"),
        fake_result(
            plain_rule, {"TCK-1": "skipped", "TCK-2": "waiting", "TCK-3": "skipped", HOSTILE: "never-produced"}
        ),
    )
    return plain_rule


def test_it_sends_anonymous_users_to_the_login_page(client: Client) -> None:
    for url in ("/stuck/", "/stuck/api/items/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    assert client.post("/stuck/diagnose/").status_code == 302


def test_it_refuses_users_without_a_role(client_as: Callable[[str], Client]) -> None:
    assert client_as("none").get("/stuck/").status_code == 403


def test_it_shows_counts_per_verdict_and_the_items(stored: StuckRule, client_as: Callable[[str], Client]) -> None:
    html = client_as("viewer").get("/stuck/").content.decode()

    assert 'id="count-total">4<' in html
    assert 'id="count-skipped">2<' in html and 'id="count-waiting">1<' in html
    assert 'id="count-never-produced">1<' in html and 'id="count-expired">0<' in html
    # Failure verdicts first (in the verdicts' order), then by age.
    assert keys_of(html)[:3] == ["&lt;img src=x onerror=&quot;alert(1)&quot;&gt;", "TCK-3", "TCK-1"]
    assert "because skipped" in html and "t/0@" in html
    assert 'id="stuck-chart"' in html and "plotly.min.js" in html
    assert 'id="diagnose-now"' not in html  # viewers cannot trigger a diagnosis


def test_it_escapes_a_hostile_key_everywhere(stored: StuckRule, client_as: Callable[[str], Client]) -> None:
    response = client_as("viewer").get("/stuck/")
    assert HOSTILE.encode() not in response.content
    assert b"&lt;img src=x onerror=" in response.content
    # The page's JSON (json_script) escapes < > & too, so it cannot close its <script>.
    assert b"\\u003Cimg src=x onerror=" in response.content


def test_it_filters_by_rule_and_verdict(
    stored: StuckRule, plain_rule: StuckRule, client_as: Callable[[str], Client]
) -> None:
    client = client_as("viewer")
    assert keys_of(client.get("/stuck/", {"verdict": "skipped"}).content.decode()) == ["TCK-3", "TCK-1"]
    assert keys_of(client.get("/stuck/", {"rule": "nope", "verdict": "waiting"}).content.decode()) == ["TCK-2"]

    body = client.get("/stuck/api/items/", {"rule": stored.name, "verdict": "skipped"}).json()
    assert body["filters"] == {"rule": stored.name, "verdict": "skipped"}
    assert body["counts"]["skipped"] == 2 and body["total"] == 4 and body["items_total"] == 2
    assert [i["key"] for i in body["items"]] == ["TCK-3", "TCK-1"]
    assert {"key", "status", "age_seconds", "verdict", "reason", "evidence"} <= set(body["items"][0])
    assert [r["id"] for r in body["runs"]] and body["points"][0]["rule"] == stored.name


def test_it_queues_a_diagnosis_for_operators_only(
    stored: StuckRule,
    client_as: Callable[[str], Client],
    role_users: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tasks.diagnose_rule_task, "delay", lambda *args: queued.append(args))

    assert client_as("viewer").post("/stuck/diagnose/", {"rule": stored.name}).status_code == 403
    assert client_as("viewer").get("/stuck/diagnose/").status_code == 403
    assert queued == []

    operator = client_as("operator")
    assert operator.get("/stuck/diagnose/").status_code == 405
    response = operator.post("/stuck/diagnose/", {"rule": stored.name}, HTTP_ACCEPT="application/json")
    assert response.status_code == 202 and response.json()["status"] == "queued"
    assert queued == [(stored.pk, "manual", role_users["operator"].pk)]
    assert operator.post("/stuck/diagnose/", {"rule": "nope"}, HTTP_ACCEPT="application/json").status_code == 400
    page = operator.get("/stuck/").content.decode()
    assert 'id="diagnose-now" method="post"' in page and "csrfmiddlewaretoken" in page


def test_it_needs_the_csrf_token_to_diagnose(
    stored: StuckRule, role_users: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tasks.diagnose_rule_task, "delay", lambda *args: queued.append(args))
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(role_users["operator"])
    assert strict.post("/stuck/diagnose/", {"rule": stored.name}).status_code == 403
    assert queued == []
