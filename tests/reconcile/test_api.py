"""/api/reconcile/: runs and findings for every role, triggering a run for operators with a write token."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from auditor.reconcile.models import Finding, ReconcileRun

pytestmark = pytest.mark.django_db

READS = ["/api/reconcile/runs/", "/api/reconcile/findings/"]


@pytest.fixture
def runs(make_binding) -> dict[str, ReconcileRun]:
    tickets = make_binding("tickets", "tickets", "public.tickets")
    orders = make_binding("orders", "orders", "public.orders")
    old = ReconcileRun.objects.create(binding=tickets, trigger="schedule", status="ok", finished_at=timezone.now())
    Finding.objects.create(run=old, binding=tickets, kind="missing", key="9")
    current = ReconcileRun.objects.create(
        binding=tickets, trigger="cli", status="ok", finished_at=timezone.now(), counts={"missing": 1, "duplicate": 1}
    )
    Finding.objects.create(run=current, binding=tickets, kind="missing", key="4", is_new=True)
    Finding.objects.create(
        run=current,
        binding=tickets,
        kind="duplicate",
        key="1",
        cause="app-resend",
        offsets=[{"partition": 0, "offset": 2}],
    )
    failed = ReconcileRun.objects.create(binding=orders, trigger="api", status="failed", error="down")
    return {"old": old, "current": current, "failed": failed}


@pytest.mark.parametrize("path", READS)
def test_it_answers_anonymous_callers_and_users_without_a_role(client_as, bearer, runs, path: str) -> None:
    assert Client().get(path).status_code == 401
    assert client_as("none").get(path).status_code == 403
    assert Client().get(path, headers=bearer("none")).status_code == 403


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_it_serves_runs_and_findings_to_every_role(bearer, runs, path: str, role: str) -> None:
    assert Client().get(path, headers=bearer(role)).status_code == 200


def test_it_lists_runs_newest_first_with_filters(bearer, runs) -> None:
    headers = bearer("viewer")
    body = Client().get("/api/reconcile/runs/", headers=headers).json()
    assert [r["id"] for r in body["results"]] == [runs["failed"].pk, runs["current"].pk, runs["old"].pk]
    current = body["results"][1]
    assert current["counts"]["missing"] == 1 and current["counts"]["gap"] == 0 and current["trigger"] == "cli"
    failed = Client().get("/api/reconcile/runs/?status=failed", headers=headers).json()["results"]
    assert [(r["binding"], r["error"], r["counts"]) for r in failed] == [("orders", "down", {})]
    assert Client().get("/api/reconcile/runs/?binding=nope", headers=headers).status_code == 404
    assert Client().get("/api/reconcile/runs/?status=bogus", headers=headers).status_code == 400
    one = Client().get(f"/api/reconcile/runs/{runs['old'].pk}/", headers=headers).json()
    assert one["id"] == runs["old"].pk


def test_it_lists_the_current_findings_filtered_and_paginated(bearer, runs) -> None:
    headers = bearer("viewer")
    body = Client().get("/api/reconcile/findings/?page_size=1", headers=headers).json()
    assert body["count"] == 2 and body["num_pages"] == 2 and body["next"]
    first = body["results"][0]
    assert (first["kind"], first["key"], first["cause"], first["binding"]) == (
        "duplicate",
        "1",
        "app-resend",
        "tickets",
    )
    assert first["offsets"] == [{"partition": 0, "offset": 2}] and first["run_id"] == runs["current"].pk

    def keys(query: str) -> list[str]:
        return [f["key"] for f in Client().get("/api/reconcile/findings/" + query, headers=headers).json()["results"]]

    assert keys("?kind=missing") == ["4"]
    assert keys("?cause=app-resend") == ["1"]
    assert keys("?key=4") == ["4"]
    assert keys("?new=true") == ["4"]
    assert keys(f"?run={runs['old'].pk}") == ["9"]
    assert keys("?binding=orders") == []
    assert Client().get("/api/reconcile/findings/?kind=bogus", headers=headers).status_code == 400
    assert Client().get("/api/reconcile/findings/?run=999999", headers=headers).status_code == 404


def test_it_lets_operators_with_a_write_token_trigger_a_run(bearer, runs, django_capture_on_commit_callbacks) -> None:
    body = {"binding": "orders", "full": True}
    url = "/api/reconcile/runs/"
    assert Client().post(url, body, content_type="application/json").status_code == 401
    assert (
        Client().post(url, body, content_type="application/json", headers=bearer("viewer", "write")).status_code == 403
    )
    assert Client().post(url, body, content_type="application/json", headers=bearer("operator")).status_code == 403
    assert not ReconcileRun.objects.filter(status="queued").exists()

    with django_capture_on_commit_callbacks() as queued:
        response = Client().post(url, body, content_type="application/json", headers=bearer("operator", "write"))
    assert response.status_code == 202
    run = ReconcileRun.objects.get(pk=response.json()["id"])
    assert (run.status, run.trigger, run.full, run.binding.name) == ("queued", "api", True, "orders")
    assert any("queue_run" in c.__qualname__ for c in queued)

    again = Client().post(url, body, content_type="application/json", headers=bearer("admin", "write"))
    assert again.status_code == 409 and "in progress" in again.json()["error"]
    unknown = Client().post(url, {"binding": "x"}, content_type="application/json", headers=bearer("admin", "write"))
    assert unknown.status_code == 404
    missing = Client().post(url, {}, content_type="application/json", headers=bearer("admin", "write"))
    assert missing.status_code == 400


def test_it_needs_the_csrf_token_for_a_session_trigger(role_users, runs) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    response = client.post("/api/reconcile/runs/", {"binding": "orders"}, content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]
