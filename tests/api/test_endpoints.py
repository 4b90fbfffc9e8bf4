"""/api/me/ and /api/pipelines/bindings/: roles, pagination, filters."""

from __future__ import annotations

import pytest
from django.test import Client

from auditor.pipelines.models import Binding, Cluster, SourceDatabase

pytestmark = pytest.mark.django_db

ENDPOINTS = ["/api/me/", "/api/pipelines/bindings/", "/api/openapi.json", "/api/alerts/", "/api/alerts/channels/"]


@pytest.fixture
def bindings(db):
    local = Cluster.objects.create(name="local", bootstrap_servers="127.0.0.1:9092")
    other = Cluster.objects.create(name="other", bootstrap_servers="127.0.0.1:9093")
    source = SourceDatabase.objects.create(name="db", url="postgresql://app:${X}@127.0.0.1/db")
    for i in range(7):
        Binding.objects.create(
            name=f"b{i}",
            cluster=local if i < 5 else other,
            topic=f"t{i}",
            source=source,
            table="public.tickets",
            key_column="id",
        )


@pytest.mark.parametrize("path", ENDPOINTS)
def test_it_answers_401_json_to_anonymous_callers(path):
    response = Client().get(path)
    assert response.status_code == 401
    assert "error" in response.json()


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("auth", ["session", "token"])
def test_it_answers_403_to_users_without_a_role(client_as, bearer, path, auth):
    response = client_as("none").get(path) if auth == "session" else Client().get(path, headers=bearer("none"))
    assert response.status_code == 403


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_it_serves_every_read_endpoint_to_every_role(bearer, path, role):
    assert Client().get(path, headers=bearer(role)).status_code == 200


def test_it_describes_the_caller(client_as, bearer):
    body = Client().get("/api/me/", headers=bearer("operator", "write")).json()
    assert body["username"] == "user-operator"
    assert body["role"] == "operator" and body["roles"] == ["viewer", "operator"]
    assert body["auth"] == "token" and body["token"]["scope"] == "write"
    assert "token_hash" not in body["token"]
    session = client_as("viewer").get("/api/me/").json()
    assert session["auth"] == "session" and session["token"] is None


def test_it_paginates_bindings(bearer, bindings):
    headers = bearer("viewer")
    first = Client().get("/api/pipelines/bindings/?page_size=3", headers=headers).json()
    assert (first["count"], first["num_pages"], first["page"]) == (7, 3, 1)
    assert [b["name"] for b in first["results"]] == ["b0", "b1", "b2"]
    assert first["previous"] is None and "page=2" in first["next"]
    last = Client().get("/api/pipelines/bindings/?page=3&page_size=3", headers=headers).json()
    assert [b["name"] for b in last["results"]] == ["b6"] and last["next"] is None
    assert last["results"][0]["cluster"] == "other" and last["results"][0]["source"] == "db"


def test_it_filters_bindings_by_cluster(bearer, bindings):
    body = Client().get("/api/pipelines/bindings/?cluster=other", headers=bearer("viewer")).json()
    assert [b["name"] for b in body["results"]] == ["b5", "b6"]


def test_it_lists_bindings_without_a_query_per_row(bearer, bindings, django_assert_max_num_queries):
    headers = bearer("viewer")
    with django_assert_max_num_queries(5):  # token, last-used update, role, count, page
        Client().get("/api/pipelines/bindings/", headers=headers)


@pytest.mark.parametrize(
    "query,status,message",
    [
        ("page_size=501", 400, "at most 500"),
        ("page_size=0", 400, "at least 1"),
        ("page=abc", 400, "must be an integer"),
        ("page=9", 404, "does not exist"),
    ],
)
def test_it_rejects_bad_paging_with_a_clear_error(bearer, bindings, query, status, message):
    response = Client().get(f"/api/pipelines/bindings/?{query}", headers=bearer("viewer"))
    assert response.status_code == status
    assert message in response.json()["error"]


def test_it_accepts_the_maximum_page_size(bearer, bindings):
    response = Client().get("/api/pipelines/bindings/?page_size=500", headers=bearer("viewer"))
    assert response.status_code == 200 and response.json()["count"] == 7


def test_it_answers_405_to_a_method_an_endpoint_lacks(bearer):
    response = Client().delete("/api/me/", headers=bearer("admin", "write"))
    assert response.status_code == 405
    assert response["Allow"] == "GET"


def test_it_names_the_ledgers_a_binding_is_audited_from(bearer, bindings):
    Binding.objects.filter(name="b1").update(consumer_ledger_topic="b1.processed")
    body = Client().get("/api/pipelines/bindings/?page_size=3", headers=bearer("viewer")).json()
    ledgers = {b["name"]: (b["producer_ledger_topic"], b["consumer_ledger_topic"]) for b in body["results"]}
    assert ledgers["b0"] == ("_audit.producer-ledger", "_audit.consumer-ledger")
    assert ledgers["b1"] == ("_audit.producer-ledger", "b1.processed")


def test_it_names_the_zone_a_bindings_timestamps_without_one_are_read_in(bearer, bindings):
    Binding.objects.filter(name="b1").update(timestamp_zone="Asia/Tokyo")
    body = Client().get("/api/pipelines/bindings/?page_size=3", headers=bearer("viewer")).json()
    zones = {b["name"]: b["timestamp_zone"] for b in body["results"]}
    assert (zones["b0"], zones["b1"]) == ("", "Asia/Tokyo")  # "": the source database's TimeZone
