"""/api/lint/results/ and /api/lint/scans/: roles, scopes, filters, and queueing a scan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from auditor.lint import tasks
from auditor.lint.models import LintResultRow, LintScan

pytestmark = pytest.mark.django_db

RESULTS, SCANS = "/api/lint/results/", "/api/lint/scans/"


def make_scan(finished_at: datetime, trigger: str = LintScan.SCHEDULE, status: str = LintScan.OK) -> LintScan:
    return LintScan.objects.create(
        started_at=finished_at - timedelta(seconds=3), finished_at=finished_at, trigger=trigger, status=status
    )


def make_row(scan: LintScan, rule: str, severity: str, kind: str, subject: str, cluster: str = "local") -> None:
    LintResultRow.objects.create(
        scan=scan,
        rule=rule,
        title=f"title of {rule}",
        severity=severity,
        target_kind=kind,
        cluster=cluster,
        subject=subject,
        config_key="min.insync.replicas",
        value=1,
        expected=">= 2",
        message=f"{rule} on {subject}",
        guarantee="at-least-once",
        source="explicit",
    )


@pytest.fixture
def scans() -> dict[str, LintScan]:
    older = make_scan(datetime(2098, 1, 1, tzinfo=UTC))
    make_row(older, "T001", "error", "topic", "topic old")
    latest = make_scan(datetime(2098, 1, 2, tzinfo=UTC), trigger=LintScan.MANUAL)
    make_row(latest, "P001", "info", "producer", "producer app@host s1")
    make_row(latest, "T002", "warning", "topic", "topic tickets")
    make_row(latest, "T001", "error", "topic", "topic tickets")
    make_row(latest, "B001", "error", "broker", "brokers 1, 2, 3", cluster="other")
    pasted = make_scan(datetime(2098, 1, 3, tzinfo=UTC), trigger=LintScan.PASTE)
    make_row(pasted, "P002", "error", "producer", "producer (pasted config)", cluster="")
    return {"older": older, "latest": latest, "pasted": pasted}


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Scans handed to Celery (recorded, not sent: other people's workers share the broker)."""
    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(tasks.scan_all_task, "delay", lambda *args: calls.append(args))
    monkeypatch.setattr(tasks, "scan_running", lambda: False)
    return calls


@pytest.mark.parametrize(("method", "path"), [("get", RESULTS), ("get", SCANS), ("post", SCANS)])
def test_it_answers_401_to_anonymous_callers(method, path):
    response = getattr(Client(), method)(path)
    assert response.status_code == 401 and "error" in response.json()


@pytest.mark.parametrize("path", [RESULTS, SCANS])
@pytest.mark.parametrize("auth", ["session", "token"])
def test_it_answers_403_to_users_without_a_role(client_as, bearer, path, auth):
    response = client_as("none").get(path) if auth == "session" else Client().get(path, headers=bearer("none"))
    assert response.status_code == 403


def test_it_serves_the_latest_live_scan_to_a_viewer_errors_first(client_as, bearer, scans):
    for body in (
        client_as("viewer").get(RESULTS).json(),
        Client().get(RESULTS, headers=bearer("viewer")).json(),
    ):
        assert body["scan"]["id"] == scans["latest"].pk and body["scan"]["trigger"] == "manual"
        assert [(r["rule"], r["severity"], r["subject"]) for r in body["results"]] == [
            ("B001", "error", "brokers 1, 2, 3"),
            ("T001", "error", "topic tickets"),
            ("T002", "warning", "topic tickets"),
            ("P001", "info", "producer app@host s1"),
        ]
    first = body["results"][1]
    assert (first["target"], first["cluster"], first["config"], first["value"]) == (
        "topic",
        "local",
        "min.insync.replicas",
        1,
    )
    assert first["why"] and first["fix"]  # from the rule catalog


def test_it_filters_results_by_severity_target_and_cluster(bearer, scans):
    headers = bearer("viewer")
    errors = Client().get(RESULTS, {"severity": "error"}, headers=headers).json()
    assert [r["rule"] for r in errors["results"]] == ["B001", "T001"]
    topics = Client().get(RESULTS, {"target": "topic", "cluster": "local"}, headers=headers).json()
    assert [r["rule"] for r in topics["results"]] == ["T001", "T002"]


def test_it_serves_the_results_of_a_chosen_scan(bearer, scans):
    body = Client().get(RESULTS, {"scan": scans["older"].pk}, headers=bearer("viewer")).json()
    assert body["scan"]["id"] == scans["older"].pk and [r["subject"] for r in body["results"]] == ["topic old"]
    missing = Client().get(RESULTS, {"scan": scans["pasted"].pk + 1000}, headers=bearer("viewer"))
    assert missing.status_code == 404 and "does not exist" in missing.json()["error"]


@pytest.mark.parametrize(
    ("query", "message"),
    [({"severity": "fatal"}, "must be one of error, warning, info"), ({"target": "app"}, "must be one of producer")],
)
def test_it_names_a_bad_filter(bearer, query, message):
    response = Client().get(RESULTS, query, headers=bearer("viewer"))
    assert response.status_code == 400 and message in response.json()["error"]


def test_it_lists_scans_newest_first_with_filters(bearer, scans, role_users):
    scans["latest"].requested_by = role_users["operator"]
    scans["latest"].save()
    headers = bearer("viewer")
    body = Client().get(SCANS, {"page_size": 3}, headers=headers).json()
    assert [s["id"] for s in body["results"][:3]] == [scans["pasted"].pk, scans["latest"].pk, scans["older"].pk]
    assert body["results"][1]["requested_by"] == "user-operator" and body["results"][0]["requested_by"] is None
    manual = Client().get(SCANS, {"trigger": "manual"}, headers=headers).json()
    assert [s["id"] for s in manual["results"]] == [scans["latest"].pk]
    assert manual["results"][0]["counts"] == {"error": 0, "warning": 0, "info": 0}  # the stored counts


def test_it_queues_a_scan_for_an_operator_with_a_write_token(bearer, role_users, queued):
    response = Client().post(SCANS, headers=bearer("operator", "write"))
    assert response.status_code == 202 and response.json()["status"] == "queued"
    assert queued == [("manual", role_users["operator"].pk)]


@pytest.mark.parametrize(
    ("role", "scope", "message"),
    [
        ("viewer", "write", "needs the operator role"),
        ("viewer", "read", "needs a write-scope token"),
        ("operator", "read", "needs a write-scope token"),
    ],
)
def test_it_refuses_to_queue_a_scan_without_operator_and_write_scope(bearer, queued, role, scope, message):
    response = Client().post(SCANS, headers=bearer(role, scope))
    assert response.status_code == 403 and message in response.json()["error"]
    assert queued == []


def test_it_refuses_a_session_post_without_the_csrf_token(client_as, queued):
    client = client_as("operator")
    client.handler.enforce_csrf_checks = True
    response = client.post(SCANS)
    assert response.status_code == 403 and "CSRF" in response.json()["error"]
    assert queued == []


def test_it_queues_nothing_while_a_scan_runs(bearer, queued, monkeypatch):
    monkeypatch.setattr(tasks, "scan_running", lambda: True)
    response = Client().post(SCANS, headers=bearer("admin", "write"))
    assert response.status_code == 202 and response.json()["status"] == "running"
    assert queued == []


def test_it_answers_503_when_the_task_queue_is_unreachable(bearer, queued, monkeypatch):
    def unreachable(*args: object) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(tasks.scan_all_task, "delay", unreachable)
    response = Client().post(SCANS, headers=bearer("operator", "write"))
    assert response.status_code == 503 and "task queue is unreachable" in response.json()["error"]


def test_they_are_described_in_the_openapi_document(bearer):
    paths = Client().get("/api/openapi.json", headers=bearer("viewer")).json()["paths"]
    assert paths["/api/lint/scans/"]["post"]["x-required-role"] == "operator"
    assert paths["/api/lint/scans/"]["post"]["x-token-scope"] == "write"
    assert paths["/api/lint/scans/"]["get"]["operationId"] == "lint-scans-list"
    results = paths["/api/lint/results/"]["get"]
    assert [p["name"] for p in results["parameters"]] == ["scan", "severity", "target", "cluster", "page", "page_size"]
