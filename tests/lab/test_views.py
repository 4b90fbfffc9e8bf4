"""The lab page: behind login, for every role, with the latest run's table."""

from __future__ import annotations

import pytest
from django.utils import timezone

from auditor.lab.models import LabResult, LabRun

pytestmark = pytest.mark.django_db


def test_it_sends_anonymous_visitors_to_login(client_as) -> None:
    response = client_as("anonymous").get("/lab/")
    assert response.status_code == 302 and "/login" in response["Location"]


def test_it_refuses_a_user_without_a_role(client_as) -> None:
    assert client_as("none").get("/lab/").status_code == 403


def test_it_shows_the_latest_run_to_a_viewer(client_as) -> None:
    older = LabRun.objects.create(started_at=timezone.now(), command="audit lab old", status=LabRun.OK)
    LabResult.objects.create(run=older, name="old-scenario", injected="x")
    run = LabRun.objects.create(started_at=timezone.now(), command="audit lab unclean-truncation", status=LabRun.OK)
    LabResult.objects.create(
        run=run,
        name="unclean-truncation",
        injected="leader killed -9",
        expected={"missing/broker-lost": 20},
        got={"missing/broker-lost": 19},
        misses=1,
        wrong=[{"key": "33", "expected": ["missing/broker-lost"], "got": []}],
    )
    page = client_as("viewer").get("/lab/").content.decode()
    assert "unclean-truncation" in page and "missing/broker-lost 19" in page and "key 33" in page
    assert "old-scenario" not in page and 'href="/lab/"' in page  # in the navigation
    assert "old-scenario" in client_as("viewer").get(f"/lab/?run={older.pk}").content.decode()


def test_it_rejects_a_run_that_is_not_a_number(client_as) -> None:
    assert client_as("viewer").get("/lab/?run=abc").status_code == 400
    assert client_as("viewer").get("/lab/?run=999999").status_code == 404


def test_it_says_when_there_is_no_run_yet(client_as) -> None:
    assert "No lab run yet" in client_as("viewer").get("/lab/").content.decode()
