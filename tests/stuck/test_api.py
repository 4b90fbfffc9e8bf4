"""The JSON API's stuck endpoints: items and runs for readers, diagnose for operators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from auditor.api.tokens import create_token
from auditor.pipelines.models import StuckRule
from auditor.stuck import tasks
from auditor.stuck.service import record_diagnosis, start_run
from tests.support.stuck import fake_result

pytestmark = pytest.mark.django_db


@pytest.fixture
def bearer(role_users: dict[str, AbstractBaseUser]) -> Callable[..., dict[str, str]]:
    def make(role: str, scope: str = "read") -> dict[str, str]:
        _, raw = create_token(role_users[role], f"{role}-{scope}", scope)
        return {"Authorization": f"Bearer {raw}"}

    return make


def test_it_lists_open_items_with_filters(plain_rule: StuckRule, bearer: Callable[..., dict[str, str]]) -> None:
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "skipped", "B": "waiting"}))
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "waiting", "C": "skipped"}))
    client = Client()

    body = client.get("/api/stuck/items/", {"verdict": "skipped"}, headers=bearer("viewer")).json()
    assert [(i["key"], i["verdict"]) for i in body["results"]] == [("C", "skipped")]
    resolved = client.get("/api/stuck/items/", {"state": "resolved"}, headers=bearer("viewer")).json()
    assert [i["key"] for i in resolved["results"]] == ["A"]
    runs = client.get("/api/stuck/runs/", {"rule": plain_rule.name}, headers=bearer("viewer")).json()
    assert runs["count"] == 2 and runs["results"][0]["counts"]["skipped"] == 1
    assert client.get("/api/stuck/items/", {"verdict": "bogus"}, headers=bearer("viewer")).status_code == 400


def test_it_queues_a_diagnosis_for_write_tokens_of_operators(
    plain_rule: StuckRule, bearer: Callable[..., dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tasks.diagnose_rule_task, "delay", lambda *args: queued.append(args))
    url = f"/api/stuck/rules/{plain_rule.name}/diagnose/"
    client = Client()

    assert client.post(url, headers=bearer("viewer", "write")).status_code == 403
    assert client.post(url, headers=bearer("operator", "read")).status_code == 403
    response = client.post(url, headers=bearer("operator", "write"))
    assert response.status_code == 200 and response.json() == {"status": "queued", "rule": plain_rule.name}
    assert len(queued) == 1 and queued[0][:2] == (plain_rule.pk, "manual")
    assert client.post("/api/stuck/rules/nope/diagnose/", headers=bearer("operator", "write")).status_code == 404
