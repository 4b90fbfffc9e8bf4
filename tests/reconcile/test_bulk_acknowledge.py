"""Acknowledging a selection of findings with one form: the rows ticked, or all matching the filters."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.accounts.models import Acknowledgement
from auditor.reconcile.models import Finding
from auditor.status.overview import build_overview
from tests.support.reconcile import ok_run

pytestmark = pytest.mark.django_db
URL = "/reconcile/findings/acknowledge/"


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
    return {"missing": by_key["4"], "other": by_key["5"], "duplicate": by_key["1"]}


def test_it_acknowledges_the_ticked_rows_with_one_reason(client_as, findings: dict[str, Any]) -> None:
    ids = [findings["missing"].pk, findings["other"].pk]
    response = client_as("operator").post(URL, {"finding": ids, "action": "ack", "reason": "replayed", "kind": ""})
    assert response.status_code == 302
    acks = Acknowledgement.objects.order_by("key")
    assert sorted(a.key for a in acks) == sorted(Finding.objects.get(pk=i).acknowledgement_key for i in ids)
    assert {(a.reason, a.username) for a in acks} == {("replayed", "user-operator")}
    assert build_overview()[0].unacknowledged == {"duplicate": 1}


def test_it_acknowledges_every_finding_matching_the_filters(client_as, findings: dict[str, Any]) -> None:
    response = client_as("admin").post(
        URL, {"scope": "matching", "binding": "tickets", "kind": "missing", "action": "mute", "reason": "known"}
    )
    assert response["Location"] == "/reconcile/findings/?binding=tickets&kind=missing"
    keys = set(Acknowledgement.objects.values_list("key", flat=True))
    assert keys == {findings["missing"].acknowledgement_key, findings["other"].acknowledgement_key}


@pytest.mark.parametrize("role", ["viewer", "none"])
def test_it_refuses_those_below_operator(client_as, findings: dict[str, Any], role: str) -> None:
    response = client_as(role).post(URL, {"scope": "matching", "action": "ack", "reason": "x"})
    assert response.status_code == 403
    assert not Acknowledgement.objects.exists()


def test_it_records_nothing_without_a_reason_or_a_selection(client_as, findings: dict[str, Any]) -> None:
    client = client_as("operator")
    client.post(URL, {"finding": [findings["missing"].pk], "action": "ack", "reason": " "})
    client.post(URL, {"action": "ack", "reason": "why"})
    assert not Acknowledgement.objects.exists()


def test_it_needs_a_csrf_token(role_users, findings: dict[str, Any]) -> None:
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    response = client.post(URL, {"scope": "matching", "action": "ack", "reason": "x"})
    assert response.status_code == 403
    assert not Acknowledgement.objects.exists()


def test_the_findings_page_pages_by_run_and_sums_the_kinds(client_as, findings: dict[str, Any]) -> None:
    html = client_as("viewer").get("/reconcile/findings/").content.decode()
    assert "3 findings:" in html
    assert ">2 missing</a>" in html and ">1 duplicate</a>" in html
    rows = [f'data-finding="{f.pk}"' for f in (findings["duplicate"], findings["missing"], findings["other"])]
    positions = [html.index(r) for r in rows]
    assert positions == sorted(positions)  # kind, then id
