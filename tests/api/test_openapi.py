"""The OpenAPI description is generated from the endpoint registry."""

from __future__ import annotations

import pytest
from django.test import Client

from auditor.api.registry import ApiCall, Param, Registry, build_openapi, openapi_path, registry

pytestmark = pytest.mark.django_db


def test_it_serves_an_openapi_31_document_of_every_registered_endpoint(bearer):
    spec = Client().get("/api/openapi.json", headers=bearer("viewer")).json()
    assert spec["openapi"] == "3.1.0"
    described = {(path, method.upper()) for path, item in spec["paths"].items() for method in item}
    registered = {(openapi_path(op.path), op.method) for op in registry.all()}
    assert described == registered
    assert {
        ("/api/me/", "GET"),
        ("/api/pipelines/bindings/", "GET"),
        ("/api/openapi.json", "GET"),
        ("/api/alerts/{alert_id}/acknowledge/", "POST"),
    } <= described


def test_it_describes_paging_filters_roles_and_bodies(bearer):
    spec = Client().get("/api/openapi.json", headers=bearer("viewer")).json()
    bindings = spec["paths"]["/api/pipelines/bindings/"]["get"]
    params = {p["name"]: p for p in bindings["parameters"]}
    assert set(params) == {"cluster", "page", "page_size"}
    assert params["page_size"]["schema"]["maximum"] == 500
    assert bindings["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["results"]["items"][
        "properties"
    ]["topic"] == {"type": "string"}
    ack = spec["paths"]["/api/alerts/{alert_id}/acknowledge/"]["post"]
    assert ack["x-required-role"] == "operator" and ack["x-token-scope"] == "write"
    assert ack["parameters"][0] == {
        "name": "alert_id",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    }
    body = ack["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["action", "reason"]
    assert body["properties"]["mute_until"]["format"] == "date-time"
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}


def test_it_describes_a_newly_registered_endpoint_without_hand_writing():
    local = Registry()

    @local.endpoint(
        "things/<slug:name>/",
        name="thing",
        summary="A thing",
        tag="things",
        query=[Param("limit", "integer", maximum=10)],
    )
    def thing(call: ApiCall, name: str) -> dict:
        return {}

    spec = build_openapi(local.all(), title="t", version="1")
    operation = spec["paths"]["/api/things/{name}/"]["get"]
    assert operation["operationId"] == "thing" and operation["x-required-role"] == "viewer"
    assert [p["name"] for p in operation["parameters"]] == ["name", "limit"]


def test_it_refuses_to_register_an_endpoint_twice():
    local = Registry()
    local.endpoint("a/", name="a", summary="a", tag="t")(lambda call: {})
    with pytest.raises(ValueError, match="registered twice"):
        local.endpoint("a/", name="b", summary="a", tag="t")(lambda call: {})
    with pytest.raises(ValueError, match="registered twice"):
        local.endpoint("c/", name="a", summary="a", tag="t")(lambda call: {})
