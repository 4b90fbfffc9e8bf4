"""Tokens: hashed at rest, bearer authentication, scopes, revocation."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.test import Client

from auditor.api.models import ApiToken
from auditor.api.tokens import authenticate_token, create_token, revoke_token

pytestmark = pytest.mark.django_db


def test_it_stores_only_the_hash_and_a_short_prefix(role_users):
    token, raw = create_token(role_users["viewer"], "grafana", "read")
    assert raw.startswith("kda_") and len(raw) >= 40
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert token.prefix == raw[:12]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM api_apitoken")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert raw not in stored
    assert raw[12:] not in stored


def test_it_authenticates_a_token_and_records_its_use(role_users):
    token, raw = create_token(role_users["viewer"], "ci", "write")
    assert token.last_used_at is None
    assert authenticate_token(raw) == token
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_it_rejects_bad_names_and_scopes(role_users):
    with pytest.raises(ValueError, match="name is required"):
        create_token(role_users["viewer"], " ", "read")
    with pytest.raises(ValueError, match="scope 'admin'"):
        create_token(role_users["viewer"], "x", "admin")


@pytest.mark.parametrize(
    "header",
    ["Bearer kda_not-a-real-token", "Bearer ", "Token abc", "Basic dXNlcjpwYXNz", "kda_abc"],
)
def test_it_answers_401_to_a_bad_token(role_users, header):
    response = Client().get("/api/me/", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json()["error"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_answers_401_to_a_revoked_token(role_users, bearer):
    headers = bearer("viewer")
    assert Client().get("/api/me/", headers=headers).status_code == 200
    revoke_token(ApiToken.objects.get())
    response = Client().get("/api/me/", headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "invalid or revoked token"}


def test_it_answers_401_when_the_tokens_user_is_deactivated(role_users, bearer):
    headers = bearer("viewer")
    role_users["viewer"].is_active = False
    role_users["viewer"].save()
    assert Client().get("/api/me/", headers=headers).status_code == 401


def test_it_refuses_a_post_with_a_read_scope_token(role_users, bearer):
    response = Client().post(
        "/api/alerts/1/acknowledge/", {}, content_type="application/json", headers=bearer("operator", "read")
    )
    assert response.status_code == 403
    assert "write-scope token" in response.json()["error"]


def test_it_accepts_a_write_scope_token_without_csrf(role_users, bearer):
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/api/alerts/999999/acknowledge/",
        {"action": "ack", "reason": "x"},
        content_type="application/json",
        headers=bearer("operator", "write"),
    )
    assert response.status_code == 404  # authenticated, authorised, validated: the alert does not exist


def test_it_keeps_csrf_for_session_authenticated_api_calls(role_users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    response = client.post(
        "/api/alerts/999999/acknowledge/", {"action": "ack", "reason": "x"}, content_type="application/json"
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]
    client.get("/api/tokens/")  # sets the CSRF cookie
    response = client.post(
        "/api/alerts/999999/acknowledge/",
        {"action": "ack", "reason": "x"},
        content_type="application/json",
        headers={"X-CSRFToken": client.cookies["csrftoken"].value},
    )
    assert response.status_code == 404


def test_it_lets_a_token_act_only_with_its_users_role(role_users, bearer):
    response = Client().post(
        "/api/alerts/1/acknowledge/",
        {"action": "ack", "reason": "x"},
        content_type="application/json",
        headers=bearer("viewer", "write"),
    )
    assert response.status_code == 403
    assert "operator role" in response.json()["error"]
