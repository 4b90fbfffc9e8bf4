"""The reconciliation pages: runs and "run now", findings and their filters, a finding and its lint rules."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from auditor.lint.engine.linter import lint
from auditor.lint.service import ScanResult, record_scan
from auditor.reconcile.models import Finding, ReconcileRun
from tests.support.reconcile import ok_run

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("k")</script>'


@pytest.fixture
def world(make_binding) -> dict[str, Any]:
    tickets = make_binding("tickets", "tickets", "public.tickets")
    orders = make_binding("orders", "orders", "public.orders")
    old = ok_run(tickets, [{"kind": "missing", "key": "old-1"}])
    current = ok_run(
        tickets,
        [
            {"kind": "missing", "key": "4", "is_new": True},
            {"kind": "duplicate", "key": "1", "cause": "producer-retry", "partition": 0, "offset": 3},
            {"kind": "duplicate", "key": "2", "cause": "app-resend", "partition": 0, "offset": 5},
            {"kind": "orphan", "key": HOSTILE, "partition": 1, "offset": 9, "evidence": {"note": HOSTILE}},
        ],
    )
    failed = ReconcileRun.objects.create(
        binding=orders, trigger=ReconcileRun.MANUAL, status=ReconcileRun.FAILED, error="Kafka <down>"
    )
    return {"tickets": tickets, "orders": orders, "old": old, "current": current, "failed": failed}


def rows(html: str, attribute: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split(f'<tr data-{attribute}="')[1:]]


@pytest.mark.parametrize("url", ["/reconcile/runs/", "/reconcile/findings/", "/reconcile/keys/tickets/1/"])
def test_it_needs_a_login_and_a_role(client_as: Callable[[str], Client], world, url: str) -> None:
    response = client_as("anonymous").get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert client_as("none").get(url).status_code == 403


def test_it_lists_runs_with_status_duration_and_counts(client_as, world) -> None:
    response = client_as("viewer").get("/reconcile/runs/")
    html = response.content.decode()
    assert response.status_code == 200
    assert rows(html, "run") == [str(world["failed"].pk), str(world["current"].pk), str(world["old"].pk)]
    assert "12.5s" in html and "1234" in html
    assert "Kafka &lt;down&gt;" in html and "Kafka <down>" not in html
    assert "Run now" not in html  # viewers cannot start runs
    data = json.loads(html.split('id="runs-page" type="application/json">')[1].split("</script>")[0])
    assert [p["id"] for p in data["points"]] == [world["old"].pk, world["current"].pk]
    assert data["points"][1]["counts"]["duplicate"] == 2


def test_it_shows_the_rows_a_run_could_not_check_beside_its_findings(client_as, world) -> None:
    current = world["current"]
    current.counts = current.counts | {"unverifiable": 7}
    current.save()
    html = client_as("viewer").get("/reconcile/runs/").content.decode()
    row = html.split(f'<tr data-run="{current.pk}"')[1].split("</tr>")[0]
    assert '<span class="nonzero" data-kind="unverifiable">7 unverifiable</span>' in row  # in the findings cell
    data = json.loads(html.split('id="runs-page" type="application/json">')[1].split("</script>")[0])
    assert data["points"][1]["counts"]["unverifiable"] == 7
    assert current.total_findings == 4  # not findings


def test_it_shows_the_rows_a_leader_change_holds_beside_its_findings(client_as, world) -> None:
    current = world["current"]
    current.counts = current.counts | {"late": 3}
    current.save()
    html = client_as("viewer").get("/reconcile/runs/").content.decode()
    row = html.split(f'<tr data-run="{current.pk}"')[1].split("</tr>")[0]
    assert 'data-kind="late"' in row and ">3 late</span>" in row  # in the findings cell
    data = json.loads(html.split('id="runs-page" type="application/json">')[1].split("</script>")[0])
    assert data["points"][1]["counts"]["late"] == 3


def test_it_shows_the_records_without_and_with_malformed_headers_of_a_run(client_as, world) -> None:
    tickets = world["tickets"]
    ok_run(tickets, [], counts={"records_without_headers": 7, "records_malformed_headers": 3})
    html = client_as("viewer").get("/reconcile/runs/?binding=tickets").content.decode()
    assert '<td class="num nonzero" data-count="records_without_headers">7</td>' in html
    assert '<td class="num nonzero" data-count="records_malformed_headers">3</td>' in html
    data = json.loads(html.split('id="runs-page" type="application/json">')[1].split("</script>")[0])
    assert data["header_counts"] == ["records_without_headers", "records_malformed_headers"]
    assert (data["points"][-1]["counts"]["records_without_headers"], data["points"][-1]["counts"]["missing"]) == (7, 0)


def test_it_shows_one_bindings_runs_and_the_run_button_to_operators(client_as, world) -> None:
    html = client_as("operator").get("/reconcile/runs/?binding=orders").content.decode()
    assert rows(html, "run") == [str(world["failed"].pk)]
    assert html.count("Run now") == 2  # one form per binding
    assert client_as("viewer").get("/reconcile/runs/?binding=nope").status_code == 404


def test_it_lets_only_operators_run_a_binding_now(client_as, world, django_capture_on_commit_callbacks) -> None:
    assert client_as("anonymous").post("/reconcile/runs/run/", {"binding": "tickets"}).status_code == 302
    assert client_as("viewer").post("/reconcile/runs/run/", {"binding": "tickets"}).status_code == 403
    assert not ReconcileRun.objects.filter(status=ReconcileRun.QUEUED).exists()

    with django_capture_on_commit_callbacks() as queued:
        response = client_as("operator").post("/reconcile/runs/run/", {"binding": "tickets", "full": "1"})
    assert response.status_code == 302
    run = ReconcileRun.objects.get(status=ReconcileRun.QUEUED)
    assert (run.binding.name, run.trigger, run.full, run.requested_by.username) == (
        "tickets",
        "manual",
        True,
        "user-operator",
    )
    # handed to the worker once the run is committed (beside the live event)
    assert [c.__qualname__ for c in queued if "queue_run" in c.__qualname__] == ["queue_run.<locals>.send"]

    busy = client_as("admin").post(
        "/reconcile/runs/run/", {"binding": "tickets"}, headers={"Accept": "application/json"}
    )
    assert busy.status_code == 409 and busy.json()["status"] == "busy"
    unknown = client_as("admin").post("/reconcile/runs/run/", {"binding": "x"}, headers={"Accept": "application/json"})
    assert unknown.status_code == 400


def test_it_needs_the_csrf_token_to_run_now(role_users, world) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    assert client.post("/reconcile/runs/run/", {"binding": "tickets"}).status_code == 403
    assert not ReconcileRun.objects.filter(status=ReconcileRun.QUEUED).exists()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["missing 4", "duplicate 1", "duplicate 2", f"orphan {HOSTILE}"]),
        ("?kind=duplicate", ["duplicate 1", "duplicate 2"]),
        ("?kind=duplicate&cause=app-resend", ["duplicate 2"]),
        ("?key=4", ["missing 4"]),
        ("?new=1", ["missing 4"]),
        ("?binding=orders", []),
        ("?kind=bogus&cause=bogus", ["missing 4", "duplicate 1", "duplicate 2", f"orphan {HOSTILE}"]),
    ],
)
def test_it_filters_the_current_findings(client_as, world, query: str, expected: list[str]) -> None:
    response = client_as("viewer").get("/reconcile/findings/" + query)
    assert response.status_code == 200
    shown = Finding.objects.filter(pk__in=[int(i) for i in rows(response.content.decode(), "finding")])
    assert sorted(f"{f.kind} {f.key}" for f in shown) == sorted(expected)


def test_it_shows_one_runs_findings_and_warns_of_a_failed_latest_run(client_as, world) -> None:
    html = client_as("viewer").get(f"/reconcile/findings/?run={world['old'].pk}").content.decode()
    assert [Finding.objects.get(pk=i).key for i in rows(html, "finding")] == ["old-1"]
    current = client_as("viewer").get("/reconcile/findings/").content.decode()
    assert f"The latest run of orders (#{world['failed'].pk}) failed: Kafka &lt;down&gt;" in current


def test_it_counts_no_findings_for_a_run_pruned_after_its_page_was_viewed(client_as, world, settings) -> None:
    from auditor.reconcile.service import prune_findings

    old = world["old"]
    before = client_as("viewer").get(f"/reconcile/findings/?run={old.pk}")
    assert before.context["page"].paginator.count == 1  # counted, and the count cached
    settings.RECONCILE_KEEP_FINDING_RUNS = 1
    assert prune_findings(world["tickets"]) == 1  # the older run's one finding

    after = client_as("viewer").get(f"/reconcile/findings/?run={old.pk}")
    assert after.context["page"].paginator.count == 0
    html = after.content.decode()
    assert rows(html, "finding") == []
    assert '<p class="muted" id="findings-count">0 findings' in html
    assert "pruned, only its counts are kept" in html


def test_it_pages_through_findings(client_as, make_binding) -> None:
    binding = make_binding("many", "many", "public.many")
    ok_run(binding, [{"kind": "missing", "key": f"{i:03d}"} for i in range(120)])
    first = client_as("viewer").get("/reconcile/findings/?binding=many").content.decode()
    assert len(rows(first, "finding")) == 50 and "page 1 of 3" in first
    assert "binding=many&amp;page=2" in first
    last = client_as("viewer").get("/reconcile/findings/?binding=many&page=3").content.decode()
    assert len(rows(last, "finding")) == 20


def test_it_escapes_a_hostile_key_everywhere(client_as, world) -> None:
    html = client_as("viewer").get("/reconcile/findings/").content.decode()
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(&quot;k&quot;)&lt;/script&gt;" in html
    assert "/reconcile/keys/tickets/%3Cscript%3Ealert(%22k%22)%3C/script%3E/" in html
    orphan = Finding.objects.get(kind="orphan")
    detail = client_as("viewer").get(f"/reconcile/findings/{orphan.pk}/").content.decode()
    assert HOSTILE not in detail and "&lt;script&gt;" in detail


def test_it_names_the_settings_that_allow_a_finding_with_the_latest_lint_results(client_as, world) -> None:
    producer = lint({"acks": "1"}, client="librdkafka", kind="producer", guarantee="at-least-once")
    topic = lint(
        {"min.insync.replicas": 1, "unclean.leader.election.enable": "true", "replication.factor": 3},
        client="java",
        kind="topic",
        guarantee="at-least-once",
        subject="tickets",
    )
    other_topic = lint(
        {"unclean.leader.election.enable": "true"}, client="java", kind="topic", guarantee="at-least-once"
    )
    cluster = world["tickets"].cluster.name
    scan = record_scan(
        [ScanResult(r, "producer app@host 1", cluster) for r in producer]
        + [ScanResult(r, "topic tickets", cluster) for r in topic]
        + [ScanResult(r, "topic elsewhere", cluster) for r in other_topic],
        trigger="schedule",
        started_at=timezone.now(),
    )
    missing = Finding.objects.get(kind="missing", run=world["current"])

    html = client_as("viewer").get(f"/reconcile/findings/{missing.pk}/").content.decode()

    assert f'href="/lint/?scan={scan.pk}"' in html
    shown = rows(html, "rule")
    assert "P001" in shown and "T004" in shown  # acks=1, unclean leader election on this topic
    assert shown.count("T004") == 1  # not the other topic's
    assert 'href="/lint/catalog/#T005"' in html  # retention: a rule of the catalog explaining it


def test_it_lists_keys_no_url_can_carry_without_linking_them(client_as, make_binding) -> None:
    binding = make_binding("odd", "odd", "public.odd")
    ok_run(
        binding, [{"kind": "orphan", "key": ""}, {"kind": "orphan", "key": "a\nb"}, {"kind": "orphan", "key": "x/y"}]
    )
    response = client_as("viewer").get("/reconcile/findings/?binding=odd")
    html = response.content.decode()
    assert response.status_code == 200 and len(rows(html, "finding")) == 3
    assert 'href="/reconcile/keys/odd/x/y/"' in html
    assert "/reconcile/keys/odd//" not in html
