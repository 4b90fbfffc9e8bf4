"""/api/canary/points/: roles, filters, pagination, and its OpenAPI description."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from auditor.canary.models import CanaryPoint

pytestmark = pytest.mark.django_db

URL = "/api/canary/points/"
START = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def topic() -> str:
    name = f"canary-api-{uuid.uuid4().hex[:6]}"
    for minute in range(3):
        for partition in range(2):
            CanaryPoint.objects.create(
                session="s" * 32,
                topic=name,
                minute=START + timedelta(minutes=minute),
                partition=partition,
                leader=partition + 1,
                sent=600,
                received=600 - minute,
                lost=minute,
                p99_ms=10.0 * (minute + 1) if partition == 0 else None,
            )
    CanaryPoint.objects.create(session="s" * 32, topic=f"{name}-other", minute=START, partition=0)
    return name


def test_it_answers_401_to_anonymous_callers(topic):
    response = Client().get(URL)
    assert response.status_code == 401 and "error" in response.json()


@pytest.mark.parametrize("auth", ["session", "token"])
def test_it_answers_403_to_users_without_a_role(client_as, bearer, auth):
    response = client_as("none").get(URL) if auth == "session" else Client().get(URL, headers=bearer("none"))
    assert response.status_code == 403


def test_it_serves_a_viewer_session_and_token(client_as, bearer, topic):
    assert client_as("viewer").get(URL, {"topic": topic}).json()["count"] == 6
    assert Client().get(URL, {"topic": topic}, headers=bearer("viewer")).json()["count"] == 6


def test_it_lists_points_newest_minute_first(bearer, topic):
    body = Client().get(URL, {"topic": topic, "page_size": 4}, headers=bearer("viewer")).json()
    assert (body["count"], body["num_pages"]) == (6, 2)
    assert [(p["minute"], p["partition"]) for p in body["results"]] == [
        ("2031-05-01T12:02:00+00:00", 0),
        ("2031-05-01T12:02:00+00:00", 1),
        ("2031-05-01T12:01:00+00:00", 0),
        ("2031-05-01T12:01:00+00:00", 1),
    ]
    first = body["results"][0]
    assert first == {
        "topic": topic,
        "session": "s" * 32,
        "cluster": "",
        "bootstrap_servers": "",
        "scope": "",
        "minute": "2031-05-01T12:02:00+00:00",
        "partition": 0,
        "leader": 1,
        "sent": 600,
        "received": 598,
        "lost": 2,
        "lost_leaders": {},
        "duplicated": 0,
        "out_of_order": 0,
        "late": 0,
        "produce_errors": 0,
        "unacked": 0,
        "truncated": 0,
        "p50_ms": None,
        "p99_ms": 30.0,
        "max_ms": None,
        "partial": False,
    }


def test_it_filters_by_partition_and_time(bearer, topic):
    query = {"topic": topic, "partition": 1, "since": "2031-05-01T12:01:00Z", "until": "2031-05-01T12:02:00Z"}
    body = Client().get(URL, query, headers=bearer("viewer")).json()
    assert [(p["minute"], p["partition"], p["lost"]) for p in body["results"]] == [("2031-05-01T12:01:00+00:00", 1, 1)]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"partition": "-1"}, "query parameter 'partition' must be at least 0"),
        ({"partition": "x"}, "query parameter 'partition' must be an integer"),
        ({"since": "yesterday"}, "query parameter 'since' must be an ISO 8601 date-time"),
        ({"since": "2031-05-01T12:00:00"}, "must carry a time zone"),
        ({"since": "2031-05-01T12:00:00Z", "until": "2031-05-01T11:00:00Z"}, "since must be earlier than until"),
    ],
)
def test_it_names_a_bad_filter(bearer, query, message):
    response = Client().get(URL, query, headers=bearer("viewer"))
    assert response.status_code == 400 and message in response.json()["error"]


def test_it_lists_points_in_a_fixed_number_of_queries(bearer, topic, django_assert_max_num_queries):
    headers = bearer("viewer")
    with django_assert_max_num_queries(5):  # token, last-used update, role, count, page
        Client().get(URL, headers=headers)


def test_it_is_described_in_the_openapi_document(bearer):
    spec = Client().get("/api/openapi.json", headers=bearer("viewer")).json()
    operation = spec["paths"]["/api/canary/points/"]["get"]
    assert operation["operationId"] == "canary-points-list" and operation["x-required-role"] == "viewer"
    assert [p["name"] for p in operation["parameters"]] == ["topic", "partition", "since", "until", "page", "page_size"]
